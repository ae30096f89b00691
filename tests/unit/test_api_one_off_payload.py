"""A one-off job's payload is serialised once: the text stored is the text measured against the bound.

The HTTP API checks a one-off job's payload (vigil.api.queuefields, through
vigil.core.jsonvalues.checked_text) and keeps the compact JSON text it measured; the store's
`submit_job` writes that text as it is, to the job, its execution and the quota. Here a payload
exactly at the bound (ASCII-escaped text and nesting included, so a second serialisation with
other options would differ) goes from a request body to the parameters of the store's
statements, over a connection that records them instead of a database; one byte more is refused
naming the field.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from vigil.api.bodymodels import OneOffSubmission
from vigil.api.queuebase import MAX_PAYLOAD_BYTES, Invalid
from vigil.api.queuefields import one_off_job, submission
from vigil.core.queue import OneOffJob
from vigil.queue.store import QueueStore

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
ROW = (1, 0, 0, 0, 0, None, None)  # an inserted execution, and a quota that admits it


class RecordingConnection:
    """Takes every statement, records its parameters, and answers each with `ROW`."""

    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []

    def __enter__(self) -> RecordingConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        yield

    def execute(self, query: str, params: dict[str, Any]) -> RecordingConnection:
        self.params.append(params)
        return self

    def fetchone(self) -> tuple[Any, ...]:
        return ROW


def payload_of_size(size: int) -> dict[str, Any]:
    """A payload whose compact, ASCII-escaped JSON is `size` bytes: escapes and nesting included."""
    shape: dict[str, Any] = {"note": "é ✓", "items": [{"n": 1.5, "ok": True}], "blob": ""}
    shape["blob"] = "x" * (size - len(json.dumps(shape, separators=(",", ":"))))
    return shape


def job_of(payload: dict[str, Any]) -> OneOffJob:
    body = submission({"namespace": "shop", "queue": "orders", "task": "charge", "payload": payload})
    assert isinstance(body, OneOffSubmission)
    return one_off_job(body, namespace="shop", name="orders", tenant="shop", now=T0)


def sent_payloads(connection: RecordingConnection) -> list[str]:
    """Every jsonb parameter the statements were given, as the text sent to the database."""
    values = [value for params in connection.params for value in params.values()]
    values += [item for value in values if isinstance(value, list) for item in value]  # the quota's
    return [value.dumps(value.obj) for value in values if isinstance(value, Jsonb)]


def test_a_payload_at_the_bound_is_stored_as_the_text_that_was_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    payload = payload_of_size(MAX_PAYLOAD_BYTES)
    job = job_of(payload)
    assert len(job.payload_text.encode()) == MAX_PAYLOAD_BYTES  # at the bound, and accepted
    assert job.payload_text.isascii() and json.loads(job.payload_text) == payload
    connection = RecordingConnection()
    store = QueueStore("postgresql://unused")
    monkeypatch.setattr(store, "connect", lambda: connection)
    assert store.submit_job(job, now=T0).created
    sent = sent_payloads(connection)
    assert len(sent) == 3  # the job, its execution, the quota's count
    assert all(text == job.payload_text for text in sent)  # byte for byte the measured text
    with pytest.raises(Invalid) as refused:
        job_of(payload_of_size(MAX_PAYLOAD_BYTES + 1))
    assert str(refused.value) == f"payload: is {MAX_PAYLOAD_BYTES + 1} bytes as JSON; at most {MAX_PAYLOAD_BYTES}"
