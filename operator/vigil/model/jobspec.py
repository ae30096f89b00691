"""From a ScheduledJob object (a plain dict) to the core's `JobView`: pure translation.

Validation uses the same pydantic model that generated the CRD schema, so a
spec the API server admitted but that cannot be scheduled (an unknown time
zone, say) fails here with the field named. Shared by the operator's adapters
and the CLI, which computes occurrences from a file without any cluster.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from vigil.core.chain import CatchUp, JobView
from vigil.core.executions import Backoff, RetryPolicy
from vigil.core.jitter import default_jitter_window
from vigil.core.retention import Limits
from vigil.core.schedule import Schedule, ScheduleKind
from vigil.core.timeparse import parse_rfc3339
from vigil.model.common import RetryPolicy as ModelRetryPolicy
from vigil.model.common import describe_validation_error
from vigil.model.scheduledjob import ScheduledJobSpec

SCHEDULE_FIELDS = ("runAt", "cron", "every", "timezone", "jitter", "daylightSaving")


class InvalidJob(ValueError):
    """A job whose spec cannot be scheduled; `problems` name the fields."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


#: Why a `task:` job is Invalid while the operator has no queue store.
TIER_OFF = "spec.task: the volume tier is off: set queue.dsn"


def check_tier(spec: ScheduledJobSpec, *, queue_enabled: bool) -> None:
    """Raise InvalidJob when the job submits to a queue and the volume tier is off."""
    if spec.task is not None and not queue_enabled:
        raise InvalidJob([TIER_OFF])


def parse_spec(obj: Mapping[str, Any]) -> ScheduledJobSpec:
    try:
        return ScheduledJobSpec.model_validate(obj.get("spec") or {})
    except ValidationError as err:
        raise InvalidJob(describe_validation_error(err, prefix="spec")) from None


def schedule_hash(obj: Mapping[str, Any]) -> str:
    """A fingerprint of what decides *when* the job fires (not what it runs).

    Editing a payload leaves pending occurrences alone; editing the schedule
    supersedes them.
    """
    spec = obj.get("spec") or {}
    relevant = {k: spec.get(k) for k in SCHEDULE_FIELDS}
    relevant["anchor"] = obj["metadata"].get("creationTimestamp")
    text = json.dumps(relevant, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def schedule_of(spec: ScheduledJobSpec, obj: Mapping[str, Any]) -> Schedule:
    common: dict[str, Any] = {
        "timezone": spec.timezone,
        "gap": spec.daylight_saving.gap,
        "overlap": spec.daylight_saving.overlap,
    }
    if spec.run_at is not None:
        return Schedule(kind=ScheduleKind.ONCE, run_at=spec.run_at.replace(microsecond=0), **common)
    if spec.every is not None:
        anchor = parse_rfc3339(obj["metadata"]["creationTimestamp"])
        return Schedule(kind=ScheduleKind.EVERY, every=timedelta(seconds=spec.every.total_seconds()), anchor=anchor, **common)
    crons = spec.cron if isinstance(spec.cron, list | tuple) else (spec.cron,)
    return Schedule(kind=ScheduleKind.CRON, cron=tuple(str(c) for c in crons), **common)


def job_view(obj: Mapping[str, Any]) -> tuple[JobView, ScheduledJobSpec]:
    """The core's view of a job object, and its parsed spec. Raises InvalidJob."""
    spec = parse_spec(obj)
    try:
        schedule = schedule_of(spec, obj)
    except ValueError as err:
        raise InvalidJob([f"spec: {err}"]) from None
    jitter = (
        timedelta(seconds=spec.jitter.total_seconds()) if spec.jitter is not None else default_jitter_window(schedule)
    )
    chain = (obj.get("status") or {}).get("chain") or {}
    last = chain.get("lastNominal")
    meta = obj["metadata"]
    view = JobView(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        generation=int(meta.get("generation", 0)),
        schedule=schedule,
        schedule_hash=schedule_hash(obj),
        jitter=jitter,
        catch_up=CatchUp(
            policy=spec.catch_up_policy,
            window=timedelta(seconds=spec.catch_up_window.total_seconds()),
            limit=spec.catch_up_limit,
        ),
        suspended=spec.suspend,
        last_nominal=parse_rfc3339(last) if last else None,
    )
    return view, spec


def retry_policy(raw: Mapping[str, Any]) -> RetryPolicy:
    """The core's retry policy from a `retry` block as stored (defaults filled in by the model)."""
    model = ModelRetryPolicy.model_validate(raw or {})
    return RetryPolicy(
        max_attempts=model.max_attempts,
        backoff=Backoff(
            initial=timedelta(seconds=model.backoff.initial.total_seconds()),
            factor=model.backoff.factor,
            max=timedelta(seconds=model.backoff.max.total_seconds()),
        ),
    )


def retention_limits(spec: ScheduledJobSpec) -> Limits:
    """The core's retention limits from a job's `retention` block."""
    return Limits(succeeded=spec.retention.succeeded, failed=spec.retention.failed)
