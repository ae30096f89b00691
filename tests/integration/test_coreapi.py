"""The operator's core/v1 requests (`vigil.kube.kits.coreapi.CoreApi`) against the real API server.

Each request the operator makes answers what the generated client answers, as JSON: a pod is
created (a second create is a 409), listed by selector (paged, and followed by a watch through
the pod cache), and deleted (a missing one is a 404); a Secret is created, read and replaced
conditionally (a stale resourceVersion is a 409); a ConfigMap is read; an Event is posted and is
then what `kubectl get events` shows, stamped with the recorder's injected clock.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import KubeCluster
from tests.waiting import wait_for
from vigil.kube.kits.apiclient import RequestPolicy, build_client
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.events import WARNING, EventRecorder
from vigil.kube.kits.informer import Informer

pytestmark = pytest.mark.integration

LABEL = "vigil.dev/coreapi-test"


class FixedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


def pod(name: str, tag: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {LABEL: tag}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]},
    }


def test_pods_are_created_listed_watched_and_deleted_as_the_generated_client_does(
    cluster: KubeCluster, namespace: str
) -> None:
    core = CoreApi(cluster.api)
    tag = uuid.uuid4().hex[:8]
    made = core.create_namespaced_pod(namespace, pod("a", tag))
    assert made["metadata"]["name"] == "a" and made["metadata"]["namespace"] == namespace
    with pytest.raises(ApiException) as again:
        core.create_namespaced_pod(namespace, pod("a", tag))
    assert again.value.status == 409
    assert core.create_pod(namespace, pod("b", tag)) is None  # made; its answer read, not decoded

    listed = core.list_namespaced_pod(namespace, label_selector=f"{LABEL}={tag}")
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == ["a", "b"]
    raw = core.list_pod_for_all_namespaces(label_selector=f"{LABEL}={tag}", limit=1, _preload_content=False)
    page = json.loads(raw.data)
    assert len(page["items"]) == 1 and page["metadata"].get("continue"), "the first of two pages"

    cache = Informer(core.list_pod_for_all_namespaces, what="pods", label_selector=f"{LABEL}={tag}")
    stop = threading.Event()
    threading.Thread(target=cache.run, args=(stop,), daemon=True).start()
    try:
        wait_for(lambda: len(cache) == 2, timeout=30, what="the cache to list both pods")
        core.create_namespaced_pod(namespace, pod("c", tag))
        wait_for(lambda: cache.get(namespace, "c") is not None, timeout=30, what="the watch to bring the new pod")
        core.delete_namespaced_pod("c", namespace, grace_period_seconds=0)
        wait_for(lambda: cache.get(namespace, "c") is None, timeout=30, what="the watch to bring the deletion")
    finally:
        stop.set()
    with pytest.raises(ApiException) as gone:
        core.delete_namespaced_pod("never-made", namespace)
    assert gone.value.status == 404


def test_a_pod_created_without_its_answer_leaves_its_connection_clean_for_the_next_request(
    cluster: KubeCluster, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The dispatcher creates pods without decoding the answers. Released unread, an answer's
    bytes stayed on its pooled connection: the next request either found the connection
    readable and opened another, or (its bytes not yet arrived) was sent on it, failed
    (BadStatusLine, ResponseNotReady) and was sent again; in a 1,000-execution burst, 6% of pod
    creates went twice, after the API server may already have acted on the first."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 1
    api = build_client(configuration, RequestPolicy(timeout_seconds=10.0, retry_after_cap_seconds=5.0))
    core = CoreApi(api)
    tag = uuid.uuid4().hex[:8]
    caplog.set_level(logging.DEBUG, logger="urllib3")
    try:
        for i in range(5):
            core.create_pod(namespace, pod(f"p{i}", tag))
            listed = core.list_namespaced_pod(namespace, label_selector=f"{LABEL}={tag}")
            assert len(listed["items"]) == i + 1
    finally:
        api.close()
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "Resetting dropped connection" in m or "Retrying" in m] == [], (
        "a connection was left with an unread answer: dropped, or a request on it sent again"
    )
    assert sum("POST /api/v1/namespaces" in m for m in said) == 5, "each create went out once"


def test_a_secret_is_replaced_only_from_the_version_read_and_a_config_map_is_read(
    cluster: KubeCluster, namespace: str
) -> None:
    core = CoreApi(cluster.api)
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "key"}, "type": "Opaque", "data": {"k": "YQ=="}}
    made = core.create_namespaced_secret(namespace, body)
    read = core.read_namespaced_secret("key", namespace)
    assert read["data"] == {"k": "YQ=="} and read["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
    newer = {**read, "data": {"k": "Yg=="}}
    core.replace_namespaced_secret("key", namespace, newer)
    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_secret("key", namespace, {**read, "data": {"k": "Yw=="}})  # the old version
    assert stale.value.status == 409
    assert core.read_namespaced_secret("key", namespace)["data"] == {"k": "Yg=="}
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_secret("no-such-secret", namespace)
    assert missing.value.status == 404

    cluster.core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="out"), data={"at": "2026-12-01T00:00:00Z"})
    )
    assert core.read_namespaced_config_map("out", namespace)["data"] == {"at": "2026-12-01T00:00:00Z"}


def test_an_event_is_posted_about_the_object_it_names(cluster: KubeCluster, namespace: str) -> None:
    subject = cluster.core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="subject"))
    )
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "subject", "namespace": namespace,
                                                                  "uid": subject.metadata.uid}}  # fmt: skip
    at = datetime(2026, 12, 1, 8, 30, 0, 123456, tzinfo=UTC)  # the injected clock's, not the host's
    recorder = EventRecorder(cluster.api, instance="test", clock=FixedClock(at))
    recorder.emit(obj, type_=WARNING, reason="InvalidSpec", message="m" * 2000)
    events = cluster.core.list_namespaced_event(namespace).items
    assert [(e.reason, e.type, e.involved_object.uid, len(e.message)) for e in events] == [
        ("InvalidSpec", WARNING, subject.metadata.uid, 1024)
    ]
    assert (events[0].event_time, events[0].first_timestamp, events[0].last_timestamp) == (at, at.replace(microsecond=0),
                                                                                         at.replace(microsecond=0))
