"""The operator's HTTP API answers: health, leader, an execution's timeline, and not-found.

Pure: the collaborators are plain functions, so every row of the table is one request.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.core.history import AttemptRecord, AttemptState
from vigil.core.ports import HistoryUnavailable
from vigil.httpapi import ApiServer

WHEN = datetime(2026, 8, 1, 1, 0, tzinfo=UTC)
ROW = AttemptRecord(
    execution_id="ex-abc",
    attempt=1,
    namespace="ns",
    job="reconcile",
    job_uid="u1",
    priority="normal",
    state=AttemptState.FAILED,
    scheduled_for=WHEN,
    reason="ExitCode3",
    pod="ex-abc-1",
)
OBJ = {"metadata": {"namespace": "ns", "name": "ex-abc"}, "spec": {"executionId": "ex-abc"}, "status": {"phase": "Backoff"}}


def server(*, obj: dict[str, Any] | None = OBJ, rows: list[AttemptRecord] | None = None, down: bool = False) -> ApiServer:
    def timeline(execution_id: str) -> list[AttemptRecord]:
        if down:
            raise HistoryUnavailable("connection refused")
        return [r for r in rows or [] if r.execution_id == execution_id]

    return ApiServer(leader=lambda: "op-1", find_execution=lambda i: obj if obj and i == "ex-abc" else None, timeline=timeline)


def test_health_and_leader() -> None:
    assert server().answer("/healthz") == (200, "text/plain", b"ok\n")
    assert server().answer("/leader")[2] == b"op-1\n"


def test_an_execution_is_served_with_its_history() -> None:
    status, kind, body = server(rows=[ROW]).answer("/executions/ex-abc")
    data = json.loads(body)
    assert (status, kind) == (200, "application/json")
    assert data["status"]["phase"] == "Backoff"
    assert [(h["attempt"], h["state"], h["reason"]) for h in data["history"]] == [(1, "failed", "ExitCode3")]


def test_history_outage_still_serves_the_execution() -> None:
    status, _, body = server(down=True).answer("/executions/ex-abc")
    data = json.loads(body)
    assert status == 200 and data["history"] is None and "unavailable" in data["historyError"]


@pytest.mark.parametrize("path", ["/executions/ex-missing", "/executions/NOT_AN_ID", "/nothing"])
def test_unknown_paths_and_ids_are_404(path: str) -> None:
    assert server().answer(path)[0] == 404


def test_it_serves_over_http() -> None:
    http = server(rows=[ROW]).serve(0)
    try:
        port = http.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/executions/ex-abc", timeout=5) as resp:
            assert json.loads(resp.read())["executionId"] == "ex-abc"
    finally:
        http.shutdown()
        http.server_close()
