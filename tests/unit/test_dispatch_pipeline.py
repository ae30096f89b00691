"""The dispatcher hands its creates to workers and goes on (`vigil.kube.controllers.dispatcher`).

A pass chooses within capacity, hands the chosen pods to the create workers and returns: what
becomes Ready while a create is slow waits for a free worker, not for the slowest create of the
pass before (in a 1,000-job minute with jitter, that wait was most of the pod lag beyond the
Execution's). A pod handed out holds its slot until its create ends, and one whose workflow
stopped wanting it while it waited for a worker is not created.

The API server is a stub here, which this machine could give for real, but a real one cannot be
made to hold one create while answering another: the stub's creates wait on a gate the test
opens. Everything else is the dispatcher's own code; the caches are stubs with nothing in them.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.core.dispatch import Capacity
from vigil.kube.controllers import dispatcher as dispatch_module
from vigil.kube.controllers.dispatcher import Dispatcher
from vigil.kube.stores.started import Started

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
WAIT = 10.0  # seconds a test waits for something that should come at once


class Clock:
    def now(self) -> datetime:
        return NOW


class EmptyCache:
    def get(self, namespace: str, name: str) -> None:
        return None

    def items(self) -> list[dict[str, Any]]:
        return []

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        return []


class NoExecutions:
    def in_phase(self, *phases: Any) -> list[dict[str, Any]]:
        return []


class GatedCreates:
    """Pod creates that wait for their gate: which were sent, and which went through."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.made: list[str] = []
        self.gates: dict[str, threading.Event] = {}
        self.arrived = threading.Condition()

    def gate(self, name: str) -> threading.Event:
        return self.gates.setdefault(name, threading.Event())

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        with self.arrived:
            self.sent.append(name)
            self.arrived.notify_all()
        if name in self.gates and not self.gates[name].wait(WAIT):
            raise AssertionError(f"{name}: its gate never opened")
        with self.arrived:
            self.made.append(name)
            self.arrived.notify_all()

    def wait_for(self, what: str, name: str) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: name in getattr(self, what), WAIT), f"{name} not {what}"


def step_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "team", "name": name, "labels": {}}, "spec": {}}


def dispatcher(creates: GatedCreates, *, max_running: int = 10) -> Dispatcher:
    # The ignores below: the stubs are not the declared classes (ApiClient, ExecutionStore,
    # Informer, KubeCatalogue, CoreApi) but carry the few methods these passes call; no API
    # client is needed (the creates go to the stub) and no execution is in flight to read a job for.
    d = Dispatcher(
        None,  # type: ignore[arg-type]
        store=NoExecutions(),  # type: ignore[arg-type]
        pods=EmptyCache(),  # type: ignore[arg-type]
        started=Started(),
        catalogue=None,  # type: ignore[arg-type]
        clock=Clock(),
        capacity=Capacity(max_running=max_running, reserved_high=0, per_namespace_max=max_running),
        workflow_pods=EmptyCache(),  # type: ignore[arg-type]
    )
    d._core = creates  # type: ignore[assignment]
    return d


def test_a_pass_does_not_wait_for_the_creates_it_handed_out() -> None:
    creates = GatedCreates()
    slow = creates.gate("slow")
    d = dispatcher(creates)
    d.want(("team", "w1"), [step_pod("slow")], "normal")
    d.dispatch()
    creates.wait_for("sent", "slow")

    d.want(("team", "w2"), [step_pod("quick")], "normal")
    d.dispatch()  # returns while "slow" is still being created...
    creates.wait_for("made", "quick")  # ...and "quick" goes through beside it
    assert creates.made == ["quick"]
    slow.set()
    creates.wait_for("made", "slow")


def test_a_pod_being_created_holds_its_slot() -> None:
    creates = GatedCreates()
    slow = creates.gate("first")
    d = dispatcher(creates, max_running=1)
    d.want(("team", "w1"), [step_pod("first")], "normal")
    assert d.dispatch().started == 1
    creates.wait_for("sent", "first")

    d.want(("team", "w2"), [step_pod("second")], "normal")
    assert d.dispatch().started == 0  # the one slot is "first"'s, though its pod is not made yet
    slow.set()
    creates.wait_for("made", "first")
    assert "second" not in creates.sent


def test_a_pod_its_workflow_withdrew_while_it_waited_for_a_worker_is_not_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dispatch_module, "START_CONCURRENCY", 1)  # one worker: the second waits
    creates = GatedCreates()
    first = creates.gate("first")
    d = dispatcher(creates)
    d.want(("team", "w1"), [step_pod("first")], "normal")
    d.want(("team", "w2"), [step_pod("second")], "normal")
    assert d.dispatch().started == 2
    creates.wait_for("sent", "first")

    d.want(("team", "w2"), [], "normal")  # w2 was deleted, or no longer wants that step
    first.set()
    creates.wait_for("made", "first")
    d._pool.shutdown(wait=True)  # whatever was queued has run
    assert creates.sent == ["first"]
