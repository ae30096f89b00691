"""In-memory twins of the core's ports, for unit tests and the contract suite.

They follow the same contracts as the Kubernetes adapters — versioned
conditional marks, idempotent inserts, "exists" on a second launch — so a test
that passes here says something about the real thing.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta

from vigil.core.buckets import (
    BUCKET_BYTE_BUDGET,
    Bucket,
    BucketEntry,
    Mark,
    bucket_name,
    minute_of,
    shard_candidates,
)
from vigil.core.chain import EntryPlan, Fire, JobLookup, JobView
from vigil.core.ports import Conflict, Launch


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta) -> datetime:
        self._now += delta
        return self._now

    def set(self, at: datetime) -> None:
        self._now = at


@dataclasses.dataclass
class _StoredBucket:
    minute: datetime
    entries: list[BucketEntry]
    marks: dict[str, Mark]
    version: int
    complete: bool = False
    weight: int = 0  # bytes of its entries (BucketEntry.weight)


class MemoryBucketStore:
    def __init__(self, *, shards: int = 4, max_per_bucket: int = 2000, max_bytes: int = BUCKET_BYTE_BUDGET) -> None:
        self.shards = shards
        self.max_per_bucket = max_per_bucket
        self.max_bytes = max_bytes
        self._buckets: dict[str, _StoredBucket] = {}
        self._lock = threading.Lock()
        self._versions = itertools.count(1)
        self._inserted: set[datetime] = set()  # minutes inserted into since `inserted_minutes` last said
        self.reads = 0  # minutes read: the cost a tick pays

    def _snapshot(self, name: str, stored: _StoredBucket) -> Bucket:
        return Bucket(
            name=name,
            minute=stored.minute,
            entries=tuple(stored.entries),
            marks=dict(stored.marks),
            version=str(stored.version),
        )

    def read_minute(self, minute: datetime) -> list[Bucket]:
        self.reads += 1
        prefix = bucket_name(minute, 0).rsplit("-", 1)[0] + "-"
        with self._lock:
            return [self._snapshot(n, b) for n, b in sorted(self._buckets.items()) if n.startswith(prefix)]

    def pending_minutes(self, *, until: datetime) -> list[datetime]:
        with self._lock:
            minutes = {
                b.minute
                for b in self._buckets.values()
                if b.minute <= until and any(e.key not in b.marks for e in b.entries)
            }
        return sorted(minutes)

    def insert(self, entry: BucketEntry) -> str:
        minute = minute_of(entry.fire_at)
        with self._lock:
            for shard in shard_candidates(entry.uid, self.shards):
                name = bucket_name(minute, shard)
                stored = self._buckets.setdefault(name, _StoredBucket(minute, [], {}, next(self._versions)))
                if any(e.key == entry.key for e in stored.entries):
                    return name
                if len(stored.entries) < self.max_per_bucket and stored.weight + entry.weight <= self.max_bytes:
                    stored.entries.append(entry)
                    stored.weight += entry.weight
                    stored.version = next(self._versions)
                    stored.complete = False
                    self._inserted.add(minute)
                    return name
        raise RuntimeError(f"minute {minute.isoformat()} is full in every shard")

    def insert_later(self, entry: BucketEntry) -> Future[str]:
        """`insert`, done before it returns (nothing here waits on a round trip)."""
        future: Future[str] = Future()
        try:
            future.set_result(self.insert(entry))
        except Exception as error:
            future.set_exception(error)
        return future

    def mark(self, bucket: str, marks: Mapping[str, Mark], *, version: str) -> Bucket:
        with self._lock:
            stored = self._buckets[bucket]
            if str(stored.version) != version:
                raise Conflict(f"bucket {bucket}: version {version} is stale")
            for key, mark in marks.items():
                stored.marks.setdefault(key, mark)
            stored.version = next(self._versions)
            return self._snapshot(bucket, stored)

    def complete(self, bucket: str, *, version: str) -> None:
        with self._lock:
            stored = self._buckets[bucket]
            if str(stored.version) != version:
                raise Conflict(f"bucket {bucket}: version {version} is stale")
            stored.complete = True

    def inserted_minutes(self) -> list[datetime]:
        with self._lock:
            minutes, self._inserted = sorted(self._inserted), set()
        return minutes

    def remove(self, bucket: str, key: str) -> None:
        with self._lock:
            stored = self._buckets[bucket]
            stored.entries = [e for e in stored.entries if e.key != key]
            stored.weight = sum(e.weight for e in stored.entries)
            stored.version = next(self._versions)

    def all_entries(self) -> list[tuple[str, BucketEntry]]:
        with self._lock:
            return [(n, e) for n, b in sorted(self._buckets.items()) for e in b.entries]


class MemoryCatalogue:
    """Jobs by (namespace, name); one marked invalid is found as the Kubernetes catalogue finds
    a spec it cannot convert: no job, `invalid` set."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], JobView] = {}
        self.invalid: set[tuple[str, str]] = set()

    def put(self, job: JobView) -> None:
        self.jobs[(job.namespace, job.name)] = job

    def lookup(self, namespace: str, name: str, *, uid: str = "") -> JobLookup:
        key = (namespace, name)
        if key in self.invalid:
            return JobLookup(job=None, invalid=True)
        return JobLookup(job=self.jobs.get(key))


@dataclasses.dataclass(frozen=True)
class LaunchCall:
    """One call to `MemoryLauncher.launch`: the occurrence asked for and what the launcher answered."""

    fire: Fire
    result: Launch


class MemoryLauncher:
    """Creates 'executions' named by execution id; a second launch of the same id reports it existed.

    Every call is kept in `calls`, in order, so a test counts creations — and a launcher that
    created one occurrence twice shows the duplicate — rather than counting what is stored,
    where a second creation under the same name would hide.
    """

    def __init__(self) -> None:
        self.executions: dict[str, Fire] = {}  # what exists, by name: the API server's view
        self.calls: list[LaunchCall] = []
        self._lock = threading.Lock()

    def launch(self, fire: Fire) -> Launch:
        with self._lock:
            result = self._create(fire)
            self.calls.append(LaunchCall(fire, result))
            return result

    def _create(self, fire: Fire) -> Launch:
        """Create under the execution id; one that exists is left alone (the real 409 AlreadyExists)."""
        if fire.execution_id in self.executions:
            return Launch(created=False)
        self.executions[fire.execution_id] = fire
        return Launch(created=True)

    @property
    def attempts(self) -> int:
        """Every launch asked of this launcher, repeats included."""
        return len(self.calls)

    @property
    def creations(self) -> list[Fire]:
        """The occurrences of every launch that created an execution, in call order."""
        return [call.fire for call in self.calls if call.result.created]


class MemoryLedger:
    """Applies plans to the catalogue's jobs the way the Kubernetes ledger updates status.

    Outcomes live on the job, as in the job's status: a plan for a job that no longer exists
    records nothing.
    """

    def __init__(self, catalogue: MemoryCatalogue) -> None:
        self.catalogue = catalogue
        # (namespace, name, nominal, outcome) -> execution id or reason
        self.outcomes: dict[tuple[str, str, datetime, str], str] = {}

    def record(self, plan: EntryPlan, *, launched: Mapping[str, bool], now: datetime) -> None:
        job = self.catalogue.jobs.get((plan.namespace, plan.name))
        if job is None:
            return
        for fire in plan.fires:
            self.outcomes[(plan.namespace, plan.name, fire.occurrence.nominal, "Fired")] = fire.execution_id
        for rec in plan.records:
            self.outcomes[(plan.namespace, plan.name, rec.occurrence.nominal, str(rec.outcome))] = str(rec.reason)
        handled = plan.handled_through
        if handled is None:
            return
        if job.last_nominal is None or handled > job.last_nominal:
            self.catalogue.put(dataclasses.replace(job, last_nominal=handled))
