"""The ScheduleBucket resource: the time-partitioned schedule of the declarative tier (internal).

One object per (minute, shard) lists the occurrences due in that minute with their jittered fire
times, so a trigger tick reads only what is due now. The fired markers live in the **status**
subresource: marking an occurrence fired is a status update with a resourceVersion
precondition, which is what makes the trigger fire each occurrence at most once.

etcd refuses objects over about 1.5 MB, so a bucket holds at most
:data:`BUCKET_MAX_OCCURRENCES` occurrences; a hot minute is split across more shards.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from pydantic import Field, StringConstraints, field_validator

from vigil.model.common import (
    AGE_COLUMN,
    NamespaceName,
    ObjectName,
    PrinterColumn,
    ResourceKind,
    SpecModel,
    StatusModel,
    Timestamp,
)
from vigil.model.names import SCHEDULE_BUCKETS
from vigil.model.scheduledjob import OccurrenceOutcome

#: Most occurrences the API server accepts in one bucket: the upper bound of the operator's
#: ``trigger.maxOccurrencesPerBucket`` setting. (The bucket store's byte budget, 1 MB of
#: occurrences with their markers, is what keeps a bucket under etcd's ~1.5 MB limit.)
BUCKET_MAX_OCCURRENCES = 5000
#: Longest occurrence key (``vigil.core.buckets.entry_key``: uid, timestamp, hash, suffix).
OCCURRENCE_KEY_MAX_LENGTH = 128
#: A whole UTC minute as the API server sees it: seconds zero, no fraction, 'Z'.
WHOLE_MINUTE_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:00Z$"

OccurrenceKey = Annotated[
    str, StringConstraints(min_length=1, max_length=OCCURRENCE_KEY_MAX_LENGTH)
]


class BucketOccurrence(SpecModel):
    """One occurrence due in the bucket's minute."""

    key: OccurrenceKey = Field(
        description="Unique per insertion intent (job uid, nominal time, schedule version, "
        "resume): inserting the same intent twice is a no-op."
    )
    namespace: NamespaceName = Field(description="The ScheduledJob's namespace.")
    name: ObjectName = Field(description="The ScheduledJob's name.")
    uid: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        description="The ScheduledJob's uid: a job deleted and re-created under the same name "
        "is a different job."
    )
    generation: int = Field(ge=0, description="The job's metadata.generation when scheduled.")
    schedule_hash: Annotated[str, StringConstraints(max_length=64)] = Field(
        default="",
        description="Fingerprint of the job's schedule fields when scheduled: an occurrence "
        "whose job has since changed its schedule is superseded, not fired.",
    )
    nominal: Timestamp = Field(description="The occurrence's time on the schedule.")
    fire_at: Timestamp = Field(description="When to fire it: nominal plus jitter.")
    resume: bool = Field(
        default=False,
        description="Whether this entry resumes a job after suspension (the catch-up policy "
        "decides the gap).",
    )


class ScheduleBucketSpec(SpecModel):
    """The occurrences due in one minute, for one shard."""

    minute: Timestamp = Field(
        description="The minute (UTC, seconds zero) the occurrences are due in.",
        json_schema_extra={"pattern": WHOLE_MINUTE_PATTERN},
    )
    shard: int = Field(ge=0, description="The shard of this minute.")
    occurrences: list[BucketOccurrence] = Field(
        default_factory=list,
        max_length=BUCKET_MAX_OCCURRENCES,
        description="The occurrences, keyed by key.",
        # Atomic, not a map list: the API server then tracks the list as one field. Tracked per
        # entry, a bucket of 250 entries carried 75 kB of managedFields that every write rebuilt.
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )

    @field_validator("minute")
    @classmethod
    def _whole_utc_minute(cls, minute: datetime) -> datetime:
        if minute.utcoffset() != timedelta(0) or minute.second or minute.microsecond:
            raise ValueError(f"minute must be a whole minute in UTC, got {minute.isoformat()}")
        return minute

    @field_validator("occurrences")
    @classmethod
    def _unique_keys(cls, occurrences: list[BucketOccurrence]) -> list[BucketOccurrence]:
        seen: set[str] = set()
        for occurrence in occurrences:
            if occurrence.key in seen:
                raise ValueError(f"duplicate occurrence key {occurrence.key!r}")
            seen.add(occurrence.key)
        return occurrences


class FiredMarker(StatusModel):
    """The record that an occurrence was handled: written once, with a resourceVersion
    precondition."""

    at: Timestamp = Field(description="When it was marked.")
    execution_id: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        default=None, description="The execution it started, if any."
    )
    outcome: OccurrenceOutcome = Field(description="What became of the occurrence.")
    reason: Annotated[str, StringConstraints(max_length=1024)] | None = Field(
        default=None, description="Why, when it did not simply fire."
    )


class ScheduleBucketStatus(StatusModel):
    """The fired markers of the bucket's occurrences."""

    fired: dict[str, FiredMarker] = Field(
        default_factory=dict,
        max_length=BUCKET_MAX_OCCURRENCES,
        description="Fired markers by occurrence key.",
        json_schema_extra={"x-kubernetes-map-type": "atomic"},  # one tracked field, as above
    )


SCHEDULE_BUCKET = ResourceKind(
    kind="ScheduleBucket",
    plural=SCHEDULE_BUCKETS,
    short_names=("sb",),
    spec_model=ScheduleBucketSpec,
    status_model=ScheduleBucketStatus,
    description="Internal to Vigil: the occurrences due in one minute for one shard, and "
    "(in status) which of them have fired. Written only by the operator.",
    printer_columns=(
        PrinterColumn(name="Minute", json_path=".spec.minute", description="Due minute."),
        PrinterColumn(name="Shard", json_path=".spec.shard", type="integer", description="Shard."),
        AGE_COLUMN,
    ),
    internal=True,
)
