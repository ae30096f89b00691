"""Conditional writes that lost a race: a 409 becomes the core's `Conflict`, and is retried by
the one policy.

Every status Vigil keeps is written with the resourceVersion it was built from,
so a concurrent writer (the other replica during a failover, a handler, a user)
is never overwritten silently; the loser gets 409 Conflict. `conflict_from` turns
that into `vigil.core.ports.Conflict`, and `retry_on_conflict` (client-go's
`RetryOnConflict`, `vigil.core.conflicts`) reruns the whole read-decide-write step,
each time from a fresh read, at most `CONFLICT_TRIES` times: one budget for every
adapter and the CLI, with its reason written beside it there. Nothing in the adapters
retries a conflict any other way.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from vigil.core.conflicts import CONFLICT_TRIES, retry_on_conflict
from vigil.core.ports import Conflict

__all__ = ["CONFLICT_TRIES", "conflict_from", "retry_on_conflict"]


def conflict_from(err: ApiException, what: str = "") -> None:
    """Re-raise a 409 as the core's `Conflict` (saying `what` changed); any other error is left
    for the caller."""
    if err.status == 409:
        raise Conflict(what or str(err.reason)) from err
