"""What the history database records: one row per execution attempt, as plain data.

The row is the same whichever tier produced it and whichever database stores
it; it is written idempotently keyed on (execution id, attempt), so a record
buffered through an outage and written twice is still one row.

Workflows are mirrored the same way, one row per entry of a workflow's
append-only history (`WorkflowEventRecord`), keyed on (workflow uid, position):
an entry never changes once appended, so writing it again keeps the first row.
Entry 0 also carries the workflow's pinned definition: with it the history can
be folded into the workflow's state after the Workflow object is deleted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any


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


@dataclasses.dataclass(frozen=True)
class WorkflowEventRecord:
    """One entry of a workflow's append-only history, as the history database keeps it.

    The key is (`workflow_uid`, `seq`): the uid tells apart two workflows that had the
    same name at different times, and `seq` is the entry's 0-based position in that
    workflow's history. `event`, `step`, `attempt` and `at` are copied out of the entry
    for querying; `data` is the whole entry as plain JSON data (what the status holds).
    """

    namespace: str
    workflow: str
    workflow_uid: str
    seq: int
    event: str
    step: str | None
    attempt: int | None
    at: datetime  # timezone-aware; read back as UTC
    data: Mapping[str, Any]
    #: Entry 0 only: the pinned definition the history folds over (the Workflow's
    #: ``status.definition``), so the history can still be read once the Workflow is deleted.
    #: None on every other entry, and on an entry 0 mirrored before the database kept it.
    definition: Mapping[str, Any] | None = None


#: Executions per page of a job's history, when the caller names no number, and at most.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


@dataclasses.dataclass(frozen=True)
class ExecutionSummary:
    """One execution as the history database remembers it, once its Execution may be gone.

    The last recorded attempt gives the state (the execution's final one, when it finished),
    reason, error, pod and finish time; ``attempts`` is that attempt's number, and
    ``started_at`` the first attempt's start.
    """

    execution_id: str
    namespace: str
    job: str
    job_uid: str
    priority: str
    scheduled_for: datetime
    state: AttemptState
    attempts: int
    reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    pod: str = ""
    error: str = ""


@dataclasses.dataclass(frozen=True)
class HistoryCursor:
    """Where a page of a job's history ended: the next page starts after this execution, in
    newest-first order (by scheduled time, then execution id)."""

    scheduled_for: datetime
    execution_id: str


@dataclasses.dataclass(frozen=True)
class ExecutionPage:
    """A page of a job's executions, newest first; ``after`` is None on the last page."""

    executions: list[ExecutionSummary]
    after: HistoryCursor | None = None


@dataclasses.dataclass(frozen=True)
class WorkflowCursor:
    """Where a page of a workflow's history ended: the next page holds that workflow's (by uid)
    entries after ``seq``; a seq of -1 starts at its first entry."""

    workflow_uid: str
    seq: int


@dataclasses.dataclass(frozen=True)
class WorkflowHistoryPage:
    """A page of one workflow's history entries, in seq order; ``after`` is None on the last
    page. Every page is of the one workflow (uid) the first page found."""

    entries: list[WorkflowEventRecord]
    after: WorkflowCursor | None = None
