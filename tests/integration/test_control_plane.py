"""The local control plane is the real thing: admission, conflicts, Leases, pods, GC, Helm.

Each test here pins down an API-server behaviour the operator relies on, against
the kube-apiserver, etcd, controller manager and scheduler built from source,
with the local node agent standing in for a kubelet.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import REPO, KubeCluster
from tests.waiting import wait_for

GROUP, VERSION = "vigil.dev", "v1alpha1"


def scheduled_job(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cron": "0 2 * * *",
        "timezone": "Europe/London",
        "template": {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}},
    }
    base.update(spec)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScheduledJob",
        "metadata": {"name": name},
        "spec": {k: v for k, v in base.items() if v is not None},
    }


def create_sj(cluster: KubeCluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "scheduledjobs", body
    )
    return obj


def rejection(cluster: KubeCluster, namespace: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as info:
        create_sj(cluster, namespace, body)
    assert info.value.status == 422, info.value.body
    return str(json.loads(info.value.body)["message"])


# --- admission -------------------------------------------------------------------------


def test_plain_kubectl_apply_of_the_crds_succeeds(cluster: KubeCluster) -> None:
    result = cluster.kubectl("apply", "-f", str(REPO / "crds"))
    assert "scheduledjobs.vigil.dev" in result.stdout


def test_crds_are_established(cluster: KubeCluster) -> None:
    names = {c.metadata.name for c in cluster.apiext.list_custom_resource_definition().items}
    assert {"scheduledjobs.vigil.dev", "workflows.vigil.dev", "schedulebuckets.vigil.dev"} <= names
    out = cluster.kubectl("api-resources", "--api-group=vigil.dev", "-o", "name").stdout.split()
    assert "scheduledjobs.vigil.dev" in out


def test_a_valid_job_is_admitted_and_defaulted(cluster: KubeCluster, namespace: str) -> None:
    obj = create_sj(cluster, namespace, scheduled_job("ok"))
    assert obj["spec"]["catchUpPolicy"] == "All"
    assert obj["spec"]["concurrencyPolicy"] == "Allow"


def test_related_durations_are_compared_in_every_unit(cluster: KubeCluster, namespace: str) -> None:
    """The admission rules compare durations written with days, hours, minutes and seconds."""
    job = scheduled_job("ok", cron=None, every="2d", jitter="1d23h59m59s", expectedMaxInterval="2d")
    created = cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", job)
    assert created["spec"]["jitter"] == "1d23h59m59s"


@pytest.mark.parametrize(
    ("case", "spec", "field"),
    [
        ("wrong enum", {"concurrencyPolicy": "Sometimes"}, "spec.concurrencyPolicy"),
        ("wrong enum in a nested object", {"daylightSaving": {"gap": "Sideways"}}, "spec.daylightSaving.gap"),
        ("missing required template", {"template": None}, "template"),
        ("missing required container field", {"template": {"spec": {"containers": []}}}, "containers"),
        ("two schedules", {"every": "5m"}, "runAt, cron or every"),
        ("no schedule", {"cron": None}, "runAt, cron or every"),
        ("malformed duration", {"expectedMaxInterval": "26 hours"}, "spec.expectedMaxInterval"),
        ("suspend without a reason", {"suspend": True}, "suspendReason"),
        ("bad cron shape", {"cron": "every day"}, "spec.cron"),
        ("unparsable runAt", {"cron": None, "runAt": "tomorrow at two"}, "spec.runAt"),
        ("negative duration", {"catchUpWindow": "-5m"}, "spec.catchUpWindow"),
        ("catch-up limit out of bounds", {"catchUpLimit": 0}, "spec.catchUpLimit"),
        ("unknown priority", {"priority": "urgent"}, "spec.priority"),
        ("negative retention", {"retention": {"succeeded": -1}}, "spec.retention.succeeded"),
        ("retention past its cap", {"retention": {"failed": 1001}}, "spec.retention.failed"),
        ("jitter longer than the interval", {"cron": None, "every": "1m", "jitter": "10m"}, "spec.jitter"),
        ("jitter in days past the interval", {"cron": None, "every": "1d", "jitter": "1d1s"}, "spec.jitter"),
        ("expected interval below the interval", {"cron": None, "every": "2h", "expectedMaxInterval": "1h59m"}, "spec.expectedMaxInterval"),
        ("NUL in a task's name (the API server takes it, PostgreSQL does not)", {"template": None, "task": {"queue": "q", "name": "t\x00x"}}, "spec.task.name"),
    ],
)
def test_bad_input_is_rejected_naming_the_field(
    cluster: KubeCluster, namespace: str, case: str, spec: dict[str, Any], field: str
) -> None:
    message = rejection(cluster, namespace, scheduled_job("bad", **spec))
    assert field in message, f"{case}: {message}"


# --- optimistic concurrency ------------------------------------------------------------


def test_status_update_with_a_stale_resource_version_gets_409(cluster: KubeCluster, namespace: str) -> None:
    obj = create_sj(cluster, namespace, scheduled_job("rv"))
    stale = obj["metadata"]["resourceVersion"]
    cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "scheduledjobs", "rv", {"status": {"schedule": "first"}}
    )
    with pytest.raises(ApiException) as info:
        cluster.custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            "scheduledjobs",
            "rv",
            {"metadata": {"resourceVersion": stale}, "status": {"schedule": "second"}},
        )
    assert info.value.status == 409
    current = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", "rv")
    assert current["status"]["schedule"] == "first"


def _lease(holder: str) -> client.V1Lease:
    now = datetime.now(UTC).replace(microsecond=1)
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name="test-leader"),
        spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15, renew_time=now),
    )


def test_a_lease_changes_hands_only_through_a_conditional_update(cluster: KubeCluster, namespace: str) -> None:
    leases = cluster.coordination
    leases.create_namespaced_lease(namespace, _lease("alpha"))
    with pytest.raises(ApiException) as info:
        leases.create_namespaced_lease(namespace, _lease("beta"))
    assert info.value.status == 409  # acquiring an existing Lease by creating it fails

    seen_by_beta = leases.read_namespaced_lease("test-leader", namespace)
    seen_by_gamma = leases.read_namespaced_lease("test-leader", namespace)
    seen_by_beta.spec.holder_identity = "beta"
    leases.replace_namespaced_lease("test-leader", namespace, seen_by_beta)
    seen_by_gamma.spec.holder_identity = "gamma"
    with pytest.raises(ApiException) as info:
        leases.replace_namespaced_lease("test-leader", namespace, seen_by_gamma)
    assert info.value.status == 409  # the second taker read a version that no longer exists
    assert leases.read_namespaced_lease("test-leader", namespace).spec.holder_identity == "beta"


# --- pods run by the node agent --------------------------------------------------------


def _pod(name: str, script: str, env: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c", script],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                }
            ],
        },
    }


def _finished(cluster: KubeCluster, namespace: str, name: str) -> Any:
    def probe() -> Any:
        pod = cluster.pod(namespace, name)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    return wait_for(probe, timeout=60, what=f"pod {name} to finish")


def test_a_pod_runs_with_its_environment_and_succeeds(cluster: KubeCluster, namespace: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        script = 'echo "$VIGIL_EXECUTION_ID" > "$OUT"; exit 0'
        cluster.core.create_namespaced_pod(
            namespace, _pod("ok", script, {"VIGIL_EXECUTION_ID": "ex-abc123", "OUT": str(out)})
        )
        pod = _finished(cluster, namespace, "ok")
        assert pod.status.phase == "Succeeded"
        assert pod.status.container_statuses[0].state.terminated.exit_code == 0
        assert out.read_text().strip() == "ex-abc123"


def test_a_failing_command_reports_its_exit_code(cluster: KubeCluster, namespace: str) -> None:
    cluster.core.create_namespaced_pod(namespace, _pod("three", "exit 3", {}))
    pod = _finished(cluster, namespace, "three")
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3


def test_the_termination_message_is_reported(cluster: KubeCluster, namespace: str) -> None:
    script = 'printf \'{"rows": 42}\' > "$TERMINATION_MESSAGE_PATH"'
    cluster.core.create_namespaced_pod(namespace, _pod("msg", script, {}))
    pod = _finished(cluster, namespace, "msg")
    assert json.loads(pod.status.container_statuses[0].state.terminated.message) == {"rows": 42}


# --- garbage collection ----------------------------------------------------------------


def test_deleting_an_owner_garbage_collects_its_pods(cluster: KubeCluster, namespace: str) -> None:
    owner = create_sj(cluster, namespace, scheduled_job("owner"))
    body = _pod("owned", "sleep 300", {})
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ScheduledJob",
            "name": "owner",
            "uid": owner["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    cluster.core.create_namespaced_pod(namespace, body)
    wait_for(lambda: cluster.pod(namespace, "owned").status.phase == "Running", timeout=60, what="owned pod running")
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", "owner")

    def gone() -> bool:
        try:
            cluster.pod(namespace, "owned")
        except ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, timeout=90, what="the owned pod to be garbage-collected")


# --- packaging against the API server --------------------------------------------------


def test_helm_lint_passes(cluster: KubeCluster) -> None:
    result = cluster.helm("lint", str(REPO / "helm" / "vigil"))
    assert "0 chart(s) failed" in result.stdout


def test_the_chart_renders_and_passes_server_side_dry_run(cluster: KubeCluster) -> None:
    rendered = cluster.helm("template", "vigil", str(REPO / "helm" / "vigil"), "--namespace", "vigil-system").stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered) if d}
    assert {"Deployment", "ClusterRole", "CustomResourceDefinition", "ConfigMap", "Service"} <= kinds
    cluster.kubectl("create", "namespace", "vigil-system", check=False)
    result = cluster.kubectl("apply", "--dry-run=server", "-n", "vigil-system", "-f", "-", input=rendered)
    assert "(server dry run)" in result.stdout


def test_the_plain_install_manifest_applies_for_real(cluster: KubeCluster) -> None:
    result = cluster.kubectl(
        "apply", "--dry-run=server", "--server-side", "-f", str(REPO / "manifests" / "install.yaml")
    )
    assert "serverside-applied" in result.stdout or "(server dry run)" in result.stdout


def test_kubectl_is_the_built_release(cluster: KubeCluster) -> None:
    out = subprocess.run(
        [str(cluster.bin / "kubectl"), "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout)["clientVersion"]["gitVersion"].startswith("v1.3")
