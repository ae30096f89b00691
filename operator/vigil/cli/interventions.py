"""Acting on executions: `retry EXECUTION` and `cancel EXECUTION|JOB` (and their workflow forms).

The CLI never writes an execution's status — that is the operator's. It pulls
the levers the spec offers (`spec.retryRequests`, `spec.cancel`) and the
operator's controllers react (vigil.kube.controllers.executioncontroller). A retry is a read-modify-write
of a counter, so the patch carries the resourceVersion it read and starts over
on 409: two people retrying at once cannot lose an increment. Each verb
refuses, with exit 2, what the operator would ignore (retrying a live
execution, cancelling a finished one), so the user is never told "done" about
nothing.

The same two verbs steer workflows (vigil.cli.workflows): `retry WF STEP`
(a second name makes it a workflow step) and `cancel WF`. `cancel NAME` looks
for an execution, then a ScheduledJob, then a Workflow, and acts on the first
it finds; a kind the caller may not read is passed over, and `--job` or
`--workflow` skips the search. `cancel JOB` stops everything of the job in
flight: its executions, and for a workflowTemplate job its unfinished workflows,
each of which gets a cancel request in the caller's name (as `cancel WF` appends
one; a workflow that already has one is left as it is).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from vigil.cli import workflows
from vigil.cli.cluster import Cluster, add_namespace_options, read_execution
from vigil.cli.errors import BadInput, Contention
from vigil.cli.output import add_output_option, emit, table_data
from vigil.cli.tables import render_table
from vigil.core.executions import Execution, Phase, format_time
from vigil.core.ports import Conflict
from vigil.core.workflow import TERMINAL_WORKFLOW_PHASES
from vigil.kube.kits.conflicts import conflict_from, retry_on_conflict
from vigil.model import GROUP, VERSION
from vigil.model.names import (
    ANNOTATION_SCHEDULED_FOR,
    EXECUTIONS,
    LABEL_JOB_UID,
    SCHEDULED_JOBS,
    WORKFLOWS,
)
from vigil.model.workflow import RequestAction

WHY_NOT_RETRIED = {
    Phase.SUCCEEDED: "it has already succeeded",
    Phase.CANCELLED: "a cancelled execution is never run again",
}
STILL_IN_FLIGHT = "it is still in flight and retries by itself while attempts remain"
REQUESTED, ALREADY_REQUESTED = "cancel requested", "cancel already requested"


# --- retry ------------------------------------------------------------------------------------


def retry_refusal(name: str, namespace: str, phase: Phase) -> str:
    why = WHY_NOT_RETRIED.get(phase, STILL_IN_FLIGHT)
    return f'execution "{name}" in namespace "{namespace}" is {phase}, not Dead: only a dead letter can be retried ({why})'


def request_retry(cluster: Cluster, name: str, namespace: str) -> int:
    """Add one to spec.retryRequests of a Dead execution; the attempt number it will run as."""

    def request() -> int:
        obj = cluster.execution(name, namespace)
        ex = read_execution(obj)
        if ex.phase is not Phase.DEAD:
            raise BadInput(retry_refusal(name, namespace, ex.phase))
        requests = int((obj.get("spec") or {}).get("retryRequests") or 0)
        patch = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {"retryRequests": requests + 1},
        }
        try:
            cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, EXECUTIONS, name, patch)
        except ApiException as err:
            conflict_from(err)  # changed since we read it: read again, decide again
            raise
        return ex.attempt + 1

    try:
        return retry_on_conflict(request)
    except Conflict:
        raise Contention(f'execution "{name}" in namespace "{namespace}" kept changing; try again') from None


def cmd_retry(args: argparse.Namespace) -> int:
    if args.step is not None:
        return workflows.request(args, RequestAction.RETRY, workflow=args.name)
    if args.reason is not None:
        raise BadInput("--reason goes with a workflow step (retry WORKFLOW STEP --reason TEXT); "
                       "an execution's retry takes none")  # fmt: skip
    cluster = Cluster()
    attempt = request_retry(cluster, args.name, cluster.namespace(args.namespace))
    text = (
        f"execution {args.name} will run again as attempt {attempt} with the same execution id "
        "(the operator starts it when a slot is free)"
    )
    return emit(args, {"executionId": args.name, "attempt": attempt}, text)


# --- cancel -----------------------------------------------------------------------------------


def cancel_spec(reason: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"cancel": True}
    if reason:
        spec["cancelReason"] = reason
    return spec


@dataclasses.dataclass(frozen=True)
class CancelRequest:
    """An execution whose spec.cancel was set; `repeated` when it already was (the operator has not acted yet)."""

    execution: Execution
    repeated: bool

    @property
    def outcome(self) -> str:
        return ALREADY_REQUESTED if self.repeated else REQUESTED


def _request_cancel(cluster: Cluster, obj: Mapping[str, Any], *, reason: str | None) -> CancelRequest:
    """Set spec.cancel (and the reason, when given) on an execution not yet final."""
    meta = obj["metadata"]
    repeated = bool((obj.get("spec") or {}).get("cancel"))
    cluster.executions.patch_spec(meta["namespace"], meta["name"], cancel_spec(reason))
    return CancelRequest(read_execution(dict(obj)), repeated=repeated)


def cancel_execution(cluster: Cluster, obj: Mapping[str, Any], *, reason: str | None) -> CancelRequest:
    """Cancel one execution; BadInput if it has already finished."""
    meta = obj["metadata"]
    ex = read_execution(dict(obj))
    if ex.phase.terminal:
        raise BadInput(
            f'execution "{meta["name"]}" in namespace "{meta["namespace"]}" is already {ex.phase}: nothing to cancel'
        )
    return _request_cancel(cluster, obj, reason=reason)


def cancel_job(cluster: Cluster, job: Mapping[str, Any], *, reason: str | None) -> list[CancelRequest]:
    """Cancel every in-flight execution of a job (by status; the phase label only narrows the list)."""
    meta = job["metadata"]
    requests = []
    for obj in cluster.executions.active_for_job(meta["namespace"], meta["uid"]):
        if read_execution(obj).phase.terminal:
            continue
        try:
            requests.append(_request_cancel(cluster, obj, reason=reason))
        except ApiException as err:
            if err.status == 404:  # gone since the list (its job was deleted): nothing left to stop
                continue
            raise
    return sorted(requests, key=lambda request: request.execution.scheduled_for)


@dataclasses.dataclass(frozen=True)
class WorkflowCancel:
    """A workflow of a job that was asked to cancel; `repeated` when a cancel request was there already."""

    name: str
    scheduled_for: str
    phase: str
    repeated: bool

    @property
    def outcome(self) -> str:
        return ALREADY_REQUESTED if self.repeated else REQUESTED


def cancel_job_workflows(cluster: Cluster, job: Mapping[str, Any], *, reason: str | None) -> list[WorkflowCancel]:
    """Append a cancel request, in the caller's name, to every unfinished workflow of a
    workflowTemplate job (found by its uid label), oldest occurrence first."""
    meta = job["metadata"]
    namespace = meta["namespace"]
    listed = cluster.custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, WORKFLOWS, label_selector=f"{LABEL_JOB_UID}={meta['uid']}"
    )
    cancels: list[WorkflowCancel] = []
    identity = None
    for obj in listed.get("items") or []:
        phase = str((obj.get("status") or {}).get("phase") or "Pending")
        if phase in TERMINAL_WORKFLOW_PHASES:
            continue
        name = obj["metadata"]["name"]
        repeated = any(r.get("action") == "cancel" for r in (obj.get("spec") or {}).get("requests") or [])
        if not repeated:
            identity = identity or cluster.whoami()
            ask = workflows.Ask(action=RequestAction.CANCEL, workflow=name, namespace=namespace, reason=reason)
            item = workflows.request_item(
                ask, identity=identity, request_id=workflows.new_request_id(), at=datetime.now(UTC)
            )
            try:
                workflows.append_request(cluster, ask, item)
            except BadInput:  # gone since the list (it finished past its TTL): nothing left to stop
                continue
        scheduled = str((obj["metadata"].get("annotations") or {}).get(ANNOTATION_SCHEDULED_FOR) or "")
        cancels.append(WorkflowCancel(name=name, scheduled_for=scheduled, phase=phase, repeated=repeated))
    return sorted(cancels, key=lambda cancel: (cancel.scheduled_for, cancel.name))


def _execution_cancelled(args: argparse.Namespace, request: CancelRequest, *, also_a_job: bool) -> int:
    ex = request.execution
    stops = "deletes its pod" if ex.phase is Phase.RUNNING else "stops it"
    lines = [f"execution {ex.execution_id} ({ex.phase}, attempt {ex.attempt}): {request.outcome}; "
             f"the operator {stops} and never retries it"]  # fmt: skip
    if also_a_job:
        lines.append(f'note: "{ex.execution_id}" also names a ScheduledJob; only the execution was cancelled '
                     "(add --job to cancel the job's in-flight executions)")  # fmt: skip
    data = {"executions": [{"execution": ex.execution_id, "phase": ex.phase, "attempt": ex.attempt,
                            "cancel": request.outcome}], "workflows": []}  # fmt: skip
    return emit(args, data, "\n".join(lines))


def _job_cancelled(
    args: argparse.Namespace, namespace: str, requests: list[CancelRequest], cancels: list[WorkflowCancel]
) -> int:
    name = args.name
    ex_headers, wf_headers = ["EXECUTION", "SCHEDULED", "PHASE", "ATTEMPT", "CANCEL"], ["WORKFLOW", "SCHEDULED", "PHASE", "CANCEL"]
    ex_rows: list[list[object]] = [
        [r.execution.execution_id, format_time(r.execution.scheduled_for), r.execution.phase,
         r.execution.attempt, r.outcome]
        for r in requests
    ]  # fmt: skip
    wf_rows: list[list[object]] = [[c.name, c.scheduled_for, c.phase, c.outcome] for c in cancels]
    lines = []
    if not requests and not cancels:
        lines.append(f'scheduledjob {name} in namespace "{namespace}" has no in-flight executions '
                     "(Ready, Running or Backoff) and no unfinished workflows: nothing to cancel")  # fmt: skip
    if requests:
        repeated = sum(request.repeated for request in requests)
        lines.append(f"scheduledjob {name}: cancel requested for {len(requests)} in-flight execution(s) "
                     f"({repeated} of them already requested before)")  # fmt: skip
        lines.append(render_table(ex_headers, ex_rows))
    if cancels:
        repeated = sum(cancel.repeated for cancel in cancels)
        lines.append(f"scheduledjob {name}: cancel requested for {len(cancels)} unfinished workflow(s) "
                     f"({repeated} of them already requested before); the operator stops their pods "
                     "(kubectl vigil timeline WORKFLOW shows it)")  # fmt: skip
        lines.append(render_table(wf_headers, wf_rows))
    data = {"executions": table_data(ex_headers, ex_rows), "workflows": table_data(wf_headers, wf_rows)}
    return emit(args, data, "\n".join(lines))


def _visible(find: Callable[[], Mapping[str, Any] | None], kind: str, hidden: list[str]) -> Mapping[str, Any] | None:
    """What `find` finds; None (and `kind` noted in `hidden`) if the caller may not read that kind."""
    try:
        return find()
    except ApiException as err:
        if err.status != 403:
            raise
        hidden.append(kind)
        return None


def cmd_cancel(args: argparse.Namespace) -> int:
    if args.workflow:
        return workflows.request(args, RequestAction.CANCEL, workflow=args.name)
    cluster = Cluster()
    namespace = cluster.namespace(args.namespace)
    hidden: list[str] = []
    execution = None
    if not args.job:
        execution = _visible(lambda: cluster.executions.get(namespace, args.name), EXECUTIONS, hidden)
    if execution is not None:
        request = cancel_execution(cluster, execution, reason=args.reason)
        return _execution_cancelled(args, request, also_a_job=cluster.find_job(args.name, namespace) is not None)
    job = _visible(lambda: cluster.find_job(args.name, namespace), SCHEDULED_JOBS, hidden)
    if job is not None:
        requests = cancel_job(cluster, job, reason=args.reason)
        return _job_cancelled(args, namespace, requests, cancel_job_workflows(cluster, job, reason=args.reason))
    if not args.job and _visible(lambda: cluster.find_workflow(args.name, namespace), WORKFLOWS, hidden):
        return workflows.request(args, RequestAction.CANCEL, workflow=args.name, cluster=cluster)
    what = "scheduledjob" if args.job else "workflow, execution or scheduledjob"
    unreadable = f" (you may not read {' or '.join(hidden)} there)" if hidden else ""
    raise BadInput(f'no {what} named "{args.name}" in namespace "{namespace}"{unreadable}')


def add_parsers(sub: Any) -> None:
    """Register the verbs of this module on the CLI's subparsers."""
    rt = sub.add_parser(
        "retry", help="run a dead execution once more (same execution id), or a failed workflow step"
    )
    rt.add_argument("name", metavar="EXECUTION|WORKFLOW", help="an execution id in phase Dead, or a Workflow")
    rt.add_argument("step", nargs="?", metavar="STEP", help="with a Workflow: the failed step to run again")
    rt.add_argument("--reason", help="with a workflow step: why, for the record")
    workflows.add_wait_options(rt)
    add_namespace_options(rt)
    add_output_option(rt)
    rt.set_defaults(func=cmd_retry)

    ca = sub.add_parser(
        "cancel", help="cancel an execution, everything of a job in flight (executions, workflows), or a workflow"
    )
    ca.add_argument("name", help="an execution id, a ScheduledJob's name or a Workflow's name")
    ca.add_argument("--reason", help="why (kept in spec.cancelReason, or the workflow's request)")
    kind = ca.add_mutually_exclusive_group()
    kind.add_argument("--job", action="store_true", help="NAME is a ScheduledJob even if an execution has that name")
    kind.add_argument("--workflow", action="store_true", help="NAME is a Workflow (no search)")
    workflows.add_wait_options(ca)
    add_namespace_options(ca)
    add_output_option(ca)
    ca.set_defaults(func=cmd_cancel)
