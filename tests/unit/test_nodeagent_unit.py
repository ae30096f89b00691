"""The node agent's pure parts: env and argv building, status and Node bodies, and the
decision of what to do about a pod. Its process handling and API traffic are covered by the
integration tests, which run it against the real API server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from e2e import nodeagent as agent

START = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
END = START + timedelta(seconds=7)


def make_pod(
    *,
    phase: str | None = None,
    container: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    pod_status: dict[str, Any] = {**({"phase": phase} if phase else {}), **(status or {})}
    return {
        "metadata": {
            "name": "step-1",
            "namespace": "team-a",
            "uid": "0b5e",
            "labels": {"app": "demo"},
            "annotations": {"vigil.dev/run": "r-42"},
            **(metadata or {}),
        },
        "spec": {
            "nodeName": "vigil-node",
            "serviceAccountName": "runner",
            "containers": [container or {"name": "main", "image": "busybox", "command": ["true"]}],
            **(spec or {}),
        },
        "status": pod_status,
    }


PATHS = agent.PodPaths(Path("/work/pods/team-a_step-1_0b5e"))


# --- $(VAR) expansion ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("plain text", "plain text", id="no-references"),
        pytest.param("$(NAME)-x", "world-x", id="defined-name"),
        pytest.param("$(MISSING)", "$(MISSING)", id="unknown-name-kept"),
        pytest.param("cost: $$5", "cost: $5", id="double-dollar-is-literal"),
        pytest.param("$$(NAME)", "$(NAME)", id="escaped-reference"),
        pytest.param("$(NAME", "$(NAME", id="unclosed-reference-kept"),
        pytest.param("a$", "a$", id="trailing-dollar"),
        pytest.param("$HOME", "$HOME", id="shell-style-untouched"),
        pytest.param("$()", "$()", id="empty-name-kept"),
    ],
)
def test_expand_references_follows_kubelet_rules(text: str, expected: str) -> None:
    assert agent.expand_references(text, {"NAME": "world"}) == expected


# --- fieldRef -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field_path", "expected"),
    [
        pytest.param("metadata.name", "step-1", id="name"),
        pytest.param("metadata.namespace", "team-a", id="namespace"),
        pytest.param("metadata.uid", "0b5e", id="uid"),
        pytest.param("spec.nodeName", "vigil-node", id="node-name"),
        pytest.param("spec.serviceAccountName", "runner", id="service-account"),
        pytest.param("metadata.labels['app']", "demo", id="label"),
        pytest.param("metadata.labels['absent']", "", id="missing-label-is-empty"),
        pytest.param("metadata.annotations['vigil.dev/run']", "r-42", id="annotation"),
        pytest.param("status.podIP", "127.0.0.1", id="pod-ip-is-loopback"),
        pytest.param("spec.containers", None, id="unsupported"),
    ],
)
def test_resolve_field_ref(field_path: str, expected: str | None) -> None:
    assert agent.resolve_field_ref(make_pod(), field_path) == expected


# --- environment and argv -----------------------------------------------------------------------


def test_build_env_has_the_base_variables_and_the_container_env() -> None:
    container = {
        "name": "main",
        "env": [
            {"name": "GREETING", "value": "hello"},
            {"name": "PHRASE", "value": "$(GREETING) world"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "EMPTY"},
        ],
    }

    env, skipped = agent.build_env(make_pod(), container, paths=PATHS, search_path="/bin")

    assert env == {
        "PATH": "/bin",
        "HOME": str(PATHS.root),
        "TMPDIR": str(PATHS.root / "tmp"),
        "TERMINATION_MESSAGE_PATH": str(PATHS.root / "termination-log"),
        "GREETING": "hello",
        "PHRASE": "hello world",
        "POD": "step-1",
        "EMPTY": "",
    }
    assert skipped == []


def test_build_env_skips_sources_it_cannot_resolve() -> None:
    container = {
        "name": "main",
        "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "ODD", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}},
        ],
    }

    env, skipped = agent.build_env(make_pod(), container, paths=PATHS, search_path="/bin")

    assert skipped == ["TOKEN", "CPU", "ODD"]
    assert not {"TOKEN", "CPU", "ODD"} & env.keys()


def test_container_env_overrides_the_base() -> None:
    container = {"name": "main", "env": [{"name": "PATH", "value": "/opt/bin"}]}

    env, _ = agent.build_env(make_pod(), container, paths=PATHS, search_path="/bin")

    assert env["PATH"] == "/opt/bin"


def test_container_argv_is_command_then_args_expanded() -> None:
    container = {"command": ["sh", "-c"], "args": ["echo $(WHO) $$(date)"]}

    assert agent.container_argv(container, {"WHO": "me"}) == ["sh", "-c", "echo me $(date)"]


@pytest.mark.parametrize(
    "container",
    [
        pytest.param({"image": "busybox"}, id="no-command"),
        pytest.param({"command": [], "args": ["--flag"]}, id="args-without-command"),
    ],
)
def test_container_argv_is_none_without_a_command(container: dict[str, Any]) -> None:
    assert agent.container_argv(container, {}) is None


# --- exit codes, grace periods, deadlines, termination message ----------------------------------


@pytest.mark.parametrize(
    ("returncode", "exit_code"),
    [
        pytest.param(0, 0, id="success"),
        pytest.param(3, 3, id="failure"),
        pytest.param(-9, 137, id="sigkill"),
        pytest.param(-15, 143, id="sigterm"),
    ],
)
def test_exit_code_of_maps_signals_to_128_plus_n(returncode: int, exit_code: int) -> None:
    assert agent.exit_code_of(returncode) == exit_code


@pytest.mark.parametrize(
    ("seconds", "grace"),
    [
        pytest.param(None, 30, id="default"),
        pytest.param(5, 5, id="as-asked"),
        pytest.param(0, 0, id="immediate"),
        pytest.param(600, 30, id="capped"),
        pytest.param(-1, 0, id="negative-is-immediate"),
    ],
)
def test_grace_periods_are_defaulted_and_capped(seconds: int | None, grace: int) -> None:
    deleted = make_pod(metadata={"deletionGracePeriodSeconds": seconds})
    configured = make_pod(spec={"terminationGracePeriodSeconds": seconds})

    assert agent.deletion_grace_seconds(deleted) == grace
    assert agent.termination_grace_seconds(configured) == grace


def test_active_deadline_counts_from_the_start() -> None:
    assert (
        agent.active_deadline(make_pod(spec={"activeDeadlineSeconds": 5}), started=100.0) == 105.0
    )
    assert agent.active_deadline(make_pod(), started=100.0) is None


def test_termination_message_is_capped_at_4096_bytes(tmp_path: Path) -> None:
    message_file = tmp_path / "termination-log"
    message_file.write_bytes(b"x" * 5000)

    assert agent.read_termination_message(message_file) == "x" * 4096
    assert agent.read_termination_message(tmp_path / "absent") == ""


def test_pod_paths_are_per_pod_under_the_workdir() -> None:
    paths = agent.PodPaths.for_pod(Path("/w"), make_pod())

    assert paths.root == Path("/w/team-a_step-1_0b5e")
    assert (paths.log, paths.termination_log) == (
        paths.root / "log",
        paths.root / "termination-log",
    )


# --- status bodies ------------------------------------------------------------------------------


def conditions_by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["type"]: entry for entry in status["conditions"]}


SCHEDULED = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2030-01-01T00:00:00Z"}


def test_running_status_reports_a_ready_running_container() -> None:
    pod = make_pod(phase="Pending", status={"conditions": [SCHEDULED]})

    status = agent.running_status(pod, pid=4242, started_at=START)["status"]

    assert status["phase"] == "Running"
    assert (status["hostIP"], status["podIP"]) == ("127.0.0.1", "127.0.0.1")
    assert status["podIPs"] == [{"ip": "127.0.0.1"}]
    assert status["startTime"] == "2030-01-02T03:04:05Z"
    conditions = conditions_by_type(status)
    assert conditions["PodScheduled"] == SCHEDULED
    assert all(
        conditions[kind]["status"] == "True" for kind in ("Initialized", "ContainersReady", "Ready")
    )
    [container] = status["containerStatuses"]
    assert container == {
        "name": "main",
        "image": "busybox",
        "imageID": "",
        "containerID": "vigil-agent://4242",
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": "2030-01-02T03:04:05Z"}},
    }


@pytest.mark.parametrize(
    ("outcome", "phase", "container_reason", "pod_reason"),
    [
        pytest.param(agent.Outcome(0, START, END), "Succeeded", "Completed", None, id="exit-0"),
        pytest.param(agent.Outcome(2, START, END), "Failed", "Error", None, id="exit-2"),
        pytest.param(agent.Outcome(137, START, END), "Failed", "Error", None, id="killed"),
        pytest.param(
            agent.Outcome(0, START, END, pod_reason="DeadlineExceeded", pod_message="too long"),
            "Failed",
            "Completed",
            "DeadlineExceeded",
            id="pod-reason-fails-even-on-exit-0",
        ),
        pytest.param(
            agent.Outcome(128, START, END, container_reason="NoCommand", pod_reason="NoCommand"),
            "Failed",
            "NoCommand",
            "NoCommand",
            id="not-started",
        ),
    ],
)
def test_terminated_status_phase_and_reasons(
    outcome: agent.Outcome, phase: str, container_reason: str, pod_reason: str | None
) -> None:
    status = agent.terminated_status(make_pod(phase="Running"), outcome)["status"]

    assert status["phase"] == phase
    assert status.get("reason") == pod_reason
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == outcome.exit_code
    assert terminated["reason"] == container_reason


def test_terminated_status_carries_times_message_and_not_ready_conditions() -> None:
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    pod = make_pod(
        phase="Running",
        status={"startTime": "2030-01-02T03:04:05Z", "conditions": [SCHEDULED, disruption]},
    )
    outcome = agent.Outcome(1, START, END, container_id="vigil-agent://7", message="boom")

    status = agent.terminated_status(pod, outcome)["status"]

    container = status["containerStatuses"][0]
    assert container["state"] == {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "startedAt": "2030-01-02T03:04:05Z",
            "finishedAt": "2030-01-02T03:04:12Z",
            "containerID": "vigil-agent://7",
            "message": "boom",
        }
    }
    assert (container["ready"], container["started"]) == (False, False)
    conditions = conditions_by_type(status)
    assert conditions["DisruptionTarget"] == disruption
    assert conditions["PodScheduled"] == SCHEDULED
    assert conditions["Ready"] == {
        "type": "Ready",
        "status": "False",
        "reason": "PodCompleted",
        "lastTransitionTime": "2030-01-02T03:04:12Z",
    }
    assert status["startTime"] == "2030-01-02T03:04:05Z"


def test_lost_running_pod_fails_with_node_agent_restarted_and_137() -> None:
    running = {
        "name": "main",
        "containerID": "vigil-agent://99",
        "state": {"running": {"startedAt": "2030-01-02T03:04:05Z"}},
    }
    pod = make_pod(phase="Running", status={"containerStatuses": [running]})

    body = agent.lost_process_status(pod, now=END)

    assert body is not None
    status = body["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "NodeAgentRestarted")
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 137
    assert terminated["reason"] == "NodeAgentRestarted"
    assert terminated["startedAt"] == "2030-01-02T03:04:05Z"
    assert terminated["containerID"] == "vigil-agent://99"


def test_lost_pending_pod_fails_as_never_run() -> None:
    body = agent.lost_process_status(make_pod(phase="Pending"), now=END)

    assert body is not None
    assert body["status"]["phase"] == "Failed"
    terminated = body["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "ContainerStatusUnknown")


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_lost_process_leaves_finished_pods_alone(phase: str) -> None:
    assert agent.lost_process_status(make_pod(phase=phase), now=END) is None


# --- what to do about a pod ---------------------------------------------------------------------

DELETING = {"deletionTimestamp": "2030-01-02T03:04:05Z", "deletionGracePeriodSeconds": 30}


@pytest.mark.parametrize(
    ("pod", "known", "running", "action"),
    [
        pytest.param(make_pod(), False, False, agent.Action.START, id="new-pod-without-phase"),
        pytest.param(make_pod(phase="Pending"), False, False, agent.Action.START, id="new-pending-pod"),
        pytest.param(make_pod(phase="Pending"), True, True, agent.Action.NOTHING, id="already-started"),
        pytest.param(make_pod(phase="Running"), True, True, agent.Action.NOTHING, id="ours-running"),
        pytest.param(make_pod(phase="Running"), False, False, agent.Action.FAIL_LOST, id="lost-on-restart"),
        pytest.param(make_pod(phase="Succeeded"), False, False, agent.Action.NOTHING, id="succeeded"),
        pytest.param(make_pod(phase="Failed"), False, False, agent.Action.NOTHING, id="failed"),
        pytest.param(make_pod(phase="Running", metadata=DELETING), True, True, agent.Action.STOP_THEN_DELETE, id="deleting-while-running"),
        pytest.param(make_pod(phase="Succeeded", metadata=DELETING), True, False, agent.Action.DELETE, id="deleting-after-exit"),
        pytest.param(make_pod(phase="Pending", metadata=DELETING), False, False, agent.Action.DELETE, id="deleting-before-start"),
        pytest.param(make_pod(phase="Failed", metadata=DELETING), False, False, agent.Action.DELETE, id="deleting-finished-unknown"),
    ],
)  # fmt: skip
def test_decide_action(
    pod: dict[str, Any], known: bool, running: bool, action: agent.Action
) -> None:
    assert agent.decide_action(pod, known=known, running=running) is action


def test_a_stop_request_can_only_bring_the_kill_forward() -> None:
    run = agent.PodRun(pod=make_pod())

    run.request_stop(grace_seconds=30, now=100.0)
    run.request_stop(grace_seconds=60, now=101.0)
    assert run.kill_at == 130.0

    run.request_stop(grace_seconds=0, now=102.0)
    assert run.kill_at == 102.0


# --- the Node -----------------------------------------------------------------------------------


def test_node_status_is_ready_with_a_fresh_heartbeat() -> None:
    status = agent.node_status(node_name="vigil-node", ready_since=START, now=END)["status"]

    conditions = conditions_by_type(status)
    assert {kind: entry["status"] for kind, entry in conditions.items()} == {
        "Ready": "True",
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
    }
    assert all(
        entry["lastHeartbeatTime"] == "2030-01-02T03:04:12Z" for entry in conditions.values()
    )
    assert all(
        entry["lastTransitionTime"] == "2030-01-02T03:04:05Z" for entry in conditions.values()
    )
    expected_capacity = {"cpu": "8", "memory": "16Gi", "pods": "250"}
    assert status["capacity"] == status["allocatable"] == expected_capacity
    assert status["addresses"] == [
        {"type": "InternalIP", "address": "127.0.0.1"},
        {"type": "Hostname", "address": "vigil-node"},
    ]
    info = status["nodeInfo"]
    assert (info["operatingSystem"], info["architecture"]) == ("linux", "amd64")
    assert info["kubeletVersion"] == "v1.37.2-vigil-agent"


def test_schedulable_taints_drops_only_the_not_ready_ones() -> None:
    keep = {"key": "dedicated", "value": "e2e", "effect": "NoSchedule"}
    taints = [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        keep,
    ]

    assert agent.schedulable_taints(taints) == [keep]


def test_times_are_formatted_for_the_api() -> None:
    on_the_second = START.replace(microsecond=0)

    assert agent.rfc3339(on_the_second + timedelta(microseconds=5)) == "2030-01-02T03:04:05Z"
    assert agent.rfc3339_micro(on_the_second) == "2030-01-02T03:04:05.000000Z"
