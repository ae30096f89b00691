"""The dispatcher counts the step pods holding slots without reading the finished ones.

Finished step pods stay in the leader's step pod cache until their workflow leaves (a day by
default), so a pass that read every step pod grew with every workflow kept. The cache keeps an
index of the live ones (`vigil.kube.controllers.workflowpods.LIVE`), which follows each pod as it
starts, ends and goes. The cache here is the real one, filled through `observe` as the watch
would fill it; no API server is needed, as none is listed. Its `items()` refuses to be called, so
a pass that read every step pod fails here.
"""

from __future__ import annotations

from typing import Any

from tests.unit.test_dispatch_pipeline import Clock, EmptyCache, NoExecutions
from vigil.core.dispatch import Capacity
from vigil.kube.controllers.dispatcher import Dispatcher
from vigil.kube.controllers.workflowpods import LIVE, workflow_pod_cache
from vigil.kube.kits.informer import Informer
from vigil.kube.stores.started import Started

FINISHED = 1000


def step_pod(name: str, phase: str, *, version: int = 1, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "namespace": "team", "name": name, "resourceVersion": str(version),
        "labels": {"vigil.dev/workflow-uid": "u1", "vigil.dev/priority": "normal"},
    }  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T12:00:00Z"
    return {"metadata": meta, "spec": {}, "status": {"phase": phase}}


def unread_whole(cache: Informer) -> Informer:
    def refused() -> list[dict[str, Any]]:
        raise AssertionError("a dispatch pass read every step pod")

    cache.items = refused
    cache.iter_items = refused
    return cache


def dispatcher(cache: Informer) -> Dispatcher:
    # The stubs (test_dispatch_pipeline.py's) carry the few methods a pass with no execution in
    # flight calls; the step pod cache is the real one.
    return Dispatcher(
        None,
        store=NoExecutions(),
        pods=EmptyCache(),
        started=Started(),
        catalogue=None,
        clock=Clock(),
        capacity=Capacity(max_running=10, reserved_high=0, per_namespace_max=10),
        workflow_pods=cache,
    )


def test_a_pass_counts_the_live_step_pods_and_reads_no_finished_one() -> None:
    cache = unread_whole(workflow_pod_cache(None))
    for n in range(FINISHED):
        cache.observe(step_pod(f"done-{n}", "Succeeded"))
    cache.observe(step_pod("pending", "Pending"))
    cache.observe(step_pod("running", "Running"))
    cache.observe(step_pod("going", "Running", deleting=True))
    assert dispatcher(cache).dispatch().running == 2


def test_the_live_index_follows_a_pod_as_it_starts_ends_and_goes() -> None:
    cache = workflow_pod_cache(None)

    def live() -> list[str]:
        return [p["metadata"]["name"] for p in cache.by_index(LIVE, LIVE)]

    cache.observe(step_pod("a", "Pending", version=1))
    cache.observe(step_pod("b", "Running", version=1))
    assert sorted(live()) == ["a", "b"]
    cache.observe(step_pod("a", "Running", version=2))
    cache.observe(step_pod("b", "Succeeded", version=2))
    assert live() == ["a"]
    cache.observe(step_pod("a", "Failed", version=3))
    assert live() == []
    cache.observe(step_pod("c", "Pending", version=1))
    cache.forget("team", "c", version="2")
    assert live() == []
