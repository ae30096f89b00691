"""`kubectl vigil logs JOB|EXECUTION [--attempt N] [-f]`: an attempt's log, from its pod or, once
retention has deleted the pod, from the tail the operator stored in the history database.
`kubectl vigil logs WORKFLOW STEP` does the same for a workflow step's attempts (their
execution id is the step's, a function of the workflow's uid and the step's id; a workflow
its ttlAfterFinished deleted is found in the history).

Which attempt: an execution's current attempt (or `--attempt N`); for a job, its newest
execution — in the cluster, else the newest the history database holds. While the
attempt's pod exists its log is read from the API server, as `kubectl logs` does
(`-f` follows it until the pod ends); once the pod is gone, the stored tail is asked of
the operator's HTTP API (the address and token as vigil.cli.operatorapi says) and
shown, with one line on stderr saying that it is the stored end of a deleted pod's log,
how long the log was, and when it was stored. On a terminal, control characters are shown as
text (vigil.cli.terminal: a log's escape sequences cannot steer the viewer's terminal), unless
`--raw`; piped, the bytes are written as they are. A name that is not an Execution in the
cluster is also asked of the history: retention may have deleted it.

The decisions (which execution, which attempt, pod or stored tail) are plain functions of
what the sources answer, so the tests drive them with fakes; `cmd_logs` wires the real ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, TextIO

from kubernetes.client.exceptions import ApiException

from vigil.cli.cluster import Cluster, add_namespace_options, read_execution
from vigil.cli.errors import BadInput
from vigil.cli.operatorapi import HistoryNotShown, OperatorApi, add_tls_options, operator_api
from vigil.cli.terminal import Sink, Visible
from vigil.core.executions import Execution, format_time
from vigil.core.ids import ExecutionId, pod_name, step_execution_id
from vigil.core.logtail import LogTail
from vigil.kube.kits.coreapi import CoreApi
from vigil.model.names import LABEL_ATTEMPT, LABEL_EXECUTION, LABEL_JOB_UID

CHUNK_BYTES = 32 * 1024
#: The exit code when there is no log to show (none stored, or it could not be read).
EXIT_NO_LOG = 1


class PodLogs(Protocol):
    def container(self, namespace: str, pod: str) -> str | None:
        """The pod's main (first) container's name, or None when the pod does not exist."""
        ...

    def stream(self, namespace: str, pod: str, container: str, *, follow: bool) -> Iterator[bytes]:
        """The container's log as it comes; ends when it does (with `follow`: when the pod ends)."""
        ...


class StoredLogs(Protocol):
    def attempt_log(self, namespace: str, execution: str, *, attempt: int | None = None) -> LogTail | None: ...


@dataclasses.dataclass(frozen=True)
class Target:
    """Whose log: an execution and an attempt (None: the latest stored)."""

    namespace: str
    execution_id: str
    attempt: int | None


def target_of_execution(ex: Execution, *, attempt: int | None) -> Target:
    if attempt is not None and not 1 <= attempt <= ex.attempt:
        raise BadInput(f"execution {ex.execution_id} has attempts 1 to {ex.attempt}, not {attempt}")
    return Target(ex.namespace, ex.execution_id, attempt if attempt is not None else ex.attempt)


def newest(executions: Iterable[Execution]) -> Execution | None:
    """The execution of the latest occurrence (then the greatest id)."""
    return max(executions, key=lambda ex: (ex.scheduled_for, ex.execution_id), default=None)


def show(
    target: Target,
    *,
    pods: PodLogs,
    stored: Callable[[], StoredLogs],
    follow: bool,
    out: Sink,
    err: TextIO,
) -> int:
    """Write the attempt's log to `out`: from its pod while it exists, else its stored tail."""
    pod = f"{_whose(target)} has no pod any more"
    if target.attempt is not None:
        name = pod_name(ExecutionId(target.execution_id), target.attempt)
        container = pods.container(target.namespace, name)
        if container is not None:
            unread = _streamed(pods, target.namespace, name, container, follow=follow, out=out)
            if unread is None:
                return 0
            pod = f"the log of pod {name} cannot be read ({unread})"  # not started yet, or its node gone
    try:
        tail = stored().attempt_log(target.namespace, target.execution_id, attempt=target.attempt)
    except HistoryNotShown as why:
        print(f"kubectl vigil: {pod}, and its stored log cannot be asked: {why}", file=err)
        return EXIT_NO_LOG
    if tail is None:
        print(f"kubectl vigil: {pod}, and no log of it is stored (its job's spec.logs chooses whose logs are "
              "kept: failed attempts by default)", file=err)  # fmt: skip
        return EXIT_NO_LOG
    print(stored_header(tail), file=err)
    if tail.note:
        print(f"kubectl vigil: {tail.note}", file=err)
        return EXIT_NO_LOG
    out.write(tail.text.encode("utf-8"))
    out.flush()
    return 0


def stored_header(tail: LogTail) -> str:
    """The line that says what is shown: a deleted pod's log, as stored, and how much of it."""
    size = f"the last {len(tail.text.encode())} of its {tail.log_bytes} bytes" if tail.truncated else "all of it"
    return (
        f"# pod {tail.pod} (execution {tail.execution_id}, attempt {tail.attempt}) is gone: its log as stored "
        f"at {format_time(tail.captured_at)}, {size}"
    )


def _streamed(pods: PodLogs, namespace: str, name: str, container: str, *, follow: bool, out: Sink) -> str | None:
    """Copy the pod's log to `out`: None once done, or why it could not be read when the pod
    went (404) or has no log to give (400: not started, its node gone) before a byte came."""
    wrote = False
    try:
        for chunk in pods.stream(namespace, name, container, follow=follow):
            out.write(chunk)
            out.flush()
            wrote = wrote or bool(chunk)
    except ApiException as error:
        if error.status in (400, 404) and not wrote:
            return f"{error.status}: {_api_message(error)}"
        raise
    return None


def _api_message(error: ApiException) -> str:
    """The API server's one-line message in an error (its Status body), else its reason."""
    try:
        message = str(json.loads(error.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        message = ""
    return " ".join((message or str(error.reason or "")).split())[:200]


def _whose(target: Target) -> str:
    attempt = f"attempt {target.attempt}" if target.attempt is not None else "its latest attempt"
    return f"execution {target.execution_id} ({attempt})"


class KubePodLogs:
    """The pod and its log through the API server, as `kubectl logs` reads them."""

    def __init__(self, core: CoreApi, *, timeout: float) -> None:
        self._core = core
        self._timeout = timeout

    def container(self, namespace: str, pod: str) -> str | None:
        try:
            obj = self._core.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}", timeout=self._timeout)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        containers = (obj.get("spec") or {}).get("containers") or [{}]
        return str(containers[0].get("name") or "")

    def stream(self, namespace: str, pod: str, container: str, *, follow: bool) -> Iterator[bytes]:
        options = {"container": container, "follow": follow or None}
        response = self._core.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", options=options, preload=False,
            timeout=(self._timeout, None) if follow else self._timeout,
        )  # fmt: skip
        try:
            yield from response.stream(CHUNK_BYTES)
        finally:
            response.close()


def resolve(
    name: str,
    namespace: str,
    *,
    attempt: int | None,
    cluster: Cluster,
    stored: Callable[[], OperatorApi],
) -> Target:
    """The attempt `name` means: an Execution's, else a job's newest execution's, else (an
    execution retention deleted) the stored one's."""
    obj = cluster.executions.get(namespace, name)
    if obj is not None:
        return target_of_execution(read_execution(obj), attempt=attempt)
    job = cluster.find_job(name, namespace)
    if job is None:
        return Target(namespace, name, attempt)  # perhaps deleted by retention: the history may hold it
    objs = cluster.executions.select(selector=f"{LABEL_JOB_UID}={job['metadata']['uid']}", namespace=namespace)
    found = newest(read_execution(o) for o in objs)
    if found is not None:
        return target_of_execution(found, attempt=attempt)
    try:
        page, _ = stored().job_executions(namespace, name, limit=1)
    except HistoryNotShown as why:
        raise BadInput(f'scheduledjob "{name}" has no execution in the cluster, and the history cannot be asked: {why}') from None
    if not page:
        raise BadInput(f'scheduledjob "{name}" has no executions')
    return Target(namespace, page[0].execution_id, attempt)


def resolve_step(
    workflow: str,
    step: str,
    namespace: str,
    *,
    attempt: int | None,
    cluster: Cluster,
    stored: Callable[[], OperatorApi],
) -> Target:
    """The attempt of a workflow step: `attempt`, else its latest pod's, else (its pods gone) the
    latest stored. A workflow no longer in the cluster is looked up in the history by name."""
    obj = cluster.find_workflow(workflow, namespace)
    if obj is not None:
        uid = str(obj["metadata"]["uid"])
    else:
        try:
            found = stored().workflow_history(namespace, workflow)
        except HistoryNotShown as why:
            raise BadInput(f'workflow "{workflow}" is not in namespace "{namespace}", and the history cannot '
                           f"be asked: {why}") from None  # fmt: skip
        if found is None:
            raise BadInput(f'workflow "{workflow}" not found in namespace "{namespace}", nor in the history')
        uid = found.uid
    execution = step_execution_id(uid, step)
    if attempt is None:
        attempt = latest_attempt(
            CoreApi(cluster.api).list_namespaced_pod(namespace, label_selector=f"{LABEL_EXECUTION}={execution}")
        )
    return Target(namespace, execution, attempt)


def latest_attempt(pods: Mapping[str, Any]) -> int | None:
    """The greatest attempt among a pod list's items (None when there is none)."""
    attempts = [
        int(value) for p in pods.get("items") or ()
        if (value := (p["metadata"].get("labels") or {}).get(LABEL_ATTEMPT, "")).isdigit()
    ]  # fmt: skip
    return max(attempts, default=None)


def pod_field(ex: Execution, present: Iterable[str]) -> tuple[str, str]:
    """`describe`'s word on the current attempt's pod: its name while it exists, else that it is
    gone and where its stored log is (never a dead pod named as if it were there)."""
    current = pod_name(ExecutionId(ex.execution_id), ex.attempt)
    if current in set(present):
        return "Pod", f"{current} (kubectl vigil logs {ex.execution_id})"
    return "Pod", (
        f"gone (retention deleted it, or it was never made); its log as stored: "
        f"kubectl vigil logs {ex.execution_id} --attempt {ex.attempt}"
    )


def pods_of(cluster: Cluster, namespace: str, execution_id: str) -> list[str]:
    """The names of an execution's pods that exist (one list call by its label)."""
    answer: Mapping[str, Any] = CoreApi(cluster.api).list_namespaced_pod(
        namespace, label_selector=f"{LABEL_EXECUTION}={execution_id}"
    )
    return [str(p["metadata"]["name"]) for p in answer.get("items") or ()]


def cmd_logs(args: argparse.Namespace) -> int:
    cluster = Cluster()
    namespace = cluster.namespace(args.namespace)

    def stored() -> OperatorApi:
        return operator_api(args, lambda: cluster.api, environ=os.environ)

    if args.step is not None:
        target = resolve_step(args.name, args.step, namespace, attempt=args.attempt, cluster=cluster, stored=stored)
    else:
        target = resolve(args.name, namespace, attempt=args.attempt, cluster=cluster, stored=stored)
    pods = KubePodLogs(CoreApi(cluster.api), timeout=args.request_timeout)
    if args.raw or not sys.stdout.isatty():
        return show(target, pods=pods, stored=stored, follow=args.follow, out=sys.stdout.buffer, err=sys.stderr)
    out = Visible(sys.stdout.buffer)  # a tenant's escape sequences shown, not obeyed
    try:
        return show(target, pods=pods, stored=stored, follow=args.follow, out=out, err=sys.stderr)
    finally:
        out.close()


def attempt_number(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 10_000:
        raise argparse.ArgumentTypeError(f"must be an attempt number from 1, not {text!r}")
    return int(text)


def add_parsers(sub: Any) -> None:
    """Register `logs` on the CLI's subparsers."""
    lg = sub.add_parser(
        "logs", help="an attempt's log: from its pod, or the tail stored once retention deleted the pod"
    )
    lg.add_argument(
        "name", metavar="JOB|EXECUTION|WORKFLOW", help="an execution id, a job (its newest execution), or a "
        "workflow (with STEP)",
    )  # fmt: skip
    lg.add_argument("step", nargs="?", metavar="STEP", help="a step of the workflow WORKFLOW")
    lg.add_argument("--attempt", type=attempt_number, metavar="N", help="this attempt (default: the latest)")
    lg.add_argument("-f", "--follow", action="store_true", help="follow the live pod's log until it ends")
    lg.add_argument("--raw", action="store_true", help="write control characters to a terminal as they are "
                    "(by default a terminal is shown them as text, \\x1b: a log cannot steer it)")  # fmt: skip
    lg.add_argument(
        "--api-url", help="the operator's HTTP API, for stored logs (default: $VIGIL_API_URL)"
    )
    add_tls_options(lg)
    add_namespace_options(lg)
    lg.set_defaults(func=cmd_logs)
