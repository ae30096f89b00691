"""kopf handlers: thin — parse, ask the core, apply the side effect, write status once.

ScheduledJob create/update/resume → validate; on error set `Invalid` with the
field named and post a Warning Event (never raise: kopf would retry a bad spec
forever); otherwise make sure the chain has a head for the current schedule,
restart a chain a suspension paused, and publish the schedule's summary and
conditions. The trigger does the firing; these handlers only seed it. The
handler is asynchronous: kopf runs one per job at once (a synchronous one would
share kopf's few worker threads), and each awaits its first occurrence's place
in the bucket store's group commit, so a thousand new jobs share a few bucket
writes instead of making one each.

Executions and their pods are not kopf's: the execution controller follows
them through its own caches (`kube/executioncontroller.py`). kopf's own
bookkeeping lives in annotations (see `configure`), apart from the user-facing
conditions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime
from typing import Any

import kopf

from vigil.core.chain import JobView, first_entry, resume_entry
from vigil.core.conditions import ConditionReason, ConditionType, set_condition
from vigil.core.payload import PayloadError, occurrence_variables, render_payload
from vigil.core.ports import Clock
from vigil.core.schedule import occurrence_at
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.kube.buckets import KubeBucketStore
from vigil.kube.events import NORMAL, WARNING, EventRecorder
from vigil.model import GROUP, VERSION
from vigil.model.jobspec import InvalidJob, job_view
from vigil.model.scheduledjob import ScheduledJobSpec

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Wiring:
    """The collaborators handlers need, passed in through kopf's memo."""

    store: KubeBucketStore
    events: EventRecorder
    clock: Clock


WATCH_SERVER_SECONDS = 300  # a watch request's lifetime, asked of the API server
LIST_PAGE = 500  # objects per page of kopf's initial listing: each page fits the request timeout


def configure(settings: kopf.OperatorSettings, *, request_timeout: float) -> None:
    """kopf's settings. Its requests share the operator's time bound (`request_timeout`, from the
    leader-election settings): every short request, every connect, and a watch its own lifetime
    plus that bound, so no half-open connection holds a kopf task forever. kopf already waits out
    a 429's Retry-After (as the least backoff) and retries it."""
    settings.networking.request_timeout = request_timeout
    settings.networking.connect_timeout = request_timeout
    settings.watching.connect_timeout = request_timeout
    settings.watching.server_timeout = WATCH_SERVER_SECONDS
    settings.watching.client_timeout = WATCH_SERVER_SECONDS + request_timeout
    settings.watching.chunk_size = LIST_PAGE
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.vigil.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.vigil.dev", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # our own Events carry the story; kopf's would repeat it
    settings.execution.max_workers = 8


def schedule_summary(spec: ScheduledJobSpec) -> str:
    if spec.run_at is not None:
        return f"at {format_rfc3339(spec.run_at)}"
    if spec.every is not None:
        return f"every {spec.model_dump(by_alias=True, mode='json')['every']}"
    crons = spec.cron if isinstance(spec.cron, list | tuple) else [spec.cron]
    return " | ".join(str(c) for c in crons)


def _validate_payload(view: JobView, spec: ScheduledJobSpec, now: datetime) -> None:
    occurrence = occurrence_at(view.schedule, first_entry_nominal(view, now), jitter=view.offset)
    variables = occurrence_variables(
        period_start=occurrence.period_start,
        period_end=occurrence.period_end,
        scheduled_for=occurrence.nominal,
        execution_id="ex-validation",
        job_name=view.name,
        job_namespace=view.namespace,
    )
    render_payload(payload=spec.payload, template=spec.payload_template, variables=variables, timezone=spec.timezone)


def first_entry_nominal(view: JobView, now: datetime) -> datetime:
    head = first_entry(view, now=now)
    return head.nominal if head is not None else now.replace(microsecond=0)


@kopf.on.resume(GROUP, VERSION, "scheduledjobs")
@kopf.on.create(GROUP, VERSION, "scheduledjobs")
@kopf.on.update(GROUP, VERSION, "scheduledjobs")
async def reconcile_job(body: kopf.Body, patch: kopf.Patch, memo: Any, **_: Any) -> None:
    wiring: Wiring = memo.wiring
    now = wiring.clock.now()
    status = dict(body.get("status") or {})
    generation = int(body["metadata"].get("generation", 0))
    conditions = list(status.get("conditions") or [])
    try:
        view, spec = job_view(body)
        _validate_payload(view, spec, now)
    except (InvalidJob, PayloadError, ValueError) as err:
        await asyncio.to_thread(_mark_invalid, body, patch, wiring, conditions, generation, now, str(err))
        return
    chain = dict(status.get("chain") or {})
    chain_patch: dict[str, Any] = {}
    if chain.get("scheduleHash") != view.schedule_hash:
        head = first_entry(view, now=now)
        if head is not None:
            await asyncio.wrap_future(wiring.store.insert_later(head))
            patch.status["nextRun"] = format_rfc3339(head.fire_at)
        chain_patch = {"scheduleHash": view.schedule_hash, "pausedAt": None}
    elif not view.suspended and chain.get("pausedAt"):
        entry = resume_entry(view, paused_at=parse_rfc3339(chain["pausedAt"]), now=now)
        await asyncio.wrap_future(wiring.store.insert_later(entry))
        chain_patch = {"pausedAt": None}
        await asyncio.to_thread(
            wiring.events.emit, body, type_=NORMAL, reason="Resumed", message="resumed; the catch-up policy decides the gap"
        )
    if chain_patch:
        patch.status["chain"] = chain_patch
    conditions = set_condition(
        conditions, type_=ConditionType.INVALID, status=False, reason=ConditionReason.VALID,
        message="", generation=generation, now=now,
    )  # fmt: skip
    conditions = set_condition(
        conditions, type_=ConditionType.READY, status=True, reason=ConditionReason.SCHEDULED,
        message=f"scheduled: {schedule_summary(spec)} ({spec.timezone})", generation=generation, now=now,
    )  # fmt: skip
    conditions = set_condition(
        conditions, type_=ConditionType.SUSPENDED, status=spec.suspend,
        reason=ConditionReason.SUSPENDED if spec.suspend else ConditionReason.ACTIVE,
        message=spec.suspend_reason or "" if spec.suspend else "", generation=generation, now=now,
    )  # fmt: skip
    patch.status["conditions"] = conditions
    patch.status["schedule"] = schedule_summary(spec)
    patch.status["observedGeneration"] = generation


def _mark_invalid(
    body: kopf.Body,
    patch: kopf.Patch,
    wiring: Wiring,
    conditions: list[dict[str, Any]],
    generation: int,
    now: datetime,
    message: str,
) -> None:
    conditions = set_condition(
        conditions, type_=ConditionType.INVALID, status=True, reason=ConditionReason.INVALID_SPEC,
        message=message, generation=generation, now=now,
    )  # fmt: skip
    conditions = set_condition(
        conditions, type_=ConditionType.READY, status=False, reason=ConditionReason.INVALID_SPEC,
        message=message, generation=generation, now=now,
    )  # fmt: skip
    patch.status["conditions"] = conditions
    patch.status["observedGeneration"] = generation
    patch.status["nextRun"] = None
    wiring.events.emit(body, type_=WARNING, reason="InvalidSpec", message=message)
    log.warning("invalid ScheduledJob %s/%s: %s", body["metadata"]["namespace"], body["metadata"]["name"], message)
