"""A run asked for by hand (`kubectl vigil run`) enters its job's ledger as Manual, once.

The first recorded transition of a `source: Manual` execution adds one ledger
entry — its request time, its execution id, outcome Manual, the request id as
the reason — and later transitions add none. It never replaces a scheduled
occurrence's entry at the same second, nor another manual run's; an execution
of the schedule adds nothing. The request id comes from the Execution's
annotation (its name when the annotation is missing).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.core.buckets import Outcome
from vigil.core.executions import (
    AttemptOutcome,
    AttemptResult,
    Execution,
    RetryPolicy,
    finish,
    new_execution,
    start,
)
from vigil.core.ids import ExecutionId
from vigil.core.timeparse import format_rfc3339
from vigil.kube.stores.jobstatus import Change, _transition_step, fold
from vigil.kube.stores.results import manual_request
from vigil.model.jobpatches import transition_patch
from vigil.model.names import ANNOTATION_REQUEST_ID

AT = datetime(2026, 12, 1, 9, 30, 5, tzinfo=UTC)
LATER = AT + timedelta(minutes=2)


def ended(execution_id: str, at: datetime) -> Execution:
    ex = new_execution(ExecutionId(execution_id), namespace="ns", job="job", scheduled_for=at, now=at)
    ex = start(ex, pod=f"{execution_id}-1", now=at)
    return finish(ex, AttemptResult(1, AttemptOutcome.SUCCEEDED, "Completed"), policy=RetryPolicy(), now=at + timedelta(seconds=3))


def ledger_after(status: dict[str, Any], ex: Execution, *, manual: str | None, now: datetime = LATER) -> list[dict[str, Any]]:
    patch = transition_patch(status, ex, generation=1, now=now, manual=manual)
    status.update(patch)
    return list(status.get("occurrences") or [])


def test_a_manual_run_is_entered_once_with_its_request_id() -> None:
    status: dict[str, Any] = {}
    ex = ended("ex-manual-a", AT)
    first = ledger_after(status, ex, manual="deploy-42")
    again = ledger_after(status, ex, manual="deploy-42", now=LATER + timedelta(minutes=5))
    assert first == again == [{
        "nominal": format_rfc3339(AT), "executionId": "ex-manual-a", "outcome": str(Outcome.MANUAL),
        "at": format_rfc3339(LATER), "reason": "run by hand, request deploy-42",
    }]  # fmt: skip


def test_it_never_replaces_a_scheduled_entry_or_another_manual_run() -> None:
    fired = {"nominal": format_rfc3339(AT), "executionId": "ex-sched", "outcome": "Fired", "at": format_rfc3339(AT)}
    status: dict[str, Any] = {"occurrences": [fired]}
    ledger_after(status, ended("ex-manual-a", AT), manual="a")
    ledger = ledger_after(status, ended("ex-manual-b", AT), manual="b")
    assert [(e["outcome"], e["executionId"]) for e in ledger] == [
        ("Fired", "ex-sched"), ("Manual", "ex-manual-a"), ("Manual", "ex-manual-b"),
    ]  # fmt: skip


def test_a_scheduled_execution_adds_no_entry() -> None:
    assert "occurrences" not in transition_patch({}, ended("ex-sched", AT), generation=1, now=LATER)


def execution_object(source: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "ex-manual-a", "annotations": annotations or {}}, "spec": {"source": source}}


def test_the_request_id_comes_from_a_manual_executions_annotation() -> None:
    assert manual_request(execution_object("Manual", {ANNOTATION_REQUEST_ID: "deploy-42"})) == "deploy-42"
    assert manual_request(execution_object("Manual")) == "ex-manual-a"
    assert manual_request(execution_object("Backfill", {ANNOTATION_REQUEST_ID: "x"})) is None
    assert manual_request(execution_object("Trigger")) is None


def test_the_leaders_status_writer_carries_the_request_into_its_fold() -> None:
    change = Change("uid-job", _transition_step(ended("ex-manual-a", AT), LATER, "deploy-42"), lambda job: None)
    patch = fold({}, [change], generation=1)
    assert [(e["outcome"], e["reason"]) for e in patch["occurrences"]] == [("Manual", "run by hand, request deploy-42")]
