"""A submission read from its JSON body: each field checked, the first wrong one named (Invalid).

Nothing here quotes the value it refuses: a detail names the field and the rule. Payloads and
payload templates go through vigil.core.jsonvalues, the check every door of the store shares.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from vigil.api.bodies import field_name, read_json, unechoed
from vigil.api.queuebase import (
    MAX_ATTEMPTS_LIMIT,
    MAX_PAYLOAD_BYTES,
    NAMESPACE,
    PAST_RUN_AT,
    PRIORITIES,
    QUEUE_NAME,
    RECURRING_NAMES,
    RECURRING_SUBMIT_FIELDS,
    SMALLINT,
    SUBMIT_FIELDS,
    TEXT_MAX_LENGTH,
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


def queue_of(data: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, TaskQueue name) a submission names: what it is authorised against."""
    namespace = _required_text(data, "namespace")
    if not NAMESPACE.fullmatch(namespace):
        raise Invalid("namespace", "is not a namespace name (a DNS label)")
    name = _required_text(data, "queue")
    if not QUEUE_NAME.fullmatch(name):
        raise Invalid("queue", "is not a TaskQueue name (a DNS subdomain)")
    return namespace, name


def recurring_job(data: Mapping[str, Any], *, namespace: str, name: str, tenant: str) -> RecurringJob:
    """The recurring job a submission with `cron` describes; Invalid naming the first wrong field."""
    for field in ("runAt", "payload"):
        if field in data:
            raise Invalid(field, "a recurring job (cron) has no runAt or payload: its payloadTemplate is "
                          "rendered for each occurrence")  # fmt: skip
    unknown = sorted(set(data) - RECURRING_SUBMIT_FIELDS)
    if unknown:
        raise Invalid(field_name(unknown[0], instead="body"), f"unknown field; the fields are {', '.join(sorted(RECURRING_SUBMIT_FIELDS))}")
    template = data.get("payloadTemplate", {})
    _payload(template, field="payloadTemplate")
    max_attempts = data.get("maxAttempts")
    try:
        return RecurringJob(
            queue=queue_key(namespace, name),
            task=_required_text(data, "task"),
            cron=_text(data["cron"], "cron"),
            timezone=_text(data.get("timezone", "UTC"), "timezone"),
            payload_template=template,
            expected_max_interval=_interval(data.get("expectedMaxInterval")),
            priority=_priority(data.get("priority", "normal")),
            tenant=tenant,
            max_attempts=None if max_attempts is None else _max_attempts(max_attempts),
            idempotency_key=optional_text(data, "idempotencyKey"),
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


def _interval(value: Any) -> timedelta | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid("expectedMaxInterval", "must be a duration string, like '26h'")
    try:
        return parse_duration(value)
    except ValueError:
        raise Invalid("expectedMaxInterval", "must be a positive duration, like '26h' or '90s'") from None


def one_off_job(data: Mapping[str, Any], *, namespace: str, name: str, tenant: str, now: datetime) -> OneOffJob:
    """The one-off job a submission's body describes; Invalid naming the first wrong field."""
    unknown = sorted(set(data) - SUBMIT_FIELDS)
    if unknown:
        raise Invalid(field_name(unknown[0], instead="body"), f"unknown field; the fields are {', '.join(sorted(SUBMIT_FIELDS))}")
    task = _required_text(data, "task")
    return OneOffJob(
        queue=queue_key(namespace, name),
        task=task,
        payload=_payload(data.get("payload", {})),
        run_at=_run_at(data.get("runAt"), now=now),
        priority=_priority(data.get("priority", "normal")),
        tenant=tenant,
        max_attempts=None if data.get("maxAttempts") is None else _max_attempts(data["maxAttempts"]),
        idempotency_key=optional_text(data, "idempotencyKey"),
    )


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise Invalid(field, "must be a string")
    if not value or len(value) > TEXT_MAX_LENGTH:
        raise Invalid(field, f"must be 1 to {TEXT_MAX_LENGTH} characters long")
    if not value.isprintable() or value != value.strip():
        raise Invalid(field, "must be printable, without leading or trailing spaces")
    return value


def _required_text(data: Mapping[str, Any], field: str) -> str:
    if field not in data:
        raise Invalid(field, "is required")
    return _text(data[field], field)


def optional_text(data: Mapping[str, Any], field: str) -> str | None:
    value = data.get(field)
    return None if value is None else _text(value, field)


def _payload(value: Any, *, field: str = "payload") -> dict[str, Any]:
    """A JSON object the store will take (vigil.core.jsonvalues); Invalid naming the place, e.g. payload.a[3]."""
    try:
        return jsonvalues.check_object(value, path=field, max_bytes=MAX_PAYLOAD_BYTES)
    except jsonvalues.UnsafeValue as unsafe:
        raise Invalid(unsafe.path, unsafe.why) from None


def _run_at(value: Any, *, now: datetime) -> datetime:
    if value is None:
        return now
    if not isinstance(value, str):
        raise Invalid("runAt", "must be an RFC 3339 timestamp string, like '2026-08-01T02:00:00Z'")
    try:
        run_at = parse_rfc3339(value)
    except ValueError:
        raise Invalid("runAt", "must be an RFC 3339 timestamp with its offset, like '2026-08-01T02:00:00Z'") from None
    if now - run_at > PAST_RUN_AT:
        raise Invalid(
            "runAt", f"is more than {PAST_RUN_AT} in the past (the catch-up window): it would never run on time"
        )
    return run_at


def _priority(value: Any) -> int:
    if isinstance(value, str):
        if value not in PRIORITIES:
            raise Invalid("priority", f"is not one of {', '.join(PRIORITIES)} (or a whole number)")
        return PRIORITIES[value]
    if isinstance(value, bool) or not isinstance(value, int) or not SMALLINT[0] <= value <= SMALLINT[1]:
        raise Invalid(
            "priority", f"must be a whole number from {SMALLINT[0]} to {SMALLINT[1]} (lower runs first) or a name"
        )
    return value


def _max_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise Invalid("maxAttempts", f"must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}")
    return value


