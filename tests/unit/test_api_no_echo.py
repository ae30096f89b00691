"""The core's cron, time zone and template errors reach a caller naming the field, never quoting it.

The core's parsers say what they read (`invalid cron expression '0 3 * * X'`, `unknown time
zone 'Europe/X'`, Jinja's `expected token ..., got 'X'`): useful in a CLI, but the HTTP API
answers them to whoever sent the body and they reach logs and terminals, so what a tenant sent
must not come back in them (vigil.api.bodies.unechoed). Over real sockets against the API as
the runtime builds it (tests/unit/test_api_problems.py): each hostile recurring submission below
carries a secret-looking marker in one field; the answer is a 422 problem naming that field, the
rule it broke is kept, and neither the answer nor any log line holds the marker.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from tests.unit.test_api_problems import (
    MARKER,
    RecordingStore,
    assert_problem,
    call,
    running,
)
from tests.unit.test_httpapi import FakeWorkflows
from vigil.api.bodies import WHAT_WAS_SENT, unechoed

__all__ = ["running"]

RECURRING = {"namespace": "shop", "queue": "orders", "task": "tally", "cron": "0 3 * * *"}

HOSTILE: list[Any] = [
    pytest.param({"cron": f"0 3 * * {MARKER}"}, "cron", "day-of-week", id="a cron field"),
    pytest.param({"cron": f"{MARKER} * * * *"}, "cron", "minute", id="a cron's minute"),
    pytest.param({"cron": MARKER}, "cron", "", id="a cron of one word"),
    pytest.param({"timezone": f"Europe/{MARKER}"}, "timezone", "IANA", id="a time zone"),
    pytest.param({"payloadTemplate": {"a": "{{ " + MARKER + " }"}}, "payloadTemplate.a", "", id="template syntax"),
    pytest.param({"payloadTemplate": {"a": "{{ x " + MARKER + " }}"}}, "payloadTemplate.a", "", id="a token"),
    pytest.param({"payloadTemplate": {"a": "{{ " + MARKER.replace("-", "_") + ".x }}"}}, "payloadTemplate.a", "",
                 id="an undefined name"),
    pytest.param({"payloadTemplate": {"a": "{% " + MARKER + " %}"}}, "payloadTemplate.a", "", id="an unknown tag"),
    pytest.param({"expectedMaxInterval": MARKER}, "expectedMaxInterval", "duration", id="an interval"),
]


@pytest.mark.parametrize(("fields", "field", "rule"), HOSTILE)
def test_a_bad_recurring_job_names_the_field_and_echoes_nothing(
    running: tuple[int, FakeWorkflows, RecordingStore],
    caplog: pytest.LogCaptureFixture,
    fields: dict[str, Any],
    field: str,
    rule: str,
) -> None:
    port, _, store = running
    body = json.dumps({**RECURRING, **fields}).encode()
    with caplog.at_level(logging.DEBUG):
        status, headers, answer = call(port, "POST", "/v1/jobs", body)
    problem = assert_problem(status, headers, answer)
    assert (status, problem["errors"][0]["field"]) == (422, field), problem
    assert rule in problem["detail"]
    assert MARKER not in answer.decode() and MARKER.replace("-", "_") not in answer.decode()
    assert MARKER not in caplog.text and MARKER.replace("-", "_") not in caplog.text
    assert store.calls == []


def test_a_reason_keeps_its_rule_and_loses_what_was_sent() -> None:
    sent = "0 3 * * SECRET"
    why = "invalid cron expression '0 3 * * SECRET': day-of-week value 'SECRET' is not a number"
    assert unechoed(why, sent) == (
        f"invalid cron expression {WHAT_WAS_SENT}: day-of-week value {WHAT_WAS_SENT} is not a number"
    )
    assert unechoed("use an IANA name like 'Europe/London'", "Mars/Base") == "use an IANA name like 'Europe/London'"
    assert unechoed("cron schedule 0 0 30 2 * has no occurrence", "0 0 30 2 *") == (
        f"cron schedule {WHAT_WAS_SENT} has no occurrence"
    )
