"""What the trigger publishes about how far it has got: the watchdog's way to tell behind from broken.

A chain head whose fire time passed long ago is either a broken chain (the trigger went past it
and never handled it) or a trigger still working through a backlog (a thousand jobs due in one
minute take a while to fire, and a bucket's markers are written when its entries are done). A
bigger fixed grace cannot tell the two apart; the trigger's own account can. So the trigger
publishes, every few seconds while it runs:

* `at` — when it published: a trigger that has not published for a grace is not "working
  through" anything, and its stale heads count as broken, as before;
* `handled_before` — every due entry of the minutes it walked whose fire time is before this has
  been handled (marked), except the entries of jobs it is retrying; it is the `now` of its last
  complete pass. A stale head at or after it is *behind*; one before it was passed over;
* `backlog` — due entries the pass in flight has still to handle (what "behind" means, in numbers);
* `retrying` — jobs whose entry failed and waits for a retry with backoff (their later entries
  wait behind it): their heads are late because their launches fail, which the watchdog reports
  as LaunchFailing, not as a broken chain. At most `RETRYING_PUBLISHED` are named;
  `retrying_count` says how many there are.

Pure data and pure judgement; the trigger fills it in (`vigil.core.trigger`), an adapter carries
it to the API server, and the watchdog's rules (`vigil.core.watchdog.assess_chain`) read it.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from enum import StrEnum

from vigil.core.timeparse import require_aware

#: Jobs named in one publication: enough to cover a bad hour, small enough for one object.
RETRYING_PUBLISHED = 500


def job_key(namespace: str, name: str) -> str:
    """How a job is named in `retrying`."""
    return f"{namespace}/{name}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TriggerProgress:
    at: datetime
    handled_before: datetime | None = None  # None: no pass has completed yet
    backlog: int = 0
    retrying: frozenset[str] = frozenset()
    retrying_count: int = 0

    def __post_init__(self) -> None:
        require_aware(self.at, name="progress: at")
        if self.handled_before is not None:
            require_aware(self.handled_before, name="progress: handled_before")
        if self.backlog < 0 or self.retrying_count < len(self.retrying):
            raise ValueError(f"progress: backlog {self.backlog}, retrying_count {self.retrying_count} are inconsistent")


class HeadState(StrEnum):
    """What the trigger's progress says about a chain head past its fire time."""

    UNKNOWN = "Unknown"  # nothing published, or not for a while: the trigger may be down
    BEHIND = "Behind"  # the trigger has not reached it yet: it is working through a backlog
    RETRYING = "Retrying"  # its job's launch failed and is retried with backoff
    PASSED = "Passed"  # the trigger handled everything due then, yet this is unmarked: lost


def head_state(
    progress: TriggerProgress | None, *, namespace: str, name: str, fire_at: datetime, now: datetime, alive_within: timedelta
) -> HeadState:
    """Judge one late chain head by the trigger's published progress."""
    if progress is None or now - progress.at > alive_within:
        return HeadState.UNKNOWN
    if job_key(namespace, name) in progress.retrying:
        return HeadState.RETRYING
    if progress.handled_before is None or fire_at >= progress.handled_before:
        return HeadState.BEHIND
    return HeadState.PASSED
