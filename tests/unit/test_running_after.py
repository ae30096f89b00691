"""When the execution controller records an attempt Running (`vigil.kube.controllers.executioncontroller`).

Running means on a node for `runningAfterSeconds`, counted from when this process first saw the
pod there. An API server under load delivers pod events seconds late (in a 1,000-job burst, a
pod's end reached the operator 3.5 s after the node wrote it, p50): counted from the pod's own
`startTime`, a short attempt first seen on its node that late looked old enough, was written
Running, and its end followed a moment later, two writes where one was due.

A real API server cannot be made to deliver one pod's events late on demand, so the caches here
are stubs holding the objects a test puts in them, the clock is a test's, and the writes go to a
list; the reconcile is the controller's own code. The integration test
`test_an_attempt_whose_pod_no_node_takes_is_not_recorded_running_and_fails_at_its_pending_limit`
checks the other half (a pod no node takes) on the real control plane.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.core.executions import Execution, Phase
from vigil.core.memory import FakeClock
from vigil.kube.controllers.executioncontroller import ExecutionController
from vigil.kube.stores.started import Started

CREATED = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
RUNNING_AFTER = timedelta(seconds=5)
KEY = ("team", "ex-abc")
POD = "ex-abc-1"


def ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class Executions:
    """The Execution cache and its writer: one object, and every phase written to it."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] = {
            "metadata": {"namespace": KEY[0], "name": KEY[1], "resourceVersion": "1",
                         "creationTimestamp": ts(CREATED)},
            "spec": {"executionId": KEY[1], "job": {"name": "nightly", "uid": "u-1"},
                     "scheduledFor": ts(CREATED)},
        }  # fmt: skip
        self.written: list[str] = []

    def cached(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.obj if (namespace, name) == KEY else None

    def write(self, obj: Any, execution: Execution, *, extra: Any = None) -> dict[str, Any]:
        self.written.append(str(execution.phase))
        self.obj = {**self.obj, "status": {"phase": str(execution.phase)}}
        return self.obj


class Pods:
    def __init__(self) -> None:
        self.pod: dict[str, Any] | None = None

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pod if (namespace, name) == (KEY[0], POD) else None


def running_pod(*, on_node_at: datetime) -> dict[str, Any]:
    return {
        "metadata": {"namespace": KEY[0], "name": POD, "creationTimestamp": ts(CREATED),
                     "labels": {"vigil.dev/execution-id": KEY[1]}},
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running", "startTime": ts(on_node_at),
                   "containerStatuses": [{"name": "main", "state": {"running": {"startedAt": ts(on_node_at)}}}]},
    }  # fmt: skip


def controller(clock: FakeClock, executions: Executions, pods: Pods) -> ExecutionController:
    # The ignores: the stubs stand in for ExecutionStore, Informer and JobResults with only what
    # a reconcile of a Ready execution with a running pod calls; nothing here deletes a pod or
    # records an end, so those collaborators are never reached.
    return ExecutionController(
        store=executions,  # type: ignore[arg-type]
        pods=pods,  # type: ignore[arg-type]
        started=Started(),
        results=None,  # type: ignore[arg-type]
        core=None,
        clock=clock,
        wake_dispatcher=lambda: None,
        running_after=RUNNING_AFTER,
    )


def test_a_pod_first_seen_on_its_node_long_after_its_start_is_not_written_running_at_once() -> None:
    clock, executions, pods = FakeClock(CREATED + timedelta(seconds=20)), Executions(), Pods()
    pods.pod = running_pod(on_node_at=CREATED + timedelta(seconds=1))  # seen 19 s late
    ctl = controller(clock, executions, pods)

    again = ctl.reconcile(KEY)
    assert executions.written == []
    assert again == RUNNING_AFTER.total_seconds()

    clock.advance(RUNNING_AFTER)
    ctl.reconcile(KEY)
    assert executions.written == [str(Phase.RUNNING)]


def test_the_count_starts_once_per_attempt_and_not_again_on_every_look() -> None:
    clock, executions, pods = FakeClock(CREATED + timedelta(seconds=2)), Executions(), Pods()
    pods.pod = running_pod(on_node_at=CREATED + timedelta(seconds=1))
    ctl = controller(clock, executions, pods)

    ctl.reconcile(KEY)
    clock.advance(timedelta(seconds=3))
    again = ctl.reconcile(KEY)  # a later event (say, the container started) does not restart it
    assert executions.written == []
    assert again == (RUNNING_AFTER - timedelta(seconds=3)).total_seconds()

    clock.advance(timedelta(seconds=2))
    ctl.reconcile(KEY)
    assert executions.written == [str(Phase.RUNNING)]


def test_a_pod_waiting_for_a_node_is_never_written_running() -> None:
    clock, executions, pods = FakeClock(CREATED + timedelta(minutes=1)), Executions(), Pods()
    waiting = running_pod(on_node_at=CREATED)
    waiting["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    pods.pod = waiting
    ctl = controller(clock, executions, pods)

    ctl.reconcile(KEY)
    clock.advance(timedelta(minutes=1))
    ctl.reconcile(KEY)
    assert executions.written == []
