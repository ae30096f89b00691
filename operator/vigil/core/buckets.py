"""Where an occurrence lives in the time-partitioned schedule.

The schedule is stored as one bucket per (minute, shard): a tick reads only the
minutes that are due, so its cost follows the work due now rather than the size
of the catalogue. This module is the arithmetic of that layout — which minute,
which shard, what the object is called, what an entry's key is — and nothing
else; the stores (Kubernetes objects, memory) follow it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta
from enum import StrEnum

MINUTE = timedelta(minutes=1)

#: Bytes of entries (with the markers they will get) one bucket object may hold. etcd refuses an
#: object over 1.5 MB; an entry's size follows its job's namespace and name (up to 63 and 253
#: characters), so a count alone could pass it. The margin covers metadata and managedFields.
BUCKET_BYTE_BUDGET = 1_000_000
#: What the JSON of an entry and of its marker add beyond their variable strings: field names,
#: quotes, timestamps with milliseconds, the outcome, the generation (measured, rounded up).
_ENTRY_FIXED_BYTES = 260
_MARK_FIXED_BYTES = 120
MINUTE_LABEL_FORMAT = "%Y%m%d%H%M"


class Outcome(StrEnum):
    """How an occurrence ended, as recorded in the trigger ledger."""

    FIRED = "Fired"
    MISSED = "Missed"
    SUPERSEDED = "Superseded"
    SKIPPED = "Skipped"
    SUSPENDED = "Suspended"
    FAILED = "Failed"  # the launch was refused for good (a quota, an admission webhook): settled
    MANUAL = "Manual"  # a run outside the schedule (`kubectl vigil run`): in the job's ledger only


@dataclasses.dataclass(frozen=True)
class BucketEntry:
    """One occurrence waiting in a bucket.

    `key` is unique per insertion intent (job, nominal time, schedule version,
    and whether it is a resume), so inserting the same intent twice is a no-op.
    `fire_at` decides the bucket; the trigger recomputes lateness from the
    nominal time and the job's jitter, never from where the entry was stored.
    """

    key: str
    namespace: str
    name: str
    uid: str
    generation: int
    schedule_hash: str
    nominal: datetime
    fire_at: datetime
    resume: bool = False

    @property
    def weight(self) -> int:
        """Bytes this entry takes in its bucket object, counting the marker it will get (whose
        key repeats the entry's, with an execution id of about the key's length)."""
        strings = len(self.key) + len(self.namespace) + len(self.name) + len(self.uid) + len(self.schedule_hash)
        return strings + _ENTRY_FIXED_BYTES + 2 * len(self.key) + _MARK_FIXED_BYTES


@dataclasses.dataclass(frozen=True)
class Mark:
    """The fired marker the trigger writes into a bucket's status for one entry."""

    outcome: Outcome
    at: datetime
    execution_id: str | None = None
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A bucket as read from a store: its entries, its markers, and its version."""

    name: str
    minute: datetime
    entries: tuple[BucketEntry, ...]
    marks: dict[str, Mark]
    version: str = ""

    def pending(self) -> list[BucketEntry]:
        return [e for e in self.entries if e.key not in self.marks]

    def due(self, now: datetime) -> list[BucketEntry]:
        return sorted((e for e in self.pending() if e.fire_at <= now), key=lambda e: e.fire_at)


def minute_of(at: datetime) -> datetime:
    """The bucket minute holding an instant: UTC, seconds dropped."""
    return at.astimezone(UTC).replace(second=0, microsecond=0)


def minute_label(minute: datetime) -> str:
    return minute.astimezone(UTC).strftime(MINUTE_LABEL_FORMAT)


def parse_minute_label(label: str) -> datetime:
    return datetime.strptime(label, MINUTE_LABEL_FORMAT).replace(tzinfo=UTC)


def base_shard(uid: str, shards: int) -> int:
    """A job's home shard: stable across processes (sha256, never `hash()`)."""
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:4], "big") % shards


#: Shards a minute may spill into, per configured shard: with the defaults a minute holds
#: 4 x 256 x 64 = 65,536 occurrences.
OVERFLOW_SHARDS = 256


def shard_candidates(uid: str, shards: int, *, limit: int = OVERFLOW_SHARDS) -> list[int]:
    """Home shard first, then overflow shards past the configured count for hot minutes."""
    home = base_shard(uid, shards)
    return [home + k * shards for k in range(limit)]


def bucket_name(minute: datetime, shard: int) -> str:
    return f"sb-{minute_label(minute)}-{shard}"


def entry_key(uid: str, nominal: datetime, schedule_hash: str, *, resume_generation: int | None = None) -> str:
    stamp = nominal.astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    suffix = "" if resume_generation is None else f"-r{resume_generation}"
    return f"{uid}.{stamp}.{schedule_hash}{suffix}"
