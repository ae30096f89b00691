"""Helpers for tests that create ScheduledJobs and inspect what the operator did with them."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import KubeCluster
from tests.waiting import wait_for

GROUP, VERSION, PLURAL = "vigil.dev", "v1alpha1", "scheduledjobs"


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_body(name: str, *, command: str = "true", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "template": {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", command]}]}},
    }
    body.update(spec)
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
FINAL_PHASES = ("Succeeded", "Dead", "Cancelled")


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
