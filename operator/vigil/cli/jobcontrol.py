"""`run JOB`, `suspend JOB --reason` and `resume JOB`: steering a ScheduledJob by hand.

`run` starts one execution outside the schedule, the way `backfill` starts the
executions of past occurrences: it creates the Execution the operator's
dispatcher then starts, marked `source: Manual`. Its id is a pure function of
the job's uid and a *request id* (`vigil.core.ids.manual_execution_id`), never
of an occurrence, so it cannot collide with a scheduled run, and the same
request repeated meets 409 and reports the execution that already exists: a
command retried after a dropped connection never runs the job twice. The caller
may name the request (`--request-id deploy-42`); without one the request id is
the current UTC minute, so a repeat within the same minute is the same run. The
run stands for the period of the job's latest occurrence at or before now (the
one a payload template would most likely mean), or just "now" when the job has
none yet; the request id is kept in the annotation `vigil.dev/request-id`.
Like a backfilled execution it is not held to the job's `concurrencyPolicy`
(the trigger applies that when it fires). Only a job that runs a pod template
can be run this way: a `workflowTemplate` or `task:` job's occurrences are not
Execution objects, and `run` refuses them (exit 2) rather than create one that
could never start. A suspended job may be run; a note says it is suspended.

`suspend` and `resume` write `spec.suspend`, `spec.suspendReason` and
`spec.suspendedBy` in one patch conditional on the version read (a 409 reads
again). `suspendedBy` is the caller as the API server knows them (a
SelfSubjectReview), so the watchdog's "suspended too long" names a person
who can be asked. Suspending a suspended job, or resuming a running one, is
refused (exit 2) rather than reported as done.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from vigil.cli.cluster import Cluster, add_namespace_options
from vigil.cli.errors import BadInput, Contention
from vigil.cli.output import add_output_option, emit
from vigil.core.chain import JobView
from vigil.core.ids import ExecutionId, manual_execution_id
from vigil.core.ports import Conflict
from vigil.core.schedule import RESOLUTION, occurrence_at, previous_occurrence
from vigil.core.timeparse import format_rfc3339
from vigil.kube.kits.conflicts import conflict_from, retry_on_conflict
from vigil.kube.stores.executions import execution_body
from vigil.model import GROUP, VERSION
from vigil.model.execution import ExecutionSource
from vigil.model.jobspec import InvalidJob, job_view
from vigil.model.names import ANNOTATION_REQUEST_ID, SCHEDULED_JOBS

#: What a request id may be: short, and safe in an annotation, a log line and a shell.
REQUEST_ID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._:-]{0,126}[A-Za-z0-9])?")
CREATED, EXISTED = "created", "already exists"
NO_REASON = "suspend: --reason must say why (the watchdog reports suspensions without one)"


@dataclasses.dataclass(frozen=True)
class ManualRun:
    """The execution a `run` request stands for."""

    request_id: str
    execution_id: ExecutionId
    scheduled_for: datetime
    period_start: datetime
    period_end: datetime


# --- pure ---------------------------------------------------------------------------------------


def default_request_id(now: datetime) -> str:
    """The request id when the caller names none: the UTC minute, so a repeat within it is the same run."""
    return "run-" + now.astimezone(UTC).strftime("%Y%m%dT%H%MZ").lower()


def request_id_arg(text: str) -> str:
    if not REQUEST_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: 1 to 128 letters, digits, '.', '_', ':' or '-', starting and ending with a letter or digit"
        )
    return text


def plan_run(view: JobView, *, request_id: str, now: datetime) -> ManualRun:
    """The manual run of `request_id` asked for at `now`: its id, and the period of the job's
    latest occurrence at or before `now` (or `now` itself when there is none)."""
    at = now.astimezone(UTC).replace(microsecond=0)
    try:
        latest = occurrence_at(view.schedule, previous_occurrence(view.schedule, at + RESOLUTION), jitter=view.offset)
        start, end = latest.period_start, latest.period_end
    except ValueError:  # no occurrence yet (a one-off still ahead, a schedule not started)
        start = end = at
    return ManualRun(request_id, manual_execution_id(view.uid, request_id), at, start, end)


def run_refusal(job: dict[str, Any], verb: str = "run") -> str | None:
    """Why `verb` (run, backfill) cannot start this job, or None: only pod-template jobs run as
    Executions; an Execution made for another kind of job would wait Ready forever."""
    spec = job.get("spec") or {}
    for field, how in (("workflowTemplate", "create a Workflow"), ("task", "submit to its TaskQueue (POST /v1/jobs)")):
        if spec.get(field):
            return (
                f'scheduledjob "{job["metadata"]["name"]}" runs a {field}, not a pod: {verb} starts pod-template '
                f"jobs only (to run it once, {how})"
            )
    return None


def suspend_patch(job: dict[str, Any], *, reason: str, by: str) -> dict[str, Any]:
    """Suspend `job` in `by`'s name; BadInput when it is suspended already."""
    spec = job.get("spec") or {}
    if spec.get("suspend"):
        owner = spec.get("suspendedBy") or "nobody named"
        raise BadInput(
            f'scheduledjob "{job["metadata"]["name"]}" is already suspended (by {owner}: '
            f'{spec.get("suspendReason") or "no reason given"}); resume it first to suspend it in your name'
        )
    return {
        "metadata": {"resourceVersion": job["metadata"]["resourceVersion"]},
        "spec": {"suspend": True, "suspendReason": reason, "suspendedBy": by},
    }


def resume_patch(job: dict[str, Any]) -> dict[str, Any]:
    """Resume `job` (its reason and owner go with the suspension); BadInput when it is not suspended."""
    if not (job.get("spec") or {}).get("suspend"):
        raise BadInput(f'scheduledjob "{job["metadata"]["name"]}" is not suspended')
    return {
        "metadata": {"resourceVersion": job["metadata"]["resourceVersion"]},
        "spec": {"suspend": False, "suspendReason": None, "suspendedBy": None},
    }


# --- against the cluster ------------------------------------------------------------------------


def start_run(cluster: Cluster, namespace: str, name: str, *, request_id: str | None, now: datetime) -> tuple[ManualRun, str, bool]:
    """Create the manual run's Execution: (the run, CREATED or EXISTED, whether the job is
    suspended); BadInput when the job is invalid or runs no pod. `kubectl vigil run` and the
    console's Run now both start a run this way."""
    job = cluster.job(name, namespace)
    try:
        view, _ = job_view(job)
    except InvalidJob as err:
        raise BadInput(f'scheduledjob "{name}" in namespace "{namespace}" is invalid: {err}') from None
    refusal = run_refusal(job)
    if refusal is not None:
        raise BadInput(refusal)
    run = plan_run(view, request_id=request_id or default_request_id(now), now=now)
    body = execution_body(
        job=job,
        execution_id=run.execution_id,
        scheduled_for=run.scheduled_for,
        period_start=run.period_start,
        period_end=run.period_end,
        source=str(ExecutionSource.MANUAL),
    )
    body["metadata"]["annotations"] = {ANNOTATION_REQUEST_ID: run.request_id}
    result = CREATED if cluster.executions.create(body) else EXISTED
    return run, result, view.suspended


def cmd_run(args: argparse.Namespace) -> int:
    cluster = Cluster()
    namespace = cluster.namespace(args.namespace)
    run, result, suspended = start_run(cluster, namespace, args.job, request_id=args.request_id, now=datetime.now(UTC))
    if suspended:
        print(f"note: scheduledjob {args.job} is suspended; this run goes ahead all the same", file=sys.stderr)
    data = {
        "namespace": namespace, "job": args.job, "result": result, "requestId": run.request_id,
        "executionId": run.execution_id, "scheduledFor": run.scheduled_for,
        "periodStart": run.period_start, "periodEnd": run.period_end,
    }  # fmt: skip
    text = (
        f"execution {run.execution_id} {result} (request {run.request_id}, period "
        f"{format_rfc3339(run.period_start)} to {format_rfc3339(run.period_end)}); "
        f"repeat with --request-id {run.request_id} to be sure it runs once"
    )
    return emit(args, data, text)


def _steer(cluster: Cluster, name: str, namespace: str, build: Any) -> dict[str, Any]:
    """Read the job, build the patch from it, write it conditionally; read again on 409."""

    def attempt() -> dict[str, Any]:
        job = cluster.job(name, namespace)
        patch: dict[str, Any] = build(job)
        try:
            written: dict[str, Any] = cluster.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, SCHEDULED_JOBS, name, patch
            )
        except ApiException as err:
            conflict_from(err)
            raise
        return written

    try:
        return retry_on_conflict(attempt)
    except Conflict:
        raise Contention(f'scheduledjob "{name}" in namespace "{namespace}" kept changing; try again') from None


def _state(job: dict[str, Any]) -> dict[str, Any]:
    spec = job.get("spec") or {}
    return {
        "namespace": job["metadata"]["namespace"],
        "job": job["metadata"]["name"],
        "suspend": bool(spec.get("suspend")),
        "suspendReason": spec.get("suspendReason"),
        "suspendedBy": spec.get("suspendedBy"),
    }


def suspend_job(cluster: Cluster, namespace: str, name: str, *, reason: str) -> tuple[dict[str, Any], str]:
    """Suspend the job in the caller's name: (the job written, that name). BadInput without a
    reason, or when it is suspended already."""
    if not reason.strip():
        raise BadInput(NO_REASON)
    by = cluster.whoami().username
    return _steer(cluster, name, namespace, lambda obj: suspend_patch(obj, reason=reason, by=by)), by


def resume_job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """Resume the job; BadInput when it is not suspended."""
    return _steer(cluster, name, namespace, resume_patch)


def cmd_suspend(args: argparse.Namespace) -> int:
    if not args.reason.strip():  # before the kubeconfig is read: the mistake is the command's
        raise BadInput(NO_REASON)
    cluster = Cluster()
    namespace = cluster.namespace(args.namespace)
    job, by = suspend_job(cluster, namespace, args.job, reason=args.reason)
    return emit(args, _state(job), f"scheduledjob {args.job} suspended by {by}: {args.reason}")


def cmd_resume(args: argparse.Namespace) -> int:
    cluster = Cluster()
    namespace = cluster.namespace(args.namespace)
    job = resume_job(cluster, namespace, args.job)
    return emit(args, _state(job), f"scheduledjob {args.job} resumed")


def add_parsers(sub: Any) -> None:
    """Register `run`, `suspend` and `resume` on the CLI's subparsers."""
    rn = sub.add_parser("run", help="run a job now, outside its schedule (idempotent per request id)")
    rn.add_argument("job", help="a ScheduledJob")
    rn.add_argument(
        "--request-id", type=request_id_arg,
        help="names this request: repeating it never runs the job twice (default: the current UTC minute)",
    )  # fmt: skip
    add_namespace_options(rn)
    add_output_option(rn)
    rn.set_defaults(func=cmd_run)

    sp = sub.add_parser("suspend", help="stop a job firing, in your name (spec.suspendedBy)")
    sp.add_argument("job", help="a ScheduledJob")
    sp.add_argument("--reason", required=True, help="why, for whoever finds it suspended")
    add_namespace_options(sp)
    add_output_option(sp)
    sp.set_defaults(func=cmd_suspend)

    rs = sub.add_parser("resume", help="let a suspended job fire again")
    rs.add_argument("job", help="a ScheduledJob")
    add_namespace_options(rs)
    add_output_option(rs)
    rs.set_defaults(func=cmd_resume)
