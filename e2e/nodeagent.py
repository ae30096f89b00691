"""A stand-in kubelet for machines without a container runtime.

This machine cannot run containers, yet the end-to-end tests need pods that
really run. So the pods stay real: they are API objects, admitted, defaulted and
validated by the real kube-apiserver and scheduled onto this agent's Node by the
real kube-scheduler. Only the container is replaced, by a local process:

- only the first container runs, as `command + args`; the image is ignored
  (a container without `command` fails its pod with reason NoCommand, because
  the agent cannot run images), and so are init containers, other containers,
  volumes, probes and resources;
- `$(VAR)` references in env values, command and args are expanded as a kubelet
  does; the environment is PATH, HOME and TMPDIR plus the container's `env`
  (literal values and the common `fieldRef`s; secret, config map and resource
  references are skipped with a log line; `envFrom` is ignored);
- each pod gets a directory `<workdir>/<namespace>_<name>_<uid>/`: its cwd and
  HOME, holding `log` (stdout and stderr) and `termination-log`. A process
  cannot write /dev/termination-log here, so pods write their termination
  message to `$TERMINATION_MESSAGE_PATH`, which points at that file (first
  4096 bytes reported, as a kubelet does);
- restartPolicy is treated as Never whatever it says: when the process exits the
  pod ends, Succeeded on exit 0 and Failed otherwise (killed by signal N: 128+N);
- `activeDeadlineSeconds` is honoured: the process is stopped and the pod Failed
  with reason DeadlineExceeded;
- deletion goes as on a kubelet: SIGTERM to the process group, SIGKILL after the
  grace period (at most 30 s), the terminal status, then a delete with grace
  period 0, without which the pod would stay Terminating forever;
- the agent adopts no process it did not start: after a restart, pods it had
  Running are Failed with reason NodeAgentRestarted and exit code 137, a
  node-lost analogue.

The Node stays Ready through a Lease renewed every 10 s and a status heartbeat
every 20 s. Run it as
`python -m e2e.nodeagent --kubeconfig PATH --node-name vigil-node --workdir DIR`;
SIGTERM or SIGINT kills every child process group and exits 0. Threads rather
than asyncio: the official client is synchronous, and one thread per pod keeps
each process's life in one readable function.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

DESCRIPTION = "A stand-in kubelet: runs the pods bound to one Node as local processes."
Json = dict[str, Any]
Clock = Callable[[], datetime]

LOG = logging.getLogger("e2e.nodeagent")

# What the Node says about itself.
AGENT_VERSION = "v1.37.2-vigil-agent"
LOOPBACK_IP = "127.0.0.1"
NODE_CAPACITY: Mapping[str, str] = {"cpu": "8", "memory": "16Gi", "pods": "250"}
# Added at registration or while the node was silent; they keep the scheduler away.
UNSCHEDULABLE_TAINT_KEYS = frozenset(
    {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
)
NODE_CONDITIONS = (  # (type, status, reason, message), as a healthy kubelet reports them
    ("Ready", "True", "KubeletReady", "vigil node agent is posting ready status"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure"),
)

# Heartbeats: the node lifecycle controller marks a silent node NotReady after about 40 s.
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
LEASE_RENEW_SECONDS = 10.0
NODE_STATUS_SECONDS = 20.0

# Processes.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TERMINATION_MESSAGE_ENV = "TERMINATION_MESSAGE_PATH"
TERMINATION_MESSAGE_MAX_BYTES = 4096  # what a kubelet reads from the message file
DEFAULT_GRACE_SECONDS = 30  # the API default for both grace periods
MAX_GRACE_SECONDS = 30  # keeps test teardown bounded whatever a pod asks for
POLL_SECONDS = 0.2  # how often a pod thread looks at its stop request and deadline
SHUTDOWN_GRACE_SECONDS = 3.0  # SIGTERM to SIGKILL when the agent itself stops
CONTAINER_ID_PREFIX = "vigil-agent://"
SIGNAL_EXIT_BASE = 128

# API calls.
REQUEST_TIMEOUT = (5, 30)  # (connect, read) seconds for ordinary calls
# Connections kept open to the API server. Every running pod's thread writes its status, so a
# burst has many requests at once; the client's default keeps 10 and opens (and closes) a new
# TLS connection for each request beyond them.
API_CONNECTIONS = 64
WATCH_TIMEOUT_SECONDS = 240  # the server closes the watch then; we re-watch
API_ATTEMPTS = 4
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 10.0
TAINT_PATCH_ATTEMPTS = 5  # optimistic-concurrency retries against the node controller
MERGE_PATCH = "application/merge-patch+json"  # lists are replaced whole: no stale entries
# Said explicitly: the client sends no Content-Type on POST and DELETE (and ignores _content_type).
JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}
HTTP_NOT_FOUND, HTTP_CONFLICT, HTTP_GONE = 404, 409, 410

# Reasons, spelt as a kubelet spells them where it has one.
REASON_COMPLETED = "Completed"
REASON_ERROR = "Error"
REASON_POD_COMPLETED = "PodCompleted"
REASON_NO_COMMAND = "NoCommand"
REASON_START_ERROR = "StartError"
REASON_DEADLINE_EXCEEDED = "DeadlineExceeded"
REASON_AGENT_RESTARTED = "NodeAgentRestarted"
REASON_STATUS_UNKNOWN = "ContainerStatusUnknown"
MESSAGE_NO_COMMAND = (
    "the vigil node agent runs container commands, not images; this container has no command"
)
MESSAGE_DEADLINE = "Pod was active on the node longer than the specified deadline"
MESSAGE_AGENT_RESTARTED = "the node agent restarted and lost this pod's process"
MESSAGE_DELETED_UNSTARTED = "the pod was deleted before its container ran"
EXIT_CODE_NOT_STARTED = 128  # what runtimes report for a container that could not start
EXIT_CODE_KILLED = 137  # 128 + SIGKILL
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
OUR_POD_CONDITIONS = frozenset({"PodScheduled", "Initialized", "ContainersReady", "Ready"})


# --- Pure helpers: time, pod fields, environment ---------------------------------------------


def rfc3339(moment: datetime) -> str:
    """A Kubernetes `Time`: UTC, whole seconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: datetime) -> str:
    """A Kubernetes `MicroTime` (Lease renewTime): exactly six fractional digits."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_key(pod: Json) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def pod_phase(pod: Json) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def first_container(pod: Json) -> Json:
    containers: list[Json] = (pod.get("spec") or {}).get("containers") or [{}]
    return containers[0]


@dataclass(frozen=True)
class PodPaths:
    """Where one pod's process lives: its cwd and HOME, log, termination message and TMPDIR."""

    root: Path

    @classmethod
    def for_pod(cls, workdir: Path, pod: Json) -> PodPaths:
        meta = pod["metadata"]
        return cls(workdir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}")

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def termination_log(self) -> Path:
        return self.root / "termination-log"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"


def expand_references(text: str, env: Mapping[str, str]) -> str:
    """Expand `$(NAME)` as a kubelet does: `$$` is a literal `$`; unknown names stay as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        following = text[i + 1]
        close = text.find(")", i + 2) if following == "(" else -1
        if following == "$":
            out.append("$")
            i += 2
        elif close != -1:
            out.append(env.get(text[i + 2 : close], text[i : close + 1]))
            i = close + 1
        else:  # `$x`, or `$(` never closed: kept literally
            out.append(text[i : i + 2])
            i += 2
    return "".join(out)


_FIELD_PATHS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "metadata.uid": ("metadata", "uid"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
}
_LOOPBACK_FIELD_PATHS = frozenset({"status.hostIP", "status.podIP"})
_SUBSCRIPT_FIELD_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def resolve_field_ref(pod: Json, field_path: str) -> str | None:
    """The value a kubelet gives a `fieldRef` env var; None for paths the agent does not know."""
    if field_path in _FIELD_PATHS:
        section, name = _FIELD_PATHS[field_path]
        return str((pod.get(section) or {}).get(name, ""))
    if field_path in _LOOPBACK_FIELD_PATHS:
        return LOOPBACK_IP
    match = _SUBSCRIPT_FIELD_PATH.match(field_path)
    if match is None:
        return None
    section, key = match.groups()
    return str((pod["metadata"].get(section) or {}).get(key, ""))


def env_entry_value(pod: Json, entry: Json, defined: Mapping[str, str]) -> str | None:
    """One `env` entry's value, `$(VAR)` expanded against the earlier entries; None if unsupported."""
    source = entry.get("valueFrom")
    if source is None:
        return expand_references(str(entry.get("value", "")), defined)
    field_ref = source.get("fieldRef")
    if field_ref is None:
        return None
    return resolve_field_ref(pod, str(field_ref.get("fieldPath", "")))


def build_env(
    pod: Json, container: Json, *, paths: PodPaths, search_path: str
) -> tuple[dict[str, str], list[str]]:
    """The process environment, and the names of `env` entries the agent could not resolve."""
    defined: dict[str, str] = {}
    skipped: list[str] = []
    for entry in container.get("env") or []:
        value = env_entry_value(pod, entry, defined)
        if value is None:
            skipped.append(str(entry["name"]))
        else:
            defined[str(entry["name"])] = value
    base = {
        "PATH": search_path,
        "HOME": str(paths.root),
        "TMPDIR": str(paths.tmp),
        TERMINATION_MESSAGE_ENV: str(paths.termination_log),
    }
    return {**base, **defined}, skipped


def container_argv(container: Json, env: Mapping[str, str]) -> list[str] | None:
    """`command + args` with `$(VAR)` expanded, or None when there is no command to run."""
    command = container.get("command") or []
    if not command:
        return None
    return [
        expand_references(str(part), env) for part in [*command, *(container.get("args") or [])]
    ]


def exit_code_of(returncode: int) -> int:
    """A Popen return code as a container exit code: killed by signal N reads as 128+N."""
    return SIGNAL_EXIT_BASE - returncode if returncode < 0 else returncode


def bounded_grace(seconds: int | None) -> int:
    return min(DEFAULT_GRACE_SECONDS if seconds is None else max(seconds, 0), MAX_GRACE_SECONDS)


def deletion_grace_seconds(pod: Json) -> int:
    return bounded_grace(pod["metadata"].get("deletionGracePeriodSeconds"))


def termination_grace_seconds(pod: Json) -> int:
    return bounded_grace((pod.get("spec") or {}).get("terminationGracePeriodSeconds"))


def active_deadline(pod: Json, *, started: float) -> float | None:
    """The monotonic time at which `activeDeadlineSeconds` runs out, if the pod sets it."""
    seconds = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    return None if seconds is None else started + float(seconds)


def read_termination_message(path: Path) -> str:
    """The terminated state's message: the file's first 4096 bytes, as a kubelet reads it.
    (terminationMessagePolicy FallbackToLogsOnError is not implemented.)"""
    try:
        with path.open("rb") as stream:
            head = stream.read(TERMINATION_MESSAGE_MAX_BYTES)
    except OSError:
        return ""
    return head.decode("utf-8", errors="replace")


# --- Pure helpers: status bodies --------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How a pod's container ended, in the terms of a terminated container state."""

    exit_code: int
    started_at: datetime
    finished_at: datetime
    container_id: str = ""
    message: str = ""
    container_reason: str = ""  # empty: Completed or Error, from the exit code
    pod_reason: str = ""  # set: the pod Failed for this reason, whatever the exit code
    pod_message: str = ""


def condition(kind: str, *, true: bool, at: datetime, reason: str = "") -> Json:
    entry: Json = {
        "type": kind,
        "status": "True" if true else "False",
        "lastTransitionTime": rfc3339(at),
    }
    if reason:
        entry["reason"] = reason
    return entry


def pod_conditions(
    pod: Json, *, ready: bool, started_at: datetime, now: datetime, reason: str = ""
) -> list[Json]:
    """The pod's conditions with ours set; the scheduler's PodScheduled and others' kept as they are."""
    existing: list[Json] = (pod.get("status") or {}).get("conditions") or []
    others = [entry for entry in existing if entry.get("type") not in OUR_POD_CONDITIONS]
    scheduled = next((entry for entry in existing if entry.get("type") == "PodScheduled"), None)
    return [
        *others,
        scheduled or condition("PodScheduled", true=True, at=started_at),
        condition("Initialized", true=True, at=started_at),
        condition("ContainersReady", true=ready, at=now, reason=reason),
        condition("Ready", true=ready, at=now, reason=reason),
    ]


def loopback_addresses() -> Json:
    ips = [{"ip": LOOPBACK_IP}]
    return {"hostIP": LOOPBACK_IP, "hostIPs": ips, "podIP": LOOPBACK_IP, "podIPs": ips}


def container_status(container: Json, *, state: Json, container_id: str, running: bool) -> Json:
    status: Json = {
        "name": container.get("name", ""),
        "image": container.get("image", ""),
        "imageID": "",
        "ready": running,
        "started": running,
        "restartCount": 0,
        "state": state,
    }
    if container_id:
        status["containerID"] = container_id
    return status


def running_status(pod: Json, *, pid: int, started_at: datetime) -> Json:
    """The status patch of a pod whose process has just started."""
    state = {"running": {"startedAt": rfc3339(started_at)}}
    container_id = f"{CONTAINER_ID_PREFIX}{pid}"
    return {
        "status": {
            "phase": "Running",
            **loopback_addresses(),
            "startTime": rfc3339(started_at),
            "conditions": pod_conditions(pod, ready=True, started_at=started_at, now=started_at),
            "containerStatuses": [
                container_status(
                    first_container(pod), state=state, container_id=container_id, running=True
                )
            ],
        }
    }


def terminated_status(pod: Json, outcome: Outcome) -> Json:
    """The status patch of a pod whose container has ended: Succeeded only on exit 0 and no pod reason."""
    terminated: Json = {
        "exitCode": outcome.exit_code,
        "reason": outcome.container_reason
        or (REASON_ERROR if outcome.exit_code else REASON_COMPLETED),
        "startedAt": rfc3339(outcome.started_at),
        "finishedAt": rfc3339(outcome.finished_at),
    }
    if outcome.container_id:
        terminated["containerID"] = outcome.container_id
    if outcome.message:
        terminated["message"] = outcome.message
    failed = outcome.exit_code != 0 or bool(outcome.pod_reason)
    status: Json = {
        "phase": "Failed" if failed else "Succeeded",
        **loopback_addresses(),
        "startTime": (pod.get("status") or {}).get("startTime") or rfc3339(outcome.started_at),
        "conditions": pod_conditions(
            pod,
            ready=False,
            started_at=outcome.started_at,
            now=outcome.finished_at,
            reason=REASON_POD_COMPLETED,
        ),
        "containerStatuses": [
            container_status(
                first_container(pod),
                state={"terminated": terminated},
                container_id=outcome.container_id,
                running=False,
            )
        ],
    }
    if outcome.pod_reason:
        status["reason"] = outcome.pod_reason
        status["message"] = outcome.pod_message
    return {"status": status}


def lost_process_status(pod: Json, *, now: datetime) -> Json | None:
    """The terminal status of a pod whose process this agent does not have; None if already terminal.

    A Running pod lost its process to an agent restart (exit 137, NodeAgentRestarted); a Pending
    one never ran (exit 137, ContainerStatusUnknown, as a kubelet reports a container it cannot find).
    """
    phase = pod_phase(pod)
    if phase in TERMINAL_PHASES:
        return None
    statuses: list[Json] = (pod.get("status") or {}).get("containerStatuses") or [{}]
    if phase != "Running":
        outcome = Outcome(
            exit_code=EXIT_CODE_KILLED,
            started_at=now,
            finished_at=now,
            message=MESSAGE_DELETED_UNSTARTED,
            container_reason=REASON_STATUS_UNKNOWN,
        )
        return terminated_status(pod, outcome)
    started = ((statuses[0].get("state") or {}).get("running") or {}).get("startedAt")
    started = started or (pod.get("status") or {}).get("startTime")
    outcome = Outcome(
        exit_code=EXIT_CODE_KILLED,
        started_at=datetime.fromisoformat(started) if started else now,
        finished_at=now,
        container_id=str(statuses[0].get("containerID", "")),
        message=MESSAGE_AGENT_RESTARTED,
        container_reason=REASON_AGENT_RESTARTED,
        pod_reason=REASON_AGENT_RESTARTED,
        pod_message=MESSAGE_AGENT_RESTARTED,
    )
    return terminated_status(pod, outcome)


class Action(enum.Enum):
    """What the agent does about a pod it has just seen."""

    START = "start"
    STOP_THEN_DELETE = "stop-then-delete"  # terminating, and its process still runs
    DELETE = "delete"  # terminating, and nothing of it runs (any longer)
    FAIL_LOST = "fail-lost"  # Running, but not by a process of this agent's life
    NOTHING = "nothing"


def decide_action(pod: Json, *, known: bool, running: bool) -> Action:
    """`known`: this agent has started (or settled) the pod; `running`: its process still runs."""
    if pod["metadata"].get("deletionTimestamp"):
        return Action.STOP_THEN_DELETE if running else Action.DELETE
    if known or pod_phase(pod) in TERMINAL_PHASES:
        return Action.NOTHING
    if pod_phase(pod) == "Running":
        return Action.FAIL_LOST
    return Action.START


# --- Pure helpers: the Node -------------------------------------------------------------------


def node_labels(node_name: str) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }


def node_status(*, node_name: str, ready_since: datetime, now: datetime) -> Json:
    """The Node status patch: healthy conditions with a fresh heartbeat, capacity and identity."""
    conditions = [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": rfc3339(ready_since),
        }
        for kind, status, reason, message in NODE_CONDITIONS
    ]
    return {
        "status": {
            "capacity": dict(NODE_CAPACITY),
            "allocatable": dict(NODE_CAPACITY),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": LOOPBACK_IP},
                {"type": "Hostname", "address": node_name},
            ],
            "nodeInfo": {
                "machineID": node_name,
                "systemUUID": node_name,
                "bootID": rfc3339(ready_since),
                "kernelVersion": "",
                "osImage": "vigil node agent",
                "containerRuntimeVersion": f"{CONTAINER_ID_PREFIX}{AGENT_VERSION}",
                "kubeletVersion": AGENT_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
    }


def schedulable_taints(taints: list[Json]) -> list[Json]:
    """The node's taints without those that mean "not ready yet"."""
    return [taint for taint in taints if taint.get("key") not in UNSCHEDULABLE_TAINT_KEYS]


def _discard(response: Any) -> None:
    """Read and let go of a raw response: the pod it carries is not needed, and building the
    client's model objects from it would cost the agent more CPU than the request itself."""
    response.read()
    response.release_conn()


def describe(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal a process group started with start_new_session (its id is the leader's pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# --- The agent --------------------------------------------------------------------------------


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


@dataclass
class PodRun:
    """One pod as this agent runs it. Fields are written under the agent's lock."""

    pod: Json
    pid: int | None = None
    kill_at: float | None = None  # monotonic SIGKILL time, once a stop is requested
    delete_after_exit: bool = False
    pod_gone: bool = False  # the API object is gone: nothing left to report to
    finished: bool = False  # True once no process of this agent runs for the pod
    thread: threading.Thread | None = None

    def request_stop(self, *, grace_seconds: float, now: float) -> None:
        target = now + grace_seconds
        if self.kill_at is None or target < self.kill_at:
            self.kill_at = target


class NodeAgent:
    """Registers the Node, keeps it alive, and runs the pods bound to it as local processes."""

    def __init__(
        self,
        *,
        core: Any,
        leases: Any,
        node_name: str,
        workdir: Path,
        clock: Clock = lambda: datetime.now(UTC),
    ) -> None:
        self._core = core
        self._leases = leases
        self._node_name = node_name
        self._workdir = workdir
        self._clock = clock
        self._search_path = os.environ.get("PATH") or DEFAULT_PATH
        self._ready_since = clock()
        self._node_uid = ""
        self._runs: dict[str, PodRun] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    # Lifecycle.

    def start(self) -> None:
        threading.Thread(target=self._serve, name="node", daemon=True).start()

    def shutdown(self) -> None:
        """Stop everything: SIGTERM each live process group, SIGKILL after a short grace."""
        self._stopping.set()
        with self._lock:
            live = [run for run in self._runs.values() if not run.finished]
            for run in live:
                run.request_stop(grace_seconds=SHUTDOWN_GRACE_SECONDS, now=time.monotonic())
        for run in live:
            if run.thread is not None:
                run.thread.join(timeout=SHUTDOWN_GRACE_SECONDS + 2)
            if run.pid is not None:
                signal_group(run.pid, signal.SIGKILL)
        LOG.info("node agent stopped; %d pod process(es) killed", len(live))

    def _serve(self) -> None:
        self._register_node()
        if self._stopping.is_set():
            return
        threading.Thread(target=self._watch_forever, name="pods", daemon=True).start()
        self._heartbeat_forever()

    # The Node and its heartbeats.

    def _register_node(self) -> None:
        delay = BACKOFF_FIRST_SECONDS
        while not self._stopping.is_set():
            try:
                self._create_or_adopt_node()
                self._post_node_status()
                self._renew_lease()
                LOG.info("node %s registered and Ready", self._node_name)
                return
            except Exception as error:
                LOG.warning("registering node %s: %s; retrying", self._node_name, describe(error))
                self._stopping.wait(delay)
                delay = min(delay * 2, BACKOFF_MAX_SECONDS)

    def _create_or_adopt_node(self) -> None:
        body = {"metadata": {"name": self._node_name, "labels": node_labels(self._node_name)}}
        try:
            self._core.create_node(
                body, _headers=dict(JSON_HEADERS), _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status != HTTP_CONFLICT:
                raise
            LOG.info("node %s exists; adopting it", self._node_name)
        self._node_uid = str(self._read_node()["metadata"]["uid"])

    def _read_node(self) -> Json:
        response = self._core.read_node(
            self._node_name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
        )
        node: Json = json.loads(response.data)
        return node

    def _post_node_status(self) -> None:
        body = node_status(
            node_name=self._node_name, ready_since=self._ready_since, now=self._clock()
        )
        self._core.patch_node_status(
            self._node_name, body, _content_type=MERGE_PATCH, _request_timeout=REQUEST_TIMEOUT
        )
        self._clear_unschedulable_taints()

    def _clear_unschedulable_taints(self) -> None:
        for _ in range(TAINT_PATCH_ATTEMPTS):
            node = self._read_node()
            taints: list[Json] = (node.get("spec") or {}).get("taints") or []
            kept = schedulable_taints(taints)
            if len(kept) == len(taints):
                return
            body = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": kept or None},
            }
            try:
                self._core.patch_node(
                    self._node_name,
                    body,
                    _content_type=MERGE_PATCH,
                    _request_timeout=REQUEST_TIMEOUT,
                )
                LOG.info("node %s: removed not-ready taints", self._node_name)
                return
            except ApiException as error:
                if error.status != HTTP_CONFLICT:
                    raise

    def _renew_lease(self) -> None:
        renewal = {
            "spec": {
                "holderIdentity": self._node_name,
                "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                "renewTime": rfc3339_micro(self._clock()),
            }
        }
        try:
            self._patch_lease(renewal)
        except ApiException as error:
            if error.status != HTTP_NOT_FOUND:
                raise
            self._create_lease()
            self._patch_lease(renewal)

    def _patch_lease(self, body: Json) -> None:
        self._leases.patch_namespaced_lease(
            self._node_name,
            LEASE_NAMESPACE,
            body,
            _content_type=MERGE_PATCH,
            _request_timeout=REQUEST_TIMEOUT,
        )

    def _create_lease(self) -> None:
        """Create the Lease, owned by the Node; renewTime is set by the patch that follows."""
        owner = {"apiVersion": "v1", "kind": "Node", "name": self._node_name, "uid": self._node_uid}
        body = {
            "metadata": {
                "name": self._node_name,
                "ownerReferences": [owner] if self._node_uid else None,
            },
            "spec": {
                "holderIdentity": self._node_name,
                "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            },
        }
        try:
            self._leases.create_namespaced_lease(
                LEASE_NAMESPACE, body, _headers=dict(JSON_HEADERS), _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status != HTTP_CONFLICT:
                raise

    def _heartbeat_forever(self) -> None:
        next_status = time.monotonic() + NODE_STATUS_SECONDS
        while not self._stopping.wait(LEASE_RENEW_SECONDS):
            try:
                self._renew_lease()
            except Exception as error:
                LOG.warning("renewing lease: %s", describe(error))
            if time.monotonic() < next_status:
                continue
            try:
                self._post_node_status()
                next_status = time.monotonic() + NODE_STATUS_SECONDS
            except Exception as error:
                LOG.warning("posting node status: %s", describe(error))

    # Watching the pods bound to this node.

    def _watch_forever(self) -> None:
        delay = BACKOFF_FIRST_SECONDS
        resource_version: str | None = None
        while not self._stopping.is_set():
            try:
                if resource_version is None:
                    resource_version = self._list_and_sync()
                resource_version = self._watch_from(resource_version)
                delay = BACKOFF_FIRST_SECONDS
            except WatchExpired:
                LOG.info("pod watch expired; listing again")
                resource_version = None
            except Exception as error:
                if isinstance(error, ApiException) and error.status == HTTP_GONE:
                    resource_version = None
                LOG.warning("pod watch: %s; reconnecting in %.1fs", describe(error), delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, BACKOFF_MAX_SECONDS)

    def _field_selector(self) -> str:
        return f"spec.nodeName={self._node_name}"

    def _list_and_sync(self) -> str:
        """List this node's pods, act on each, and forget processes whose pods vanished unseen."""
        response = self._core.list_pod_for_all_namespaces(
            field_selector=self._field_selector(),
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )
        listing: Json = json.loads(response.data)
        pods: list[Json] = listing.get("items") or []
        present = {pod["metadata"]["uid"] for pod in pods}
        with self._lock:
            vanished = [
                run.pod
                for uid, run in self._runs.items()
                if uid not in present and not run.finished
            ]
        for pod in vanished:
            self.handle_event("DELETED", pod)
        for pod in pods:
            self.handle_event("ADDED", pod)
        return str(listing["metadata"]["resourceVersion"])

    def _watch_from(self, resource_version: str) -> str:
        response = self._core.list_pod_for_all_namespaces(
            field_selector=self._field_selector(),
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_SECONDS,
            _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], WATCH_TIMEOUT_SECONDS + 30),
        )
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if self._stopping.is_set():
                    break
                if not line:
                    continue
                event: Json = json.loads(line)
                pod: Json = event["object"]
                if event["type"] == "ERROR":
                    if pod.get("code") == HTTP_GONE:
                        raise WatchExpired()
                    raise RuntimeError(f"watch error: {pod.get('message')}")
                resource_version = str(pod["metadata"]["resourceVersion"])
                if event["type"] != "BOOKMARK":
                    self.handle_event(str(event["type"]), pod)
        finally:
            response.close()
            response.release_conn()
        return resource_version

    def handle_event(self, kind: str, pod: Json) -> None:
        """Act on one watch event about a pod bound to this node; a failure only costs that event."""
        try:
            self._handle_event(kind, pod)
        except Exception:
            LOG.exception("pod %s: handling %s event failed", pod_key(pod), kind)

    def _handle_event(self, kind: str, pod: Json) -> None:
        if kind == "DELETED":
            self._on_pod_gone(pod)
            return
        uid = pod["metadata"]["uid"]
        first_request = False
        with self._lock:
            run = self._runs.get(uid)
            action = decide_action(
                pod, known=run is not None, running=run is not None and not run.finished
            )
            if action is Action.START:
                run = self._runs[uid] = PodRun(pod=pod)
            elif action is Action.FAIL_LOST:
                self._runs[uid] = PodRun(pod=pod, finished=True)
            elif action is Action.STOP_THEN_DELETE and run is not None:
                first_request = not run.delete_after_exit
                run.delete_after_exit = True
                run.request_stop(grace_seconds=deletion_grace_seconds(pod), now=time.monotonic())
        if action is Action.START and run is not None:
            run.thread = threading.Thread(
                target=self._run_pod, args=(run,), name=f"pod-{uid}", daemon=True
            )
            run.thread.start()
        elif action is Action.STOP_THEN_DELETE and first_request:
            LOG.info(
                "pod %s: deleting; SIGTERM, SIGKILL after %ds",
                pod_key(pod),
                deletion_grace_seconds(pod),
            )
        elif action is Action.DELETE:
            self._finish_deletion(pod, report_status=run is None)
        elif action is Action.FAIL_LOST:
            LOG.info("pod %s: Running without a process of this agent; failing it", pod_key(pod))
            self._report_lost_process(pod)

    def _on_pod_gone(self, pod: Json) -> None:
        with self._lock:
            run = self._runs.get(pod["metadata"]["uid"])
            if run is None or run.finished:
                return
            run.pod_gone = True
            run.request_stop(grace_seconds=0, now=time.monotonic())
        LOG.info("pod %s: deleted from the API; killing its process", pod_key(pod))

    def _finish_deletion(self, pod: Json, *, report_status: bool) -> None:
        if report_status:
            self._report_lost_process(pod)
        self._delete_pod(pod)

    def _report_lost_process(self, pod: Json) -> None:
        body = lost_process_status(pod, now=self._clock())
        if body is not None:
            self._patch_pod_status(pod, body)

    # One pod's process, from start to exit.

    def _run_pod(self, run: PodRun) -> None:
        try:
            self._run_process(run)
        except Exception:
            LOG.exception("pod %s: agent error while running it", pod_key(run.pod))
        finally:
            with self._lock:
                run.finished = True
                delete = run.delete_after_exit and not run.pod_gone
            if delete and not self._stopping.is_set():
                self._delete_pod(run.pod)

    def _run_process(self, run: PodRun) -> None:
        paths, env, argv = self._prepare(run.pod)
        started_at, started_monotonic = self._clock(), time.monotonic()
        if argv is None:
            LOG.info("pod %s: no command; failed (%s)", pod_key(run.pod), REASON_NO_COMMAND)
            self._report_not_started(
                run, at=started_at, reason=REASON_NO_COMMAND, message=MESSAGE_NO_COMMAND
            )
            return
        try:
            process = self._spawn(argv, env=env, paths=paths)
        except OSError as error:
            LOG.info("pod %s: cannot start %s: %s", pod_key(run.pod), argv[0], error)
            self._report_not_started(
                run, at=started_at, reason=REASON_START_ERROR, message=str(error)
            )
            return
        run.pid = process.pid
        LOG.info("pod %s: started pid %d: %s", pod_key(run.pod), process.pid, " ".join(argv))
        self._report(run, running_status(run.pod, pid=process.pid, started_at=started_at))
        deadline = active_deadline(run.pod, started=started_monotonic)
        deadline_exceeded = self._wait_for_exit(run, process, deadline=deadline)
        signal_group(process.pid, signal.SIGKILL)  # nothing of the container outlives it
        self._report_exit(
            run, process, paths=paths, started_at=started_at, deadline_exceeded=deadline_exceeded
        )

    def _prepare(self, pod: Json) -> tuple[PodPaths, dict[str, str], list[str] | None]:
        """The pod's directory, environment and argv (None: no command)."""
        paths = PodPaths.for_pod(self._workdir, pod)
        paths.tmp.mkdir(parents=True, exist_ok=True)
        paths.termination_log.touch()
        container = first_container(pod)
        env, skipped = build_env(pod, container, paths=paths, search_path=self._search_path)
        for name in skipped:
            LOG.info("pod %s: env %s uses an unsupported valueFrom; left unset", pod_key(pod), name)
        return paths, env, container_argv(container, env)

    def _report_exit(
        self,
        run: PodRun,
        process: subprocess.Popen[bytes],
        *,
        paths: PodPaths,
        started_at: datetime,
        deadline_exceeded: bool,
    ) -> None:
        exit_code = exit_code_of(process.returncode)
        LOG.info("pod %s: pid %d exited with code %d", pod_key(run.pod), process.pid, exit_code)
        outcome = Outcome(
            exit_code=exit_code,
            started_at=started_at,
            finished_at=self._clock(),
            container_id=f"{CONTAINER_ID_PREFIX}{process.pid}",
            message=read_termination_message(paths.termination_log),
            pod_reason=REASON_DEADLINE_EXCEEDED if deadline_exceeded else "",
            pod_message=MESSAGE_DEADLINE if deadline_exceeded else "",
        )
        self._report(run, terminated_status(run.pod, outcome))

    @staticmethod
    def _spawn(argv: list[str], *, env: dict[str, str], paths: PodPaths) -> subprocess.Popen[bytes]:
        with paths.log.open("ab") as log:
            return subprocess.Popen(
                argv,
                env=env,
                cwd=paths.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: signals reach its children too
            )

    def _wait_for_exit(
        self, run: PodRun, process: subprocess.Popen[bytes], *, deadline: float | None
    ) -> bool:
        """Wait for the process, enforcing stop requests and the deadline; True if the deadline hit."""
        deadline_exceeded = False
        terminating = False
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=POLL_SECONDS)
                return deadline_exceeded
            now = time.monotonic()
            if deadline is not None and now >= deadline and not deadline_exceeded:
                deadline_exceeded = True
                LOG.info("pod %s: active deadline exceeded; stopping it", pod_key(run.pod))
                with self._lock:
                    run.request_stop(grace_seconds=termination_grace_seconds(run.pod), now=now)
            if run.kill_at is None:
                continue
            if not terminating:
                signal_group(process.pid, signal.SIGTERM)
                terminating = True
            if now >= run.kill_at:
                signal_group(process.pid, signal.SIGKILL)

    def _report_not_started(self, run: PodRun, *, at: datetime, reason: str, message: str) -> None:
        outcome = Outcome(
            exit_code=EXIT_CODE_NOT_STARTED,
            started_at=at,
            finished_at=at,
            message=message,
            container_reason=reason,
            pod_reason=reason,
            pod_message=message,
        )
        self._report(run, terminated_status(run.pod, outcome))

    def _report(self, run: PodRun, body: Json) -> None:
        if self._stopping.is_set() or run.pod_gone:
            return  # shutting down leaves pods as they are; a restart fails them as lost
        self._patch_pod_status(run.pod, body)

    # API writes, retried.

    def _patch_pod_status(self, pod: Json, body: Json) -> None:
        meta = pod["metadata"]
        self._call_with_retries(
            f"status of pod {pod_key(pod)}",
            lambda: _discard(
                self._core.patch_namespaced_pod_status(
                    meta["name"],
                    meta["namespace"],
                    body,
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            ),
        )

    def _delete_pod(self, pod: Json) -> None:
        """Finish a deletion as a kubelet does: grace period 0, only this very pod (uid precondition)."""
        meta = pod["metadata"]
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        deleted = self._call_with_retries(
            f"deleting pod {pod_key(pod)}",
            lambda: _discard(
                self._core.delete_namespaced_pod(
                    meta["name"],
                    meta["namespace"],
                    grace_period_seconds=0,
                    body=options,
                    _headers=dict(JSON_HEADERS),
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            ),
        )
        if deleted:
            LOG.info("pod %s: deletion finished", pod_key(pod))

    def _call_with_retries(self, what: str, call: Callable[[], object]) -> bool:
        """True once `call` succeeds; False if the object is gone (404/409) or the attempts ran out."""
        delay = BACKOFF_FIRST_SECONDS
        for attempt in range(1, API_ATTEMPTS + 1):
            try:
                call()
                return True
            except ApiException as error:
                if error.status in (HTTP_NOT_FOUND, HTTP_CONFLICT):
                    LOG.debug("%s: %s; nothing to do", what, describe(error))
                    return False
                failure: Exception = error
            except Exception as error:
                failure = error
            LOG.warning(
                "%s failed (attempt %d/%d): %s", what, attempt, API_ATTEMPTS, describe(failure)
            )
            if self._stopping.wait(delay):
                return False
            delay = min(delay * 2, BACKOFF_MAX_SECONDS)
        return False


# --- Command line -----------------------------------------------------------------------------


class ShutdownRequested(Exception):
    """Raised in the main thread by the SIGTERM/SIGINT handler."""


def _request_shutdown(signum: int, _frame: FrameType | None) -> None:
    raise ShutdownRequested(signal.Signals(signum).name)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m e2e.nodeagent", description=DESCRIPTION)
    parser.add_argument("--kubeconfig", required=True, help="kubeconfig of the API server to serve")
    parser.add_argument("--node-name", required=True, help="name of the Node to register")
    parser.add_argument("--workdir", required=True, type=Path, help="directory for the pods' files")
    parser.add_argument("--verbose", action="store_true", help="log at DEBUG level")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s nodeagent %(levelname)s %(message)s",
    )
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # our own retry lines say enough
    args.workdir.mkdir(parents=True, exist_ok=True)
    configuration = client.Configuration()
    config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = API_CONNECTIONS
    api = client.ApiClient(configuration)
    agent = NodeAgent(
        core=client.CoreV1Api(api),
        leases=client.CoordinationV1Api(api),
        node_name=args.node_name,
        workdir=args.workdir.resolve(),
    )
    signal.signal(signal.SIGTERM, _request_shutdown)
    signal.signal(signal.SIGINT, _request_shutdown)
    try:
        agent.start()
        while True:
            time.sleep(3600)
    except ShutdownRequested as request:
        LOG.info("%s received; shutting down", request)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        agent.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
