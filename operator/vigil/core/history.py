"""What the history database records: one row per execution attempt, as plain data.

The row is the same whichever tier produced it and whichever database stores
it; it is written idempotently keyed on (execution id, attempt), so a record
buffered through an outage and written twice is still one row.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from enum import StrEnum


class AttemptState(StrEnum):
    READY = "ready"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD = "dead"


@dataclasses.dataclass(frozen=True)
class AttemptRecord:
    execution_id: str
    attempt: int
    namespace: str
    job: str
    job_uid: str
    priority: str
    state: AttemptState
    scheduled_for: datetime
    reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    pod: str = ""
    error: str = ""
    updated_at: datetime | None = None
