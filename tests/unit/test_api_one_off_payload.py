"""A one-off job's payload is serialised once: the text the store writes is the text measured.

The HTTP API checks a one-off job's payload (vigil.api.queuefields, through
vigil.core.jsonvalues.checked_text) and keeps the compact JSON text it measured on the job
(`OneOffJob.payload_text`); the store's `submit_job` writes that text as it is (on real
PostgreSQL: tests/queue/test_bounded.py). Here a payload exactly at the bound, ASCII-escaped text
and nesting included, is accepted with that text, and one byte more is refused naming the field.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.api.bodymodels import OneOffSubmission
from vigil.api.queuebase import MAX_PAYLOAD_BYTES, Invalid
from vigil.api.queuefields import one_off_job, submission
from vigil.core.queue import OneOffJob

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def payload_of_size(size: int) -> dict[str, Any]:
    """A payload whose compact, ASCII-escaped JSON is `size` bytes: escapes and nesting included."""
    shape: dict[str, Any] = {"note": "é ✓", "items": [{"n": 1.5, "ok": True}], "blob": ""}
    shape["blob"] = "x" * (size - len(json.dumps(shape, separators=(",", ":"))))
    return shape


def job_of(payload: dict[str, Any]) -> OneOffJob:
    body = submission({"namespace": "shop", "queue": "orders", "task": "charge", "payload": payload})
    assert isinstance(body, OneOffSubmission)
    return one_off_job(body, namespace="shop", name="orders", tenant="shop", now=T0)


def test_a_payload_at_the_bound_keeps_the_text_that_was_measured() -> None:
    payload = payload_of_size(MAX_PAYLOAD_BYTES)
    job = job_of(payload)
    assert len(job.payload_text.encode()) == MAX_PAYLOAD_BYTES  # at the bound, and accepted
    assert job.payload_text.isascii() and json.loads(job.payload_text) == payload
    with pytest.raises(Invalid) as refused:
        job_of(payload_of_size(MAX_PAYLOAD_BYTES + 1))
    assert str(refused.value) == f"payload: is {MAX_PAYLOAD_BYTES + 1} bytes as JSON; at most {MAX_PAYLOAD_BYTES}"
