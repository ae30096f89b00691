"""When a finished Workflow leaves the API server: `ttlAfterFinished`, and never before its history.

Kubernetes objects are the home of what is live; the history database is the
record. So a Workflow that finished (Succeeded, Failed, Compensated or
Cancelled) is deleted once its time to live has passed since it finished — like
a Job's `ttlSecondsAfterFinished` — but only when every entry of its history is
in the history database: one whose history is still waiting for the database
(down, say) stays, however old, so nothing is ever lost. A workflow that has
not finished never goes, whatever the clock says.

The time to live is the workflow's own `spec.ttlAfterFinished`, else the
operator's default (`workflows.ttlAfterFinished`); zero, on either, keeps the
workflow forever. Pure: the caller says what the status holds and what time it
is, and gets a verdict with the time to look again (:func:`next_look` merges it
with the workflow's own next wake-up).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from enum import StrEnum

from vigil.core.workflow import TERMINAL_WORKFLOW_PHASES


class Verdict(StrEnum):
    """What becomes of one workflow now."""

    #: Not finished, or kept forever (no time to live).
    KEEP = "Keep"
    #: Finished; its time to live has not passed yet (look again at `Decision.at`).
    WAIT = "Wait"
    #: Its time to live has passed, but some of its history is not in the database yet.
    AWAIT_HISTORY = "AwaitHistory"
    #: Finished, past its time to live, its whole history in the database: it goes.
    DELETE = "Delete"


@dataclasses.dataclass(frozen=True)
class Decision:
    verdict: Verdict
    #: With WAIT: when the time to live passes.
    at: datetime | None = None


@dataclasses.dataclass(frozen=True)
class WorkflowEnd:
    """What the rule needs of one Workflow's status."""

    phase: str | None
    finished_at: datetime | None
    #: History entries recorded, counted from the first (those folded into the checkpoint too).
    recorded: int
    #: How many of them, from the first, are in the history database.
    mirrored: int

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_WORKFLOW_PHASES and self.finished_at is not None


def time_to_live(own: timedelta | None, default: timedelta | None) -> timedelta | None:
    """The workflow's own time to live, else the default; None (kept forever) when it is zero."""
    ttl = own if own is not None else default
    return ttl if ttl is not None and ttl > timedelta(0) else None


def decide(end: WorkflowEnd, *, ttl: timedelta | None, now: datetime) -> Decision:
    """Whether the workflow goes now, waits for its time, waits for its history, or stays."""
    if not end.finished or ttl is None:
        return Decision(Verdict.KEEP)
    assert end.finished_at is not None  # finished says so
    expires = end.finished_at + ttl
    if now < expires:
        return Decision(Verdict.WAIT, at=expires)
    if end.mirrored < end.recorded:
        return Decision(Verdict.AWAIT_HISTORY)
    return Decision(Verdict.DELETE)


def next_look(wake: datetime | None, decision: Decision) -> datetime | None:
    """When a finished workflow next needs a pass, given its own next wake-up (``wake``) and the
    rule's ``decision`` after the pass: never once it is deleted, else the earlier of the two
    (a WAIT's time to live passing); None: nothing but a change brings it back."""
    if decision.verdict is Verdict.DELETE:
        return None
    return min((at for at in (wake, decision.at) if at is not None), default=None)
