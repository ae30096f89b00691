"""Pod verdicts: what a pod's status (a plain API dict) says about its attempt.

Covers one named scenario per rule — success, exit codes, OOMKilled, eviction, the per-execution
deadline, lost nodes, deleted pods (while running, killed by the deletion, or vanished), pods
stuck Pending past the limit for an image, a missing config or no room to schedule — plus
which container is the main one, the termination message as output, message bounds, and the
hand-over to the execution state machine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.core.dispatch import Priority
from vigil.core.executions import (
    MESSAGE_MAX_CHARS,
    AttemptOutcome,
    Phase,
    RetryPolicy,
    finish,
    new_execution,
    start,
)
from vigil.core.ids import ExecutionId
from vigil.core.podstatus import (
    DEFAULT_IMAGE_PULL_LIMIT,
    DEFAULT_PENDING_LIMIT,
    PodPhase,
    PodVerdict,
    attempt_result,
    classify_pod,
    deleted_verdict,
)

CREATED = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW = CREATED + timedelta(minutes=1)
Json = dict[str, Any]


def ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def terminated(exit_code: int, reason: str = "", *, message: str = "", name: str = "main") -> Json:
    state: Json = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": ts(CREATED + timedelta(seconds=5)),
        "finishedAt": ts(CREATED + timedelta(seconds=50)),
    }
    if message:
        state["message"] = message
    return {"name": name, "state": {"terminated": state}}


def waiting(reason: str, message: str = "", *, name: str = "main") -> Json:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def running_container(name: str = "main") -> Json:
    return {"name": name, "state": {"running": {"startedAt": ts(CREATED + timedelta(seconds=5))}}}


def pod(
    phase: str,
    *containers: Json,
    reason: str = "",
    message: str = "",
    conditions: list[Json] | None = None,
    init: list[Json] | None = None,
    deleted_at: datetime | None = None,
    grace_seconds: int = 0,
    spec_containers: tuple[str, ...] = ("main",),
) -> Json:
    status: Json = {"phase": phase, "containerStatuses": list(containers)}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    if conditions:
        status["conditions"] = conditions
    if init:
        status["initContainerStatuses"] = init
    if phase != "Pending":
        status["startTime"] = ts(CREATED + timedelta(seconds=2))
    meta: Json = {"name": "ex-x-1", "creationTimestamp": ts(CREATED)}
    if deleted_at is not None:
        meta["deletionTimestamp"] = ts(deleted_at + timedelta(seconds=grace_seconds))
        meta["deletionGracePeriodSeconds"] = grace_seconds
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": name} for name in spec_containers]},
        "status": status,
    }


UNSCHEDULABLE: Json = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available: 3 Insufficient memory.",
}


@pytest.mark.parametrize(
    ("the_pod", "phase", "reason", "exit_code"),
    [
        pytest.param(pod("Succeeded", terminated(0)), "Succeeded", "Completed", 0, id="succeeded"),
        pytest.param(pod("Failed", terminated(3)), "Failed", "ExitCode3", 3, id="exit-code"),
        pytest.param(
            pod("Failed", terminated(137, "OOMKilled")), "Failed", "OOMKilled", 137, id="oom"
        ),
        pytest.param(
            pod("Failed", reason="Evicted", message="The node was low on resource: memory."),
            "Failed",
            "Evicted",
            None,
            id="evicted",
        ),
        pytest.param(
            pod("Failed", terminated(137), reason="DeadlineExceeded"),
            "Failed",
            "DeadlineExceeded",
            137,
            id="timeout",
        ),
        pytest.param(pod("Unknown", reason="NodeLost"), "Failed", "NodeLost", None, id="node-lost"),
        pytest.param(
            pod(
                "Running",
                running_container(),
                conditions=[{"type": "Ready", "status": "Unknown"}],
            ),
            "Failed",
            "NodeLost",
            None,
            id="condition-unknown",
        ),
        pytest.param(
            pod("Failed", terminated(137, "ContainerStatusUnknown")),
            "Failed",
            "NodeLost",
            137,
            id="container-state-unknown",
        ),
        pytest.param(
            pod("Running", running_container(), deleted_at=NOW),
            "Failed",
            "PodDeleted",
            None,
            id="deleted-while-running",
        ),
        pytest.param(
            pod(
                "Failed",
                terminated(143),
                deleted_at=CREATED + timedelta(seconds=40),
                grace_seconds=30,
            ),
            "Failed",
            "PodDeleted",
            143,
            id="killed-by-its-deletion",
        ),
        pytest.param(
            pod("Failed", terminated(3), deleted_at=CREATED + timedelta(minutes=5)),
            "Failed",
            "ExitCode3",
            3,
            id="failed-then-deleted",
        ),
        pytest.param(
            pod("Failed", terminated(137), reason="NodeAgentRestarted"),
            "Failed",
            "NodeAgentRestarted",
            137,
            id="other-pod-reason",
        ),
        pytest.param(pod("Failed"), "Failed", "PodFailed", None, id="failed-without-detail"),
        pytest.param(pod("Running", running_container()), "Running", "", None, id="running"),
        pytest.param(
            pod("Pending", waiting("ContainerCreating")),
            "Pending",
            "ContainerCreating",
            None,
            id="pending",
        ),
    ],
)
def test_verdict(the_pod: Json, phase: str, reason: str, exit_code: int | None) -> None:
    verdict = classify_pod(the_pod, now=NOW)
    assert (verdict.phase, verdict.reason, verdict.exit_code) == (phase, reason, exit_code)
    assert verdict.retryable is (phase == "Failed")
    assert verdict.finished is (phase in ("Succeeded", "Failed"))


def test_exit_code_verdict_names_the_container_and_returns_the_output() -> None:
    verdict = classify_pod(pod("Failed", terminated(3, message="ledger locked")), now=NOW)
    assert verdict.message == "container 'main' exited with code 3"
    assert verdict.output == "ledger locked"
    assert verdict.started_at == CREATED + timedelta(seconds=5)
    assert verdict.finished_at == CREATED + timedelta(seconds=50)


def test_success_returns_the_termination_message_as_output() -> None:
    verdict = classify_pod(pod("Succeeded", terminated(0, message='{"rows": 12}')), now=NOW)
    assert (verdict.output, verdict.message) == ('{"rows": 12}', "")


def test_pod_level_messages_are_kept() -> None:
    evicted = pod("Failed", reason="Evicted", message="The node was low on resource: memory.")
    assert classify_pod(evicted, now=NOW).message == "The node was low on resource: memory."
    assert classify_pod(pod("Failed", reason="DeadlineExceeded"), now=NOW).message == (
        "the attempt ran longer than the job's timeout"
    )


def test_the_main_container_is_the_first_in_the_spec_not_in_the_status_list() -> None:
    # The API lists container statuses by name: "agent" comes before "worker".
    the_pod = pod(
        "Failed",
        terminated(1, name="agent", message="sidecar"),
        terminated(7, name="worker", message="main output"),
        spec_containers=("worker", "agent"),
    )
    verdict = classify_pod(the_pod, now=NOW)
    assert (verdict.reason, verdict.output) == ("ExitCode7", "main output")


def test_a_failed_init_container_is_reported() -> None:
    the_pod = pod(
        "Failed",
        waiting("PodInitializing"),
        init=[terminated(2, name="migrate")],
    )
    verdict = classify_pod(the_pod, now=NOW)
    assert (verdict.reason, verdict.message) == (
        "ExitCode2",
        "container 'migrate' exited with code 2",
    )


def test_oom_of_any_container_wins_over_an_exit_code() -> None:
    the_pod = pod(
        "Failed",
        terminated(1, name="main"),
        terminated(137, "OOMKilled", name="sidecar"),
        spec_containers=("main", "sidecar"),
    )
    verdict = classify_pod(the_pod, now=NOW)
    assert (verdict.reason, verdict.exit_code) == ("OOMKilled", 137)
    assert "'sidecar'" in verdict.message


@pytest.mark.parametrize(
    ("container", "conditions", "underlying"),
    [
        pytest.param(
            waiting("CreateContainerConfigError", 'secret "db" not found'),
            None,
            "CreateContainerConfigError",
            id="missing-config",
        ),
        pytest.param(None, [UNSCHEDULABLE], "Unschedulable", id="unschedulable"),
    ],
)
def test_stuck_pending_fails_only_after_the_limit(
    container: Json | None, conditions: list[Json] | None, underlying: str
) -> None:
    the_pod = pod("Pending", *([container] if container else []), conditions=conditions)
    early = classify_pod(the_pod, now=CREATED + DEFAULT_PENDING_LIMIT)
    assert (early.phase, early.reason, early.retryable) == ("Pending", underlying, False)
    assert early.fails_at == CREATED + DEFAULT_PENDING_LIMIT
    late = classify_pod(the_pod, now=CREATED + DEFAULT_PENDING_LIMIT + timedelta(seconds=1))
    assert (late.phase, late.reason, late.retryable, late.stop_pod) == ("Failed", "StuckPending", True, True)
    assert late.message.startswith(f"{underlying}: ")
    assert "pending for 301s, limit 300s" in late.message


@pytest.mark.parametrize(
    ("container", "underlying"),
    [
        pytest.param(waiting("ImagePullBackOff", "Back-off pulling image"), "ImagePullBackOff", id="back-off"),
        pytest.param(waiting("ErrImagePull", "not found"), "ErrImagePull", id="err-image-pull"),
    ],
)
def test_an_image_that_cannot_be_pulled_fails_after_the_shorter_limit(container: Json, underlying: str) -> None:
    """Almost always a wrong name, tag or pull secret: a minute, not the 5 minutes a Secret gets."""
    the_pod = pod("Pending", container)
    early = classify_pod(the_pod, now=CREATED + DEFAULT_IMAGE_PULL_LIMIT)
    assert (early.phase, early.reason, early.fails_at) == ("Pending", underlying, CREATED + DEFAULT_IMAGE_PULL_LIMIT)
    late = classify_pod(the_pod, now=CREATED + DEFAULT_IMAGE_PULL_LIMIT + timedelta(seconds=1))
    assert (late.phase, late.reason, late.retryable, late.stop_pod) == ("Failed", "ImagePullBackOff", True, True)
    assert late.message.startswith(f"{underlying}: ")
    assert "pending for 61s, limit 60s" in late.message


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        pytest.param(
            "ErrImageNeverPull",
            'Container image "vigil.local/absent:1" is not present with pull policy of Never',
            id="never-pull",
        ),
        pytest.param("InvalidImageName", 'Failed to apply default image tag "Bad:Name"', id="invalid-name"),
    ],
)
def test_an_image_the_node_will_never_run_fails_at_once(reason: str, message: str) -> None:
    """No wait cures these: the kubelet retries them for ever, the attempt fails the moment it is seen."""
    verdict = classify_pod(pod("Pending", waiting(reason, message)), now=CREATED + timedelta(seconds=1))
    assert (verdict.phase, verdict.reason, verdict.retryable, verdict.stop_pod) == ("Failed", reason, True, True)
    assert verdict.message == f"container 'main': {message}"


def test_a_failure_the_pod_reached_by_itself_leaves_the_pod_alone() -> None:
    verdict = classify_pod(pod("Failed", terminated(3)), now=NOW)
    assert (verdict.reason, verdict.stop_pod) == ("ExitCode3", False)


def test_both_limits_are_parameters() -> None:
    stuck = pod("Pending", waiting("CreateContainerConfigError"))
    unpullable = pod("Pending", waiting("ImagePullBackOff"))
    at = CREATED + timedelta(seconds=31)
    assert classify_pod(stuck, now=at, pending_limit=timedelta(seconds=30)).reason == "StuckPending"
    assert classify_pod(stuck, now=at, image_pull_limit=timedelta(seconds=30)).phase == "Pending"
    assert classify_pod(unpullable, now=at, image_pull_limit=timedelta(seconds=30)).reason == "ImagePullBackOff"
    assert classify_pod(unpullable, now=at, pending_limit=timedelta(seconds=30)).phase == "Pending"


def test_a_stuck_init_container_counts() -> None:
    the_pod = pod("Pending", init=[waiting("ErrImagePull", name="fetch")])
    assert classify_pod(the_pod, now=CREATED + timedelta(hours=1)).reason == "ImagePullBackOff"


def test_a_pending_pod_without_a_cause_has_no_deadline() -> None:
    assert classify_pod(pod("Pending", waiting("ContainerCreating")), now=NOW).fails_at is None


def test_a_slow_but_healthy_pending_pod_is_never_stuck() -> None:
    the_pod = pod("Pending", waiting("ContainerCreating"))
    verdict = classify_pod(the_pod, now=CREATED + timedelta(hours=3))
    assert (verdict.phase, verdict.reason) == ("Pending", "ContainerCreating")


def test_deleted_verdict_for_a_pod_that_vanished() -> None:
    verdict = deleted_verdict()
    assert verdict == PodVerdict(
        phase=PodPhase.FAILED,
        reason="PodDeleted",
        message="the pod was deleted before it finished",
        retryable=True,
    )


def test_long_messages_are_bounded() -> None:
    the_pod = pod("Failed", reason="Evicted", message="m" * (MESSAGE_MAX_CHARS + 10))
    assert len(classify_pod(the_pod, now=NOW).message) == MESSAGE_MAX_CHARS


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        classify_pod(pod("Running"), now=datetime(2026, 3, 1))  # noqa: DTZ001 - a naive time on purpose: the call must refuse it


def test_a_finished_verdict_drives_the_execution_state_machine() -> None:
    ex = new_execution(
        ExecutionId("ex-x"), namespace="n", job="j", scheduled_for=CREATED, now=CREATED
    )
    ex = start(ex, pod="ex-x-1", now=CREATED + timedelta(seconds=1))
    verdict = classify_pod(pod("Failed", terminated(137, "OOMKilled")), now=NOW)
    result = attempt_result(verdict, attempt=1)
    assert (result.outcome, result.reason, result.exit_code) == (
        AttemptOutcome.FAILED,
        "OOMKilled",
        137,
    )
    after = finish(ex, result, policy=RetryPolicy(), now=NOW)
    assert (after.phase, after.reason, after.priority) == (
        Phase.BACKOFF,
        "OOMKilled",
        Priority.NORMAL,
    )
    success = attempt_result(classify_pod(pod("Succeeded", terminated(0)), now=NOW), attempt=2)
    assert success.outcome is AttemptOutcome.SUCCEEDED


def test_an_unfinished_verdict_is_not_an_attempt_result() -> None:
    with pytest.raises(ValueError, match="has not finished"):
        attempt_result(classify_pod(pod("Running", running_container()), now=NOW), attempt=1)


def test_the_pod_cache_keeps_what_a_verdict_reads_and_drops_the_payload() -> None:
    """The execution pod cache keeps a compact pod (`kube.pods.compact_pod`): the verdict on it
    is the verdict on the whole pod, and the rendered payload in its environment is gone."""
    from vigil.kube.stores.pods import compact_pod

    whole = {
        "metadata": {
            "name": "ex-1-1", "namespace": "ns", "creationTimestamp": "2026-03-01T12:00:00Z",
            "labels": {"vigil.dev/execution-id": "ex-1"}, "managedFields": [{"manager": "vigil"}],
            "annotations": {"vigil.dev/period": "p"},
        },
        "spec": {
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [
                {"name": "main", "image": "busybox", "env": [{"name": "VIGIL_PAYLOAD", "value": "x" * 30_000}]},
                {"name": "sidecar", "image": "busybox"},
            ],
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "main", "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": "out"}}},
            ],
        },
    }  # fmt: skip
    kept = compact_pod(whole)
    assert classify_pod(kept, now=NOW) == classify_pod(whole, now=NOW)
    assert "x" * 100 not in repr(kept)
    assert kept["spec"] == {"containers": [{"name": "main"}, {"name": "sidecar"}]}
    assert "managedFields" not in kept["metadata"] and kept["metadata"]["annotations"] == {"vigil.dev/period": "p"}
    assert whole["metadata"]["managedFields"] and whole["spec"]["containers"][0]["env"], "the pod read was changed"
