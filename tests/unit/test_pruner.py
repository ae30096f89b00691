"""Retention's deletes: queued by job, never on the caller's thread, and several jobs at once.

The store and catalogue here are stand-ins for the Execution cache and the API server (whose
deletes the integration tests run for real, `test_retention_keeps_the_newest_finished_executions_...`):
what is shown is the queue's shape, that one slow delete does not hold every other job's.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from vigil.core.executions import ExecutionId, Phase, execution_to_dict, new_execution
from vigil.kube.controllers.retention import Pruner

T0 = datetime(2026, 12, 1, tzinfo=UTC)
WAIT = 10.0  # seconds an event may take before the test fails (never reached when it passes)


def succeeded(job: str, n: int) -> dict[str, Any]:
    ex = new_execution(ExecutionId(f"ex-{job}-{n}"), namespace="ns", job=job, scheduled_for=T0, now=T0)
    ex = dataclasses.replace(ex, phase=Phase.SUCCEEDED, finished_at=T0 + timedelta(minutes=n))
    return {
        "metadata": {"namespace": "ns", "name": str(ex.execution_id), "uid": f"uid-{job}-{n}", "resourceVersion": "1"},
        "spec": {"job": {"name": job, "uid": f"job-{job}"}},
        "status": execution_to_dict(ex),
    }


class SlowStore:
    """Five succeeded executions per job; job `a`'s first delete waits until one of `b` has begun."""

    def __init__(self) -> None:
        self.objs = {job: [succeeded(job, n) for n in range(5)] for job in ("a", "b")}
        self.b_began = threading.Event()
        self.a_saw_b: bool | None = None
        self.deleted: list[str] = []
        self.all_done = threading.Event()
        self._lock = threading.Lock()

    def of_job(self, namespace: str, job_uid: str) -> list[dict[str, Any]]:
        return list(self.objs[job_uid.removeprefix("job-")])

    def delete(self, obj: dict[str, Any]) -> None:
        job = obj["spec"]["job"]["name"]
        if job == "b":
            self.b_began.set()
        elif self.a_saw_b is None:
            self.a_saw_b = self.b_began.wait(WAIT)  # a delete that takes a while
        with self._lock:
            self.deleted.append(obj["metadata"]["name"])
            if len(self.deleted) == 4:  # two of each job's five go (three are kept)
                self.all_done.set()


def pruner(store: SlowStore, **kwargs: Any) -> Pruner:
    spec = SimpleNamespace(retention=SimpleNamespace(succeeded=3, failed=1))
    catalogue = SimpleNamespace(current_spec=lambda namespace, job: spec)
    return Pruner(None, store=store, catalogue=catalogue, written=lambda obj: True, **kwargs)


def test_asking_for_retention_never_deletes_on_the_callers_thread() -> None:
    store = SlowStore()
    p = pruner(store)
    p.want("ns", "a", "job-a")
    p.want("ns", "a", "job-a")  # asked again before it ran: one pass
    assert store.deleted == []
    assert len(p.queue) == 1


def test_a_slow_delete_of_one_job_does_not_hold_another_jobs() -> None:
    store = SlowStore()
    p = pruner(store)
    stop = threading.Event()
    runner = threading.Thread(target=p.queue.run, args=(stop,), daemon=True)
    runner.start()
    try:
        p.want("ns", "a", "job-a")
        p.want("ns", "b", "job-b")
        assert store.all_done.wait(3 * WAIT), store.deleted
    finally:
        stop.set()
        runner.join(timeout=WAIT)
    assert store.a_saw_b is True, "job b's deletes waited for job a's"
    assert sorted(store.deleted) == ["ex-a-0", "ex-a-1", "ex-b-0", "ex-b-1"]
