"""The one conflict retry policy: a step that lost a race is run again, from a fresh read, a
bounded number of times.

Every status and bucket Vigil keeps is written conditionally on the version it was read at, so
a concurrent writer is never overwritten silently: the loser gets `Conflict`
(`vigil.core.ports`). `retry_on_conflict` is client-go's `RetryOnConflict`: it reruns the whole
read-decide-write step, each time from a fresh read, at most `CONFLICT_TRIES` times, and every
retry of a conflict in Vigil goes through it (the core's trigger here; the adapters, the CLI
included, through `vigil.kube.kits.conflicts`, which also turns a 409 into `Conflict`). The budget is
one number for every caller, so how hard Vigil insists is decided once.

It is here, beside the core, because the trigger's marker writes retry too and the core imports
no adapter; it is pure (no waiting between tries: a conflict means another writer has just
succeeded, so the next read sees its write).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from vigil.core.ports import Conflict

T = TypeVar("T")

#: Attempts of one read-decide-write step before it gives up for this pass (the caller's next
#: pass, or the user, tries again). A conflict means another writer just succeeded, and each
#: lost race is to one of the object's concurrent writers: sized for the most contended object,
#: a minute's ScheduleBucket (the group-commit writer's inserts, the trigger's markers from
#: several passes, removals and completions at once), which needed ten. A cooler object (a
#: job's status, a workflow's, the approval key's Secret) never comes near it; ten in a row on
#: one means something is wrong with it, not that it is busy.
CONFLICT_TRIES = 10


def retry_on_conflict(step: Callable[[], T], *, tries: int = CONFLICT_TRIES) -> T:
    """Run `step` (read fresh, decide, write conditionally) until it does not raise `Conflict`,
    at most `tries` times (the last Conflict is raised). `tries` is for tests; callers use the
    one budget."""
    for attempt in range(tries):
        try:
            return step()
        except Conflict:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")
