"""A submission read from its JSON body: each field checked, the first wrong one named (Invalid).

The body's shape (types, required and unknown fields, lengths, patterns, ranges) is checked by
its pydantic model (vigil.api.bodymodels), the same that the OpenAPI document is generated
from; what a schema cannot say is checked here: a runAt's offset and catch-up window, payloads
and payload templates through vigil.core.jsonvalues (the check every door of the store shares:
NUL, lone surrogates, NaN, depth, size), and a recurring job's cron, time zone and template by
the core. Nothing here quotes the value it refuses: a detail names the field and the rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from vigil.api.bodies import read_json, unechoed
from vigil.api.bodymodels import (
    BodyInvalid,
    Model,
    OneOffSubmission,
    QueueRef,
    RecurringSubmission,
    validated,
)
from vigil.api.queuebase import (
    MAX_PAYLOAD_BYTES,
    PAST_RUN_AT,
    PRIORITIES,
    RECURRING_NAMES,
    Invalid,
)
from vigil.core import jsonvalues
from vigil.core.queue import (
    OneOffJob,
    queue_key,
)
from vigil.core.recurring import RecurringJob
from vigil.core.timeparse import parse_rfc3339
from vigil.model.durations import parse_duration


def object_of(raw: bytes) -> dict[str, Any]:
    try:
        data = read_json(raw, field="body")
    except jsonvalues.UnsafeValue as error:
        raise Invalid(error.path, error.why) from None
    if not isinstance(data, dict):
        raise Invalid("body", "must be a JSON object")
    return data


def checked(model: type[Model], data: Mapping[str, Any]) -> Model:
    """`data` validated by `model` (vigil.api.bodymodels); Invalid naming the first wrong field."""
    try:
        return validated(model, data)
    except BodyInvalid as error:
        raise Invalid(error.field, error.why) from None


def queue_of(data: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, TaskQueue name) a submission names: what it is authorised against."""
    ref = checked(QueueRef, data)
    return ref.namespace, ref.queue


def submission(data: Mapping[str, Any]) -> OneOffSubmission | RecurringSubmission:
    """The body as the model of its kind: recurring when it has `cron`, else one-off."""
    if "cron" not in data:
        return checked(OneOffSubmission, data)
    for field in ("runAt", "payload"):
        if field in data:
            raise Invalid(field, "a recurring job (cron) has no runAt or payload: its payloadTemplate is "
                          "rendered for each occurrence")  # fmt: skip
    return checked(RecurringSubmission, data)


def recurring_job(
    body: RecurringSubmission, data: Mapping[str, Any], *, namespace: str, name: str, tenant: str
) -> RecurringJob:
    """The recurring job a validated submission describes; Invalid naming the first wrong field
    (what the core refuses of its cron, time zone and template, without quoting `data`)."""
    _payload_text(body.payloadTemplate, field="payloadTemplate")
    try:
        return RecurringJob(
            queue=queue_key(namespace, name),
            task=body.task,
            cron=body.cron,
            timezone=body.timezone,
            payload_template=body.payloadTemplate,
            expected_max_interval=_interval(body.expectedMaxInterval),
            priority=_priority(body.priority),
            tenant=tenant,
            max_attempts=body.maxAttempts,
            idempotency_key=body.idempotencyKey,
        )
    except ValueError as error:
        if isinstance(error, Invalid):
            raise
        raise recurring_invalid(error, data) from None


def recurring_invalid(error: ValueError, data: Mapping[str, Any] | None = None) -> Invalid:
    """A recurring job's "field: why" as the request names the field, and with nothing the
    request sent in `why` (the core's cron, time zone and template errors quote what they read:
    bodies.unechoed)."""
    field, _, why = str(error).partition(": ")
    head, dot, rest = field.partition(".")
    named = RECURRING_NAMES.get(head, head)
    return Invalid(named + dot + rest, unechoed(why, sent_text(data.get(named)) if data is not None else ""))


def sent_text(value: Any) -> str:
    """What a field of the request holds, as the text a parser may have quoted from it."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else ""


def _interval(value: str | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        raise Invalid("expectedMaxInterval", "must be a positive duration, like '26h' or '90s'") from None


def one_off_job(body: OneOffSubmission, *, namespace: str, name: str, tenant: str, now: datetime) -> OneOffJob:
    """The one-off job a validated submission describes; Invalid naming the first wrong field."""
    return OneOffJob(
        queue=queue_key(namespace, name),
        task=body.task,
        payload_text=_payload_text(body.payload),
        run_at=_run_at(body.runAt, now=now),
        priority=_priority(body.priority),
        tenant=tenant,
        max_attempts=body.maxAttempts,
        idempotency_key=body.idempotencyKey,
    )


def _payload_text(value: Any, *, field: str = "payload") -> str:
    """A JSON object the store will take (vigil.core.jsonvalues), as the compact JSON text whose
    size was checked: the store writes that text as it is. Invalid naming the place, e.g. payload.a[3]."""
    try:
        return jsonvalues.checked_object_text(value, path=field, max_bytes=MAX_PAYLOAD_BYTES)
    except jsonvalues.UnsafeValue as unsafe:
        raise Invalid(unsafe.path, unsafe.why) from None


def _run_at(value: str | None, *, now: datetime) -> datetime:
    if value is None:
        return now
    try:
        run_at = parse_rfc3339(value)
    except ValueError:
        raise Invalid("runAt", "must be an RFC 3339 timestamp with its offset, like '2026-08-01T02:00:00Z'") from None
    if now - run_at > PAST_RUN_AT:
        raise Invalid(
            "runAt", f"is more than {PAST_RUN_AT} in the past (the catch-up window): it would never run on time"
        )
    return run_at


def _priority(value: int | str) -> int:
    """A priority's number: a name's, or the number itself (its range is the model's)."""
    return PRIORITIES[value] if isinstance(value, str) else value
