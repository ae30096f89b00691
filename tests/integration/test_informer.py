"""The watch-fed cache against the real API server: it lists, follows the watch, sends the
label selector to the server, announces every change (deletions with the last object known),
keeps a writer's newer answer over an older event, and lists again after its watch fails."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import KubeCluster
from tests.waiting import wait_for
from vigil.kube.kits.informer import Informer

LABEL = "vigil.test/informer"


def config_map(namespace: str, name: str, *, labelled: bool = True, value: str = "1") -> client.V1ConfigMap:
    labels = {LABEL: "yes"} if labelled else {}
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=labels), data={"v": value}
    )


class Seen:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, bool]] = []  # (name, data value, deleted)

    def __call__(self, key: tuple[str, str], obj: dict[str, Any], deleted: bool) -> None:
        with self.lock:
            self.events.append((key[1], (obj.get("data") or {}).get("v", ""), deleted))

    def of(self, name: str) -> list[tuple[str, bool]]:
        with self.lock:
            return [(v, d) for n, v, d in self.events if n == name]


@pytest.fixture
def informer(cluster: KubeCluster, namespace: str) -> Iterator[tuple[Informer, Seen]]:
    cluster.core.create_namespaced_config_map(namespace, config_map(namespace, "before"))
    cache = Informer(
        lambda **kw: cluster.core.list_namespaced_config_map(namespace, **kw),
        what="configmaps",
        label_selector=f"{LABEL}=yes",
        indexes={"value": lambda obj: (obj.get("data") or {}).get("v")},
    )
    seen = Seen()
    cache.add_handler(seen)
    stop = threading.Event()
    thread = threading.Thread(target=cache.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield cache, seen
    finally:
        stop.set()


def test_it_lists_then_follows_every_change_of_its_own_objects_only(
    cluster: KubeCluster, namespace: str, informer: tuple[Informer, Seen]
) -> None:
    cache, seen = informer
    wait_for(cache.synced.is_set, timeout=30, what="the first list")
    assert cache.get(namespace, "before") is not None, "what existed before is listed"

    cluster.core.create_namespaced_config_map(namespace, config_map(namespace, "mine"))
    cluster.core.create_namespaced_config_map(namespace, config_map(namespace, "other", labelled=False))
    wait_for(lambda: cache.get(namespace, "mine"), timeout=30, what="the new object")
    cluster.core.patch_namespaced_config_map("mine", namespace, {"data": {"v": "2"}})
    wait_for(lambda: (cache.get(namespace, "mine") or {}).get("data", {}).get("v") == "2", timeout=30, what="the update")
    assert [o["metadata"]["name"] for o in cache.by_index("value", "2")] == ["mine"]
    cluster.core.delete_namespaced_config_map("mine", namespace)
    wait_for(lambda: cache.get(namespace, "mine") is None, timeout=30, what="the deletion")

    assert seen.of("mine") == [("1", False), ("2", False), ("2", True)], "each change, the deletion with the last object"
    assert cache.by_index("value", "2") == []
    assert cache.get(namespace, "other") is None and seen.of("other") == [], "the selector went to the server"


def test_a_writers_newer_answer_is_kept_over_an_older_version(
    cluster: KubeCluster, namespace: str, informer: tuple[Informer, Seen]
) -> None:
    cache, _ = informer
    wait_for(cache.synced.is_set, timeout=30, what="the first list")
    first = cluster.api.sanitize_for_serialization(
        cluster.core.create_namespaced_config_map(namespace, config_map(namespace, "written"))
    )
    second = cluster.api.sanitize_for_serialization(
        cluster.core.patch_namespaced_config_map("written", namespace, {"data": {"v": "2"}})
    )
    cache.observe(second)
    cache.observe(first)  # an older version arriving late changes nothing
    assert (cache.get(namespace, "written") or {}).get("data") == {"v": "2"}


def test_after_its_watch_fails_it_lists_again_and_misses_nothing(
    cluster: KubeCluster, namespace: str
) -> None:
    """A list function that fails the first watch (as a dropped connection would): the cache lists
    again, and what changed meanwhile is there."""
    calls = {"watches": 0}
    gone_before_relist = threading.Event()

    def list_fn(**kw: Any) -> Any:
        if kw.get("watch"):
            calls["watches"] += 1
            if calls["watches"] == 1:
                cluster.core.create_namespaced_config_map(namespace, config_map(namespace, "while-down"))
                cluster.core.delete_namespaced_config_map("doomed", namespace)
                gone_before_relist.set()
                raise client.ApiException(status=500, reason="connection dropped")
        return cluster.core.list_namespaced_config_map(namespace, **kw)

    cluster.core.create_namespaced_config_map(namespace, config_map(namespace, "doomed"))
    cache = Informer(list_fn, what="configmaps", label_selector=f"{LABEL}=yes")
    seen = Seen()
    cache.add_handler(seen)
    stop = threading.Event()
    threading.Thread(target=cache.run, args=(stop,), daemon=True).start()
    try:
        wait_for(lambda: cache.get(namespace, "while-down"), timeout=30, what="the object created while down")
        assert gone_before_relist.is_set()
        assert cache.get(namespace, "doomed") is None
        assert seen.of("doomed") == [("1", False), ("1", True)], "the relist announced the deletion it found"
    finally:
        stop.set()
