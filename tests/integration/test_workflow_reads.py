"""What a workflow engine pass reads, on the real API server.

The engine keeps the newest version of each unfinished workflow that it has seen (the answer to
its own write, a watch event: the Workflow cache holds it), so a pass reads nothing when that version is
current, and one GET when it is not: its conditional write meets 409, and the pass starts again
from what it reads. A watch event for a version the engine has handled queues nothing; a newer
one queues a pass. The engine runs in the test process with a clock the test moves (wait steps
come due at once); the Workflow and every read and write are the real API server's, counted by
a subclass that calls through.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.integration.conftest import KubeCluster
from tests.integration.workflows import (
    GROUP,
    VERSION,
    WORKFLOWS,
    MovableClock,
    create_workflow,
    get_workflow,
    watch_brings,
)
from vigil.kube.controllers.workflowapi import WorkflowApi, kept_whole
from vigil.kube.controllers.workflows import WorkflowEngine

WAIT = timedelta(seconds=10)


class CountingApi(WorkflowApi):
    """The engine's Kubernetes calls, counted."""

    def __init__(self, cluster: KubeCluster) -> None:
        super().__init__(cluster.api)
        self.gets = 0
        self.writes = 0  # status writes sent, conflicts included

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return super().get(namespace, name)

    def write_status(self, obj: Any, status: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        return super().write_status(obj, status)


def two_waits() -> list[dict[str, Any]]:
    return [
        {"id": "first", "type": "wait", "wait": {"duration": "10s"}},
        {"id": "second", "type": "wait", "dependsOn": ["first"], "wait": {"duration": "10s"}},
    ]


def test_a_pass_reads_only_when_what_it_holds_is_stale(cluster: KubeCluster, namespace: str) -> None:
    create_workflow(cluster, namespace, "hold", steps=two_waits())
    api, clock = CountingApi(cluster), MovableClock()
    engine = WorkflowEngine(api, clock=clock, events=None)

    engine.reconcile(namespace, "hold")  # nothing held yet: one GET, and the start written
    assert (api.gets, api.writes) == (1, 1)
    clock.at += WAIT
    engine.reconcile(namespace, "hold")  # first's timer, recorded on the version its write returned
    assert (api.gets, api.writes) == (1, 2)
    engine.reconcile(namespace, "hold")  # nothing new: nothing read, nothing written
    assert (api.gets, api.writes) == (1, 2)

    # Someone else changes the workflow: the version the engine holds is stale.
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, WORKFLOWS, "hold", {"metadata": {"labels": {"touched": "yes"}}}
    )
    clock.at += WAIT
    engine.reconcile(namespace, "hold")  # the write meets 409; read again; written
    assert (api.gets, api.writes) == (2, 4)
    done = get_workflow(cluster, namespace, "hold")
    assert done["status"]["phase"] == "Succeeded"
    assert done["metadata"]["labels"] == {"touched": "yes"}


def test_a_watch_event_for_a_version_already_handled_queues_nothing(cluster: KubeCluster, namespace: str) -> None:
    create_workflow(cluster, namespace, "hold", steps=two_waits())
    api, clock = CountingApi(cluster), MovableClock()
    engine = WorkflowEngine(api, clock=clock, events=None)
    engine.reconcile(namespace, "hold")
    written = get_workflow(cluster, namespace, "hold")
    version = written["metadata"]["resourceVersion"]

    watch_brings(engine, written)  # the event of the engine's own write
    assert engine.idle()
    older = {**written, "metadata": {**written["metadata"], "resourceVersion": str(int(version) - 1)}}
    watch_brings(engine, older)  # an older one, delivered late
    assert engine.idle()

    touched = cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, WORKFLOWS, "hold", {"metadata": {"labels": {"touched": "yes"}}}
    )
    watch_brings(engine, touched)
    assert not engine.idle()  # queued, with the body the event brought
    clock.at += WAIT
    engine.reconcile(namespace, "hold")
    assert (api.gets, api.writes) == (1, 2)  # the event's body was current: no GET, no conflict


def test_a_finished_workflow_the_cache_holds_whole_is_not_read_again(cluster: KubeCluster, namespace: str) -> None:
    """Finished with its history not yet in the database, the workflow is held whole: the passes
    that mirror it and count it mirrored read it from the cache, as they do an unfinished one."""
    create_workflow(cluster, namespace, "hold", steps=two_waits())
    api, clock = CountingApi(cluster), MovableClock()
    engine = WorkflowEngine(api, clock=clock, events=None)
    engine.reconcile(namespace, "hold")
    for _ in range(2):
        clock.at += WAIT
        engine.reconcile(namespace, "hold")
    assert get_workflow(cluster, namespace, "hold")["status"]["phase"] == "Succeeded"
    held = engine.cache.get(namespace, "hold")
    assert held is not None and kept_whole(held)
    gets = api.gets

    engine.reconcile(namespace, "hold")  # finished, held whole: nothing read
    assert api.gets == gets
