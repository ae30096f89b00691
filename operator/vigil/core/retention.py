"""Which finished executions a job keeps on the API server, and which go.

Kubernetes objects are the home of what is live, not of the record: the
history database keeps every attempt. So each job keeps only its newest few
finished executions, like CronJob's history limits — `succeeded` that ended
Succeeded and `failed` that ended Dead or Cancelled — and the rest are deleted
with their pods. Only executions whose history is written may go: one still
waiting for the history database (down, say) stays, however old, so nothing is
ever lost. Active executions never go. Pure: the caller says what exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime

from vigil.core.executions import Phase


@dataclasses.dataclass(frozen=True)
class Limits:
    """How many finished executions of one job stay, by how they ended."""

    succeeded: int = 3
    failed: int = 1  # Dead or Cancelled

    def __post_init__(self) -> None:
        if self.succeeded < 0 or self.failed < 0:
            raise ValueError(f"retention limits must not be negative: {self}")


@dataclasses.dataclass(frozen=True)
class Finished:
    """What retention needs to know of one execution."""

    name: str
    phase: Phase
    ended: datetime | None  # when it finished (None: not finished)
    history_written: bool


def to_delete(executions: Iterable[Finished], limits: Limits) -> list[str]:
    """The names to delete: finished, history written, and older than the newest `limits` of
    their kind. Newest by end time (ties by name, so the answer is the same on every replica)."""
    kept_by_kind = {Phase.SUCCEEDED: limits.succeeded, Phase.DEAD: limits.failed}
    finished = [e for e in executions if e.phase.terminal and e.ended is not None]
    out: list[str] = []
    for kind, keep in kept_by_kind.items():
        same = [e for e in finished if _kind(e.phase) is kind]
        same.sort(key=lambda e: (e.ended, e.name), reverse=True)
        out.extend(e.name for e in same[keep:] if e.history_written)
    return sorted(out)


def _kind(phase: Phase) -> Phase:
    return Phase.SUCCEEDED if phase is Phase.SUCCEEDED else Phase.DEAD
