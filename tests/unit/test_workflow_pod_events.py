"""Which step pod events queue a pass of their workflow (`WorkflowEngine.pod_changed`).

A pass records results: a pod that finished (Succeeded, Failed, stuck Pending past its limit)
or is gone or going. Every other change of a step pod — created, bound, started — tells a pass
nothing it would act on, and a 500-step bench made four of them per pod. A result that comes
while other step pods of its workflow still run is passed a moment later
(`SIBLINGS_SETTLE_SECONDS`), so a fan that ends together is recorded in one status write; the
last one is passed at once. The engine here has no API behind it, only a step pod cache's
answer: these calls only queue (or not), and nothing runs the queue.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.kube.controllers.workflowpods import BY_WORKFLOW
from vigil.kube.controllers.workflows import SIBLINGS_SETTLE_SECONDS, WorkflowEngine

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


class FixedClock:
    def now(self) -> datetime:
        return NOW


def step_pod(phase: str, *, owner: str = "w1", deleting: bool = False, name: str = "st-abc-1") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "labels": {"vigil.dev/workflow-uid": "u1"},
        "creationTimestamp": "2026-12-03T11:59:50Z",
        "ownerReferences": [{"kind": "Workflow", "name": owner, "uid": "u1"}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T11:59:59Z"
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        status["containerStatuses"] = [{"name": "main", "state": {"running": {"startedAt": "2026-12-03T11:59:55Z"}}}]
    if phase in ("Succeeded", "Failed"):
        code = 0 if phase == "Succeeded" else 3
        status["containerStatuses"] = [
            {"name": "main", "state": {"terminated": {"exitCode": code, "finishedAt": "2026-12-03T11:59:58Z"}}}
        ]
    return {"metadata": meta, "status": status}


class PodCache:
    """The step pod cache's one answer the handler reads: a workflow's pods."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        assert index == BY_WORKFLOW
        return [p for p in self.pods if p["metadata"]["labels"]["vigil.dev/workflow-uid"] == value]


class Api:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pod_cache = PodCache(pods)


def engine(*pods: dict[str, Any]) -> WorkflowEngine:
    # The ignore: `Api` is not a WorkflowApi, only the `pod_cache` the handler reads.
    return WorkflowEngine(api=Api(list(pods)), clock=FixedClock(), events=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("phase", ["Pending", "Running"])
def test_a_pod_created_bound_or_running_queues_no_pass(phase: str) -> None:
    e = engine()
    e.pod_changed(("team", "st-abc-1"), step_pod(phase), False)
    assert e.idle()


@pytest.mark.parametrize(
    ("pod", "deleted"),
    [
        (step_pod("Succeeded"), False),
        (step_pod("Failed"), False),
        (step_pod("Running", deleting=True), False),
        (step_pod("Running"), True),
    ],
    ids=["succeeded", "failed", "being-deleted", "deleted"],
)
def test_a_pod_with_a_result_queues_its_workflow(pod: dict[str, Any], deleted: bool) -> None:
    e = engine()
    e.pod_changed(("team", "st-abc-1"), pod, deleted)
    assert not e.idle()


def test_a_pod_owned_by_no_workflow_queues_nothing() -> None:
    e = engine()
    pod = step_pod("Succeeded")
    pod["metadata"]["ownerReferences"] = [{"kind": "ScheduledJob", "name": "j", "uid": "u2"}]
    e.pod_changed(("team", "st-abc-1"), pod, False)
    assert e.idle()


def test_a_result_while_siblings_run_is_passed_a_moment_later_and_the_last_at_once() -> None:
    first, second = step_pod("Succeeded", name="st-f0-1"), step_pod("Running", name="st-f1-1")
    e = engine(first, second)
    e.pod_changed(("team", "st-f0-1"), first, False)
    assert e.idle()  # not now...
    assert len(e.queue) == 1  # ...but in SIBLINGS_SETTLE_SECONDS
    assert SIBLINGS_SETTLE_SECONDS < 1

    second = step_pod("Succeeded", name="st-f1-1")
    e = engine(first, second)
    e.pod_changed(("team", "st-f1-1"), second, False)
    assert not e.idle()  # the last of them: at once
