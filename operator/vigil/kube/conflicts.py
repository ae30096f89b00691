"""Conditional writes that lost a race: read again, decide again, write again.

Every status Vigil keeps is written with the resourceVersion it was built from,
so a concurrent writer (the other replica during a failover, a handler, a user)
is never overwritten silently; the loser gets 409 Conflict. `retry_on_conflict`
is client-go's `RetryOnConflict`: it reruns the whole read-decide-write step a
bounded number of times, each time from a fresh read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kubernetes.client.exceptions import ApiException

from vigil.core.ports import Conflict

T = TypeVar("T")

#: Attempts before a write gives up for this pass. A conflict means another writer just
#: succeeded; five in a row means a hot object, and the caller's next pass tries again.
CONFLICT_TRIES = 5


def conflict_from(err: ApiException, what: str = "") -> None:
    """Re-raise a 409 as the core's `Conflict` (saying `what` changed); any other error is left
    for the caller."""
    if err.status == 409:
        raise Conflict(what or str(err.reason)) from err


def retry_on_conflict(step: Callable[[], T], *, tries: int = CONFLICT_TRIES) -> T:
    """Run `step` (read fresh, decide, write conditionally) until it does not raise `Conflict`."""
    for attempt in range(tries):
        try:
            return step()
        except Conflict:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")
