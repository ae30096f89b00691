"""Helpers for tests that create ScheduledJobs (and backfills of Executions) and inspect what the operator did with them."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import KubeCluster
from tests.waiting import wait_for
from vigil.core.ids import execution_id
from vigil.kube.stores.executions import execution_body

GROUP, VERSION, PLURAL = "vigil.dev", "v1alpha1", "scheduledjobs"
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=vigil"


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: Tests count what fired by the Executions and pods left on the API server, so their jobs keep
#: them all; test_executions.py checks retention itself with the defaults' small limits.
KEEP_EVERY_EXECUTION = {"succeeded": 1000, "failed": 1000}


def job_body(name: str, *, command: str = "true", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "template": {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", command]}]}},
        "retention": KEEP_EVERY_EXECUTION,
    }
    body.update(spec)
    if "workflowTemplate" in spec or "task" in spec:
        del body["template"]  # exactly one of the three
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": name}, "spec": body}


def create_job(cluster: KubeCluster, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, job_body(name, **spec)
    )
    return obj


def get_job(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return obj


def patch_spec(cluster: KubeCluster, namespace: str, name: str, spec: dict[str, Any]) -> None:
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})


def ledger(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return list((get_job(cluster, namespace, name).get("status") or {}).get("occurrences") or [])


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def vigil_pods(cluster: KubeCluster, namespace: str) -> list[Any]:
    return list(
        cluster.core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/managed-by=vigil").items
    )


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}


def executions(cluster: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    result = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "executions")
    return list(result["items"])


def scheduled_for_by_job(cluster: KubeCluster, namespace: str) -> dict[str, list[str]]:
    """Each job's executions' nominal times, sorted: one Execution per fired occurrence."""
    out: dict[str, list[str]] = {}
    for ex in executions(cluster, namespace):
        out.setdefault(ex["spec"]["job"]["name"], []).append(ex["spec"]["scheduledFor"])
    return {k: sorted(v) for k, v in out.items()}


def pods_scheduled_for_by_job(cluster: KubeCluster, namespace: str) -> dict[str, list[str]]:
    """Each job's pods' VIGIL_SCHEDULED_FOR values, sorted."""
    out: dict[str, list[str]] = {}
    for pod in vigil_pods(cluster, namespace):
        out.setdefault(pod.metadata.labels["vigil.dev/job"], []).append(env_of(pod)["VIGIL_SCHEDULED_FOR"])
    return {k: sorted(v) for k, v in out.items()}


def wait_all_executions_finished(cluster: KubeCluster, namespace: str, *, timeout: float = 120) -> list[dict[str, Any]]:
    """Every Execution in a final phase (each pod ran), returned."""

    unfinished: list[str] = []

    def probe() -> list[dict[str, Any]] | None:
        items = executions(cluster, namespace)
        unfinished[:] = [
            f"{e['metadata']['name']}:{(e.get('status') or {}).get('phase')}:{(e.get('status') or {}).get('reason')}"
            for e in items
            if (e.get("status") or {}).get("phase") not in ("Succeeded", "Dead", "Cancelled")
        ]
        return items if items and not unfinished else None

    try:
        return wait_for(probe, timeout=timeout, what="every execution to finish")
    except AssertionError as err:
        raise AssertionError(f"{err}; unfinished: {unfinished[:10]}") from None


def duplicates(values: list[str]) -> list[str]:
    return [v for v, n in Counter(values).items() if n > 1]


def wait_for_ledger(
    cluster: KubeCluster, namespace: str, name: str, *, through: datetime, timeout: float = 60
) -> list[dict[str, Any]]:
    """The job's ledger once it has an outcome for some nominal time at or after `through`."""
    stamp = rfc3339(through)

    def probe() -> list[dict[str, Any]] | None:
        try:
            entries = ledger(cluster, namespace, name)
        except ApiException:
            return None
        return entries if any(e["nominal"] >= stamp for e in entries) else None

    return wait_for(probe, timeout=timeout, what=f"{name}'s ledger to reach {stamp}")


# --- Executions -------------------------------------------------------------------------------

EXECUTIONS = "executions"


def get_execution(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = cluster.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, EXECUTIONS, name
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return obj


def patch_execution_spec(cluster: KubeCluster, namespace: str, name: str, spec: dict[str, Any]) -> None:
    """A merge patch on the Execution's spec: the user's levers (cancel, retryRequests)."""
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, EXECUTIONS, name, {"spec": spec})


def execution_status(obj: dict[str, Any] | None) -> dict[str, Any]:
    return dict((obj or {}).get("status") or {})


def wait_execution_phase(
    cluster: KubeCluster, namespace: str, name: str, phase: str, *, timeout: float = 60, attempt: int | None = None
) -> dict[str, Any]:
    """The Execution once it is in `phase` (and at `attempt`, when given)."""

    def probe() -> dict[str, Any] | None:
        obj = get_execution(cluster, namespace, name)
        status = execution_status(obj)
        if status.get("phase") != phase or (attempt is not None and status.get("attempt") != attempt):
            return None
        return obj

    return wait_for(probe, timeout=timeout, what=f"execution {name} in {phase}")


def execution_pods(cluster: KubeCluster, namespace: str, execution_id: str) -> list[Any]:
    """Every attempt's pod of one execution, first attempt first."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=f"vigil.dev/execution-id={execution_id}").items
    return sorted(pods, key=lambda p: int(p.metadata.labels["vigil.dev/attempt"]))


def events_about(cluster: KubeCluster, namespace: str, name: str, reason: str) -> list[Any]:
    selector = f"involvedObject.name={name},reason={reason}"
    return list(cluster.core.list_namespaced_event(namespace, field_selector=selector).items)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def make_namespace(cluster: KubeCluster, prefix: str = "t") -> str:
    """A fresh namespace with its default service account ready (pods need it); the caller deletes it."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def sa_ready() -> bool:
        try:
            cluster.core.read_namespaced_service_account("default", name)
        except ApiException:
            return False
        return True

    wait_for(sa_ready, timeout=60, what=f"default service account in {name}")
    return name


WATCH_SECONDS = 5  # each watch request's length: how long stopping the recorder may take


class Follower:
    """A watch followed on a thread from a known revision, each event handed to `on_event` in order.

    A dropped connection resumes from the last revision seen; an expired one (410) means the
    record could no longer be complete, which `check()` turns into a failed assertion.
    """

    def __init__(self, list_call: Any, *args: Any, label_selector: str = "") -> None:
        self._list = list_call
        self._args = args
        self._selector = label_selector
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch = watch.Watch()
        self.error: str | None = None
        start = list_call(*args, label_selector=label_selector, limit=1)
        meta = start["metadata"] if isinstance(start, dict) else start.metadata
        self._version: str = meta["resourceVersion"] if isinstance(meta, dict) else meta.resource_version
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._thread.start()

    def on_event(self, kind: str, obj: Any) -> None:
        raise NotImplementedError

    def check(self) -> None:
        if self.error:
            raise AssertionError(self.error)

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
        self._thread.join(timeout=2 * WATCH_SECONDS)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except ApiException as err:
                if err.status == 410:
                    self.error = f"{type(self).__name__}: watch expired at {self._version}: the record is incomplete"
                    return
            except Exception:  # a dropped connection: resume from the last revision seen
                time.sleep(0.2)  # not synchronisation: a pause before reconnecting

    def _follow(self) -> None:
        stream = self._watch.stream(
            self._list, *self._args, label_selector=self._selector,
            resource_version=self._version, timeout_seconds=WATCH_SECONDS,
        )  # fmt: skip
        for event in stream:
            obj = event["object"]
            meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata
            self._version = meta["resourceVersion"] if isinstance(meta, dict) else meta.resource_version
            with self._lock:
                self.on_event(event["type"], obj)
            if self._stop.is_set():
                return


class PodCreations(Follower):
    """Every Vigil pod created in some namespaces, in creation order, recorded by a watch.

    A watch delivers a pod's ADDED event with the object as it was created, so
    its resourceVersion is the creation's revision: sorting on it gives the
    exact order the API server created them in (one etcd, one revision counter,
    shared with every other object — so it also orders pods against, say, the
    creation of an Execution).
    """

    def __init__(self, cluster: KubeCluster, namespaces: set[str]) -> None:
        self._namespaces = namespaces
        self._created: dict[tuple[str, str], int] = {}
        super().__init__(cluster.core.list_pod_for_all_namespaces, label_selector=MANAGED_SELECTOR)

    def ordered(self) -> list[tuple[str, str, int]]:
        """(namespace, pod name, creation revision), oldest first."""
        self.check()
        with self._lock:
            items = [(ns, name, rv) for (ns, name), rv in self._created.items()]
        return sorted(items, key=lambda item: item[2])

    def on_event(self, kind: str, obj: Any) -> None:
        if kind == "ADDED" and obj.metadata.namespace in self._namespaces:
            key = (obj.metadata.namespace, obj.metadata.name)
            self._created.setdefault(key, int(obj.metadata.resource_version))


# --- many Executions at once (a backfill), and the namespaces that held them --------------------

FAR_FUTURE = timedelta(days=1)  # a job's own schedule never fires during the test
CREATE_THREADS = 8


def now() -> datetime:
    return datetime.now(UTC)


def create_executions(cluster: KubeCluster, job: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """`count` Executions of `job` for distinct past nominal times, created as fast as possible."""
    uid, namespace = job["metadata"]["uid"], job["metadata"]["namespace"]
    base = now().replace(microsecond=0) - timedelta(hours=1)
    bodies = []
    for i in range(count):
        nominal = base + timedelta(seconds=i)
        body = execution_body(
            job=job, execution_id=execution_id(uid, nominal), scheduled_for=nominal,
            period_start=nominal - timedelta(seconds=1), period_end=nominal, source="Backfill",
        )  # fmt: skip
        bodies.append(body)

    def create(body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, EXECUTIONS, body
        )
        return created

    with ThreadPoolExecutor(max_workers=CREATE_THREADS) as pool:
        return list(pool.map(create, bodies))


def delete_namespaces(cluster: KubeCluster, *namespaces: str) -> None:
    """Empty and delete the namespaces: a later test's operator must not find a thousand Ready
    executions it cannot start (their namespace is terminating)."""
    for ns in namespaces:
        cluster.clear_namespace(ns, timeout=180)
