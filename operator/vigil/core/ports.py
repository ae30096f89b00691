"""The core's ports: the few things it asks of the world, as Protocols.

Each port has a real adapter (Kubernetes objects today, PostgreSQL in the volume
tier later) and an in-memory twin in `vigil.core.memory` for unit tests; one
contract suite runs against every implementation. The core sees only these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from concurrent.futures import Future
from datetime import datetime
from typing import Protocol

from vigil.core.buckets import Bucket, BucketEntry, Mark
from vigil.core.chain import EntryPlan, Fire, JobLookup
from vigil.core.history import AttemptRecord, WorkflowEventRecord
from vigil.core.logtail import LogTail


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...


class Conflict(Exception):
    """A conditional write lost to a concurrent writer; re-read and decide again."""


class BucketStore(Protocol):
    """The time-partitioned schedule."""

    def read_minute(self, minute: datetime) -> list[Bucket]:
        """Every bucket of one minute (all shards), with entries and markers."""
        ...

    def pending_minutes(self, *, until: datetime) -> list[datetime]:
        """Minutes up to `until` that still hold an unmarked entry, oldest first.

        Used once when leadership starts and as a periodic safety net, never per tick.
        """
        ...

    def insert(self, entry: BucketEntry) -> str:
        """Add an entry to its minute's bucket; idempotent by key. Returns the bucket name."""
        ...

    def insert_later(self, entry: BucketEntry) -> Future[str]:
        """`insert`, begun: the future gives the bucket name (or the error) once the entry is in."""
        ...

    def mark(self, bucket: str, marks: Mapping[str, Mark], *, version: str) -> Bucket:
        """Write fired markers, conditional on `version`; raise Conflict if it moved.

        A marker already present is never overwritten: the first writer wins.
        """
        ...

    def complete(self, bucket: str, *, version: str) -> None:
        """Note that every entry of a past bucket is marked, so scans skip it; conditional on
        `version` (the bucket as read, every entry marked): raise Conflict if it moved since (an
        entry inserted late), and it stays pending.
        """
        ...

    def inserted_minutes(self) -> list[datetime]:
        """The minutes this store's inserts put a new entry into since the last call, each once:
        the trigger looks again at those it has walked past (an entry inserted late)."""
        ...

    def remove(self, bucket: str, key: str) -> None:
        """Delete one entry (operations and tests: how a chain gets broken)."""
        ...


class JobCatalogue(Protocol):
    def lookup(self, namespace: str, name: str, *, uid: str = "") -> JobLookup:
        """The job as it is now; `job` is None when it no longer exists. A copy kept under
        another uid than `uid` (when given) is stale: the job was deleted and created again."""
        ...


@dataclasses.dataclass(frozen=True)
class Launch:
    """What launching one fired occurrence did."""

    created: bool  # False: it already existed (a repeated pass), or it was skipped or refused
    skipped: str = ""  # a reason when the occurrence was not started at all (concurrencyPolicy Forbid)
    refused: str = ""  # why the cluster refused it for good (a quota, a webhook, a 4xx): never retried
    refused_reason: str = ""  # a chain.Reason for `refused` ("": LaunchRefused), e.g. QuotaExceeded


class Launcher(Protocol):
    def launch(self, fire: Fire) -> Launch:
        """Create the occurrence's execution, idempotently.

        A refusal that will not change on a retry is returned as `refused`; one that may (throttled,
        the server busy, a timeout) is raised, and the trigger retries that entry with backoff.
        """
        ...


class Ledger(Protocol):
    def record(self, plan: EntryPlan, *, launched: Mapping[str, bool], now: datetime) -> None:
        """Write the plan's outcomes to the job (status, Events), idempotently.

        `launched` maps each fired execution id to whether this pass created it.
        """
        ...


class HistoryUnavailable(Exception):
    """The history database cannot be reached; the caller keeps the records and retries later."""


class HistorySink(Protocol):
    """Where finished and in-flight attempts are recorded for querying (off the firing path)."""

    def write(self, records: list[AttemptRecord]) -> None:
        """Upsert attempts by (execution id, attempt); raise HistoryUnavailable if unreachable."""
        ...


class WorkflowHistorySink(Protocol):
    """Where workflow history entries are mirrored for querying (off the orchestration path)."""

    def write_workflow_events(self, records: list[WorkflowEventRecord]) -> None:
        """Insert entries by (workflow uid, seq), keeping a row already there (entries never
        change); raise HistoryUnavailable if the database is unreachable."""
        ...

    def workflow_event(self, workflow_uid: str, seq: int) -> WorkflowEventRecord | None:
        """Entry ``seq`` of the workflow ``workflow_uid``, or None when it was never written (or
        has expired); raise HistoryUnavailable if the database is unreachable. Read back only
        for a step output that left the Workflow's status (vigil.core.checkpoint)."""
        ...


class LogTailSink(Protocol):
    """Where the tails of attempts' logs are kept once their pods are gone (off the firing path)."""

    def write_log_tail(self, tail: LogTail) -> None:
        """Store the tail by (execution id, attempt), keeping one stored before (a tail that was
        read replaces only a note that it could not be); raise HistoryUnavailable if unreachable."""
        ...

    def has_log_tail(self, execution_id: str, attempt: int) -> bool:
        """Is the attempt's tail stored (so its log need not be read again)? HistoryUnavailable
        if unreachable."""
        ...
