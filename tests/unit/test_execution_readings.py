"""`Readings`: the dispatcher's passes read each Execution object once per resourceVersion.

Pure: the objects are the dicts an Execution cache holds, and nothing here talks to an API server.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.core.executions import Phase, execution_to_dict
from vigil.kube.stores.executions import Readings, readable

CREATED = "2026-12-04T03:00:00Z"


def execution(name: str, version: str, phase: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"namespace": "team", "name": name, "resourceVersion": version, "creationTimestamp": CREATED},
        "spec": {"executionId": name, "job": {"name": "nightly", "uid": "u-1"}, "scheduledFor": CREATED},
    }
    if phase is not None:
        fresh = readable([execution(name, version)])[0][1]
        obj["status"] = {**execution_to_dict(fresh), "phase": phase}
    return obj


def test_an_object_at_the_version_read_before_is_not_read_again_and_a_new_version_is() -> None:
    readings = Readings()
    first = readings.read([execution("ex-a", "1")])
    again = readings.read([execution("ex-a", "1")])
    moved = readings.read([execution("ex-a", "2", phase="Running")])

    assert again[0][1] is first[0][1]
    assert first[0][1].phase is Phase.READY
    assert moved[0][1].phase is Phase.RUNNING
    assert moved[0][1].scheduled_for == datetime(2026, 12, 4, 3, 0, tzinfo=UTC)


def test_it_reads_what_readable_reads_and_forgets_what_a_call_no_longer_holds() -> None:
    readings = Readings()
    objs = [execution("ex-a", "1"), execution("ex-b", "5", phase="Running")]
    assert [ex for _, ex in readings.read(objs)] == [ex for _, ex in readable(objs)]

    before = readings.read([execution("ex-a", "1")])[0][1]
    readings.read([])  # ex-a left the set in flight
    after = readings.read([execution("ex-a", "1")])[0][1]
    assert after is not before
    assert after == before


def test_an_unreadable_object_is_logged_and_left_out_while_the_others_are_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = execution("ex-bad", "3")
    del broken["spec"]["scheduledFor"]
    with caplog.at_level(logging.ERROR, logger="vigil.kube.stores.executions"):
        read = Readings().read([broken, execution("ex-a", "1")])

    assert [obj["metadata"]["name"] for obj, _ in read] == ["ex-a"]
    assert "team/ex-bad is unreadable" in caplog.text
