"""Real pod outcomes on a real node: kubelet, containerd 2 and runc, each classified and retried.

Everything else in the suite runs pods under the node agent, which plays each
outcome; here the kernel, the kubelet and the runtime produce them, and the
operator (real processes, the chart's identity) classifies them with
`core/podstatus.py` and retries them as docs/executions.md says:

* a container over its memory limit is killed by the kernel: ``OOMKilled``, 137;
* an exit code *n*: ``ExitCode<n>``;
* the job's `timeout` (activeDeadlineSeconds, enforced by the kubelet): ``DeadlineExceeded``;
* an image the node will never run (absent, `imagePullPolicy: Never`):
  ``ErrImageNeverPull`` at once, the pod removed, dead after its attempts;
* an image that cannot be pulled (no registry answers): ``ErrImagePull`` /
  ``ImagePullBackOff``, failed as ``ImagePullBackOff`` once `dispatch.imagePullLimitSeconds`
  is up, well before `dispatch.pendingLimitSeconds` (left at its 5 minutes);
* a termination message, written by the container or taken from its log tail;
* cancellation: SIGTERM, then SIGKILL once the pod's own grace period is over;
* a pod deleted from under a running execution: ``PodDeleted``, then retried;
* and the node agent refused on a cluster that has the kubelet.

All but the last two fail every attempt, so each uses 2 attempts to show the retry
and ends Dead. Job pods run the busybox image written by e2e/cluster/images.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import images, localcluster
from tests.integration.conftest import KUBELET_PORT_BASE, KUBELET_STATE, KubeCluster
from tests.integration.jobs import (
    Follower,
    create_job,
    execution_pods,
    execution_status,
    make_namespace,
    parse_time,
    patch_execution_spec,
    rfc3339,
    wait_execution_phase,
)
from tests.integration.operators import OperatorFleet
from tests.waiting import wait_for
from vigil.core.ids import execution_id
from vigil.core.podstatus import classify_pod

pytestmark = pytest.mark.kubelet

#: A job runs FIRST_FIRE_DELAY after it is created: enough for the operator to see it first.
FIRST_FIRE_DELAY = timedelta(seconds=3)
#: Two attempts, the second at most 1 s after the first: the retry shows, the test stays short.
TWO_ATTEMPTS = {"maxAttempts": 2, "backoff": {"initial": "1s", "factor": 1.0, "max": "1s"}}
#: The job's terminationGracePeriodSeconds in the cancellation test: the pod's, not the operator's.
CANCEL_GRACE_SECONDS = 7
OUTCOME_TIMEOUT = 120  # a pod's start on the real node takes a few seconds; 2 cores are shared
#: dispatch.imagePullLimitSeconds for the module's operator: an unpullable image fails in seconds, not a minute.
IMAGE_PULL_LIMIT_SECONDS = 10


@pytest.fixture(scope="module")
def node_fleet(kubelet_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorFleet]:
    """One operator for the module (its tests keep to namespaces of their own)."""
    fleet = OperatorFleet(
        kubelet_cluster, tmp_path_factory.mktemp("node-fleet"), dispatch={"imagePullLimitSeconds": IMAGE_PULL_LIMIT_SECONDS}
    )
    fleet.start()
    fleet.leader()
    yield fleet
    fleet.stop()
    kubelet_cluster.clear_namespace(fleet.namespace)


@pytest.fixture
def node_namespace(kubelet_cluster: KubeCluster, node_fleet: OperatorFleet) -> Iterator[str]:
    name = make_namespace(kubelet_cluster, "node")
    yield name
    kubelet_cluster.clear_namespace(name)


def node_job(
    cluster: KubeCluster,
    namespace: str,
    name: str,
    command: str,
    *,
    container: dict[str, Any] | None = None,
    pod: dict[str, Any] | None = None,
    **spec: Any,
) -> str:
    """A one-off job due shortly, running `command` in the busybox image; returns its execution id."""
    main = {"name": "main", "image": images.JOB_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", command]}
    template = {"spec": {"containers": [{**main, **(container or {})}], "terminationGracePeriodSeconds": 2, **(pod or {})}}
    run_at = (datetime.now(UTC) + FIRST_FIRE_DELAY).replace(microsecond=0) + timedelta(seconds=1)
    job = create_job(cluster, namespace, name, runAt=rfc3339(run_at), template=template, **spec)
    return execution_id(job["metadata"]["uid"], run_at)


def attempts(obj: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [(a["outcome"], a["reason"], a.get("exitCode")) for a in execution_status(obj).get("attempts") or []]


def pod_dict(cluster: KubeCluster, pod: Any) -> dict[str, Any]:
    """A client object as the plain dict the API returns (camelCase), as classify_pod reads it."""
    out: dict[str, Any] = cluster.api.sanitize_for_serialization(pod)
    return out


def main_terminated(pod: dict[str, Any]) -> dict[str, Any]:
    """How the main container ended, or {} while it has not (or before the node has reported it)."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    status = next((s for s in statuses if s["name"] == "main"), {"state": {}})
    return dict(status["state"].get("terminated") or {})


class PodRecord(Follower):
    """Every state of each pod of a namespace seen by a watch, kept after the pod is deleted."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        self.cluster = cluster
        self.seen: dict[str, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        super().__init__(cluster.core.list_namespaced_pod, namespace)

    def on_event(self, kind: str, obj: Any) -> None:
        with self.lock:
            self.seen.setdefault(obj.metadata.name, []).append(pod_dict(self.cluster, obj))

    def first(self, name: str, matches: Callable[[dict[str, Any]], Any]) -> dict[str, Any] | None:
        """The earliest state of the pod that matches (later ones may differ: the kubelet's own
        final delete sets the pod's grace period to 0)."""
        with self.lock:
            return next((pod for pod in self.seen.get(name, []) if matches(pod)), None)


def test_a_container_over_its_memory_limit_is_oomkilled_and_retried(
    kubelet_cluster: KubeCluster, node_namespace: str
) -> None:
    # tail keeps a whole "line" in memory, and /dev/zero has no newline: 200 MiB against 32 MiB.
    ex_id = node_job(
        kubelet_cluster, node_namespace, "hungry", "head -c 200m /dev/zero | tail",
        container={"resources": {"limits": {"memory": "32Mi"}, "requests": {"memory": "32Mi"}}},
        retry=TWO_ATTEMPTS,
    )  # fmt: skip
    dead = wait_execution_phase(kubelet_cluster, node_namespace, ex_id, "Dead", timeout=OUTCOME_TIMEOUT)
    assert attempts(dead) == [("Failed", "OOMKilled", 137)] * 2
    assert "exceeding its memory limit" in execution_status(dead)["attempts"][0]["message"]
    pod = pod_dict(kubelet_cluster, execution_pods(kubelet_cluster, node_namespace, ex_id)[0])
    assert main_terminated(pod)["reason"] == "OOMKilled"  # the runtime's word, not the operator's


def test_an_exit_code_is_the_reason_and_is_retried(kubelet_cluster: KubeCluster, node_namespace: str) -> None:
    ex_id = node_job(kubelet_cluster, node_namespace, "exits", "exit 7", retry=TWO_ATTEMPTS)
    dead = wait_execution_phase(kubelet_cluster, node_namespace, ex_id, "Dead", timeout=OUTCOME_TIMEOUT)
    assert attempts(dead) == [("Failed", "ExitCode7", 7)] * 2
    pods = execution_pods(kubelet_cluster, node_namespace, ex_id)
    assert [p.metadata.name for p in pods] == [f"{ex_id}-1", f"{ex_id}-2"]


def test_the_timeout_is_enforced_by_the_kubelet_as_deadline_exceeded(
    kubelet_cluster: KubeCluster, node_namespace: str
) -> None:
    ex_id = node_job(kubelet_cluster, node_namespace, "slow", "sleep 300", timeout="3s", retry=TWO_ATTEMPTS)
    dead = wait_execution_phase(kubelet_cluster, node_namespace, ex_id, "Dead", timeout=OUTCOME_TIMEOUT)
    assert [(outcome, reason) for outcome, reason, _ in attempts(dead)] == [("Failed", "DeadlineExceeded")] * 2
    pod = execution_pods(kubelet_cluster, node_namespace, ex_id)[0]
    assert (pod.spec.active_deadline_seconds, pod.status.phase, pod.status.reason) == (3, "Failed", "DeadlineExceeded")
    first = execution_status(dead)["attempts"][0]
    ran = parse_time(first["finishedAt"]) - parse_time(first["startedAt"])
    assert timedelta(seconds=2) <= ran <= timedelta(seconds=3 + 2 + 10), ran  # deadline, grace, kubelet sync


def test_an_image_the_node_will_never_run_fails_at_once_and_is_not_retried_for_ever(
    kubelet_cluster: KubeCluster, node_namespace: str
) -> None:
    ex_id = node_job(
        kubelet_cluster, node_namespace, "no-image", "true",
        container={"image": "vigil.local/does-not-exist:1"}, retry=TWO_ATTEMPTS,
    )  # fmt: skip
    dead = wait_execution_phase(kubelet_cluster, node_namespace, ex_id, "Dead", timeout=OUTCOME_TIMEOUT)
    assert [(outcome, reason) for outcome, reason, _ in attempts(dead)] == [("Failed", "ErrImageNeverPull")] * 2
    message = execution_status(dead)["attempts"][0]["message"]
    assert "vigil.local/does-not-exist:1" in message and "Never" in message, message
    for attempt in execution_status(dead)["attempts"]:  # surfaced as soon as the kubelet said so
        assert parse_time(attempt["finishedAt"]) - parse_time(attempt["startedAt"]) < timedelta(seconds=30)
    # The kubelet would keep such a pod Pending for ever; the operator removed it.
    wait_for(lambda: not execution_pods(kubelet_cluster, node_namespace, ex_id), timeout=60, what="the pods deleted")


def test_an_image_that_cannot_be_pulled_fails_after_the_image_pull_limit(
    kubelet_cluster: KubeCluster, node_namespace: str
) -> None:
    # No registry is reachable from here, so the kubelet's pull fails, and backs off, for ever.
    ex_id = node_job(
        kubelet_cluster, node_namespace, "unpullable", "true",
        container={"image": "vigil.local/never-pushed:1", "imagePullPolicy": "IfNotPresent"},
        retry={"maxAttempts": 1},
    )  # fmt: skip
    dead = wait_execution_phase(kubelet_cluster, node_namespace, ex_id, "Dead", timeout=OUTCOME_TIMEOUT)
    [attempt] = execution_status(dead)["attempts"]
    assert (attempt["outcome"], attempt["reason"]) == ("Failed", "ImagePullBackOff")
    assert attempt["message"].startswith(("ErrImagePull: ", "ImagePullBackOff: ")), attempt["message"]
    assert "vigil.local/never-pushed:1" in attempt["message"]
    # The limit counts from the pod's creation, and the controller looks again when it runs out.
    took = parse_time(attempt["finishedAt"]) - parse_time(attempt["startedAt"])
    limit = IMAGE_PULL_LIMIT_SECONDS
    assert timedelta(seconds=limit - 1) <= took <= timedelta(seconds=limit + 5), took
    wait_for(lambda: not execution_pods(kubelet_cluster, node_namespace, ex_id), timeout=60, what="the pod deleted")


def test_the_termination_message_is_the_attempts_output(kubelet_cluster: KubeCluster, node_namespace: str) -> None:
    written = node_job(kubelet_cluster, node_namespace, "writes", "printf '{\"rows\": 42}' > /dev/termination-log")
    from_log = node_job(
        kubelet_cluster, node_namespace, "logs", "echo starting; echo 'disk full' >&2; exit 3",
        container={"terminationMessagePolicy": "FallbackToLogsOnError"}, retry={"maxAttempts": 1},
    )  # fmt: skip
    wait_execution_phase(kubelet_cluster, node_namespace, written, "Succeeded", timeout=OUTCOME_TIMEOUT)
    wait_execution_phase(kubelet_cluster, node_namespace, from_log, "Dead", timeout=OUTCOME_TIMEOUT)
    now = datetime.now(UTC)
    ok = pod_dict(kubelet_cluster, execution_pods(kubelet_cluster, node_namespace, written)[0])
    assert main_terminated(ok)["message"] == '{"rows": 42}'
    assert classify_pod(ok, now=now).output == '{"rows": 42}'
    failed = pod_dict(kubelet_cluster, execution_pods(kubelet_cluster, node_namespace, from_log)[0])
    verdict = classify_pod(failed, now=now)
    # The log's tail, stdout and stderr merged (in an order the kubelet does not promise).
    assert verdict.reason == "ExitCode3" and sorted((verdict.output or "").splitlines()) == ["disk full", "starting"]


def test_cancelling_sends_sigterm_then_sigkill_after_the_grace_period(
    kubelet_cluster: KubeCluster, node_namespace: str
) -> None:
    record = PodRecord(kubelet_cluster, node_namespace)
    try:
        # PID 1 of the container: it notes SIGTERM in its termination message and carries on.
        ex_id = node_job(
            kubelet_cluster, node_namespace, "stubborn",
            "trap 'echo TERM >> /dev/termination-log' TERM; while true; do sleep 1; done",
            pod={"terminationGracePeriodSeconds": CANCEL_GRACE_SECONDS}, retry=TWO_ATTEMPTS,
        )  # fmt: skip
        wait_execution_phase(kubelet_cluster, node_namespace, ex_id, "Running", timeout=OUTCOME_TIMEOUT)
        patch_execution_spec(kubelet_cluster, node_namespace, ex_id, {"cancel": True})
        cancelled = wait_execution_phase(kubelet_cluster, node_namespace, ex_id, "Cancelled", timeout=30)
        assert execution_status(cancelled)["reason"] == "CancelledByUser"

        pod = wait_for(lambda: record.first(f"{ex_id}-1", main_terminated), timeout=60, what="the pod's container to end")
        record.check()
    finally:
        record.stop()
    ended = main_terminated(pod)
    assert ended["message"] == "TERM\n"  # SIGTERM came first, and the process outlived it
    assert ended["exitCode"] == 137  # then SIGKILL
    # The pod's own grace period, as the template set it, ran between the two.
    asked = parse_time(pod["metadata"]["deletionTimestamp"]) - timedelta(seconds=pod["metadata"]["deletionGracePeriodSeconds"])
    waited = parse_time(ended["finishedAt"]) - asked
    assert pod["metadata"]["deletionGracePeriodSeconds"] == CANCEL_GRACE_SECONDS
    assert timedelta(seconds=CANCEL_GRACE_SECONDS - 1) <= waited <= timedelta(seconds=CANCEL_GRACE_SECONDS + 5), waited
    assert len(execution_pods(kubelet_cluster, node_namespace, ex_id)) <= 1  # never retried


def test_a_pod_deleted_under_a_running_execution_is_retried(kubelet_cluster: KubeCluster, node_namespace: str) -> None:
    ex_id = node_job(
        kubelet_cluster, node_namespace, "deleted", 'test "$VIGIL_ATTEMPT" -ge 2 || sleep 300', retry=TWO_ATTEMPTS
    )
    wait_execution_phase(kubelet_cluster, node_namespace, ex_id, "Running", timeout=OUTCOME_TIMEOUT)
    kubelet_cluster.kubectl("delete", "pod", f"{ex_id}-1", "-n", node_namespace, "--wait=false")
    done = wait_execution_phase(kubelet_cluster, node_namespace, ex_id, "Succeeded", timeout=OUTCOME_TIMEOUT)
    assert [(outcome, reason) for outcome, reason, _ in attempts(done)] == [("Failed", "PodDeleted"), ("Succeeded", "Completed")]


def test_the_node_is_a_real_kubelet(kubelet_cluster: KubeCluster) -> None:
    """What the outcomes above ran on: a kubelet of this release, containerd 2, cgroup v1, runc."""
    node = kubelet_cluster.core.read_node("vigil-node")
    info = node.status.node_info
    assert info.container_runtime_version.startswith("containerd://2."), info.container_runtime_version
    server = kubelet_cluster.kubectl("version", "-o", "json").stdout
    assert f'"gitVersion": "{info.kubelet_version}"' in server
    assert Path("/sys/fs/cgroup/memory").is_dir()  # v1: failCgroupV1 false is what lets it start


def test_the_node_agent_is_refused_on_a_cluster_with_a_kubelet(kubelet_cluster: KubeCluster) -> None:
    """Two nodes named vigil-node would fight over every pod: `up` refuses, and starts nothing."""
    with pytest.raises(RuntimeError, match="runs with node 'kubelet', not 'agent'"):
        localcluster.up(KUBELET_STATE, KUBELET_PORT_BASE, node=localcluster.NODE_AGENT)
    assert localcluster.status(KUBELET_STATE)["node-agent"] is None
