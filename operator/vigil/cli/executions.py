"""Looking at executions: `executions JOB`, `describe EXECUTION` and `dead-letters`.

Each verb reads Execution objects (a job's by its uid label, dead letters by
the phase label) and prints what their status says. `executions JOB` also asks
the operator's HTTP API for the job's older executions, those retention deleted,
from the history database (`--history N`, default 20; 0 not to ask; the address
and token as vigil.cli.operatorapi says), and merges them in by scheduled time,
marked `history` in a last FROM column; when the history cannot be asked it says
why in one line on stderr and shows the Executions all the same. The labels only narrow the
list: a label a crash left stale is corrected by the status, which is what the
rows show. The table builders are pure functions of the objects and `now`; an object
whose status cannot be read is named on stderr and left out of a list, so one
bad object never hides the others.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from vigil.cli.cluster import Cluster, add_namespace_options, read_execution
from vigil.cli.errors import BadInput
from vigil.cli.logs import pod_field, pods_of
from vigil.cli.operatorapi import HistoryNotShown, OperatorApi, add_tls_options, operator_api
from vigil.cli.output import add_output_option, emit, table_data
from vigil.cli.tables import age, cell, human_duration, precise_duration, relative, render_table
from vigil.core.executions import AttemptResult, Execution, Phase, format_time
from vigil.core.history import ExecutionSummary
from vigil.core.timeparse import parse_rfc3339
from vigil.kube.stores.executions import phase_of
from vigil.model.names import LABEL_JOB_UID

Table = tuple[list[str], list[list[object]]]
EXECUTION_COLUMNS = ["EXECUTION", "SCHEDULED", "PHASE", "ATTEMPT", "REASON", "AGE"]
DEAD_LETTER_COLUMNS = ["NAMESPACE", "JOB", "EXECUTION", "ATTEMPTS", "LAST REASON", "DEAD FOR"]
ATTEMPT_COLUMNS = ["ATTEMPT", "OUTCOME", "REASON", "EXIT CODE", "STARTED", "FINISHED", "DURATION", "MESSAGE"]
RUNNING_OUTCOME = "Running"  # the current attempt, not yet recorded
DEFAULT_SOURCE = "Trigger"
#: The FROM column, shown once rows from the history are merged in: where each row comes from.
FROM_COLUMN, FROM_CLUSTER, FROM_HISTORY = "FROM", "cluster", "history"
#: Older executions asked of the history by default, and at most (`--history N`).
DEFAULT_HISTORY = 20
MAX_HISTORY = 10_000


def readable(objs: Iterable[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Execution]]:
    """Each object with its execution record; one that cannot be read is named on stderr and left out."""
    out = []
    for obj in objs:
        try:
            out.append((obj, read_execution(dict(obj))))
        except BadInput as err:
            print(f"kubectl vigil: warning: {err}; left out", file=sys.stderr)
    return out


def created_at(obj: Mapping[str, Any]) -> datetime | None:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    return parse_rfc3339(stamp) if stamp else None


# --- executions JOB ---------------------------------------------------------------------------


def execution_table(
    objs: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    with_namespace: bool = False,
    history: Iterable[ExecutionSummary] = (),
) -> Table:
    """One row per Execution, and per execution of the `history` no Execution holds any more,
    newest occurrence first; with history rows, a last column says where each row is from."""
    read = readable(objs)
    live = {ex.execution_id for _, ex in read}
    keyed: list[tuple[datetime, str, str, list[object]]] = []
    for obj, ex in read:
        row: list[object] = [
            ex.execution_id, format_time(ex.scheduled_for), ex.phase, ex.attempt, ex.reason, age(created_at(obj), now)
        ]
        keyed.append((ex.scheduled_for, ex.execution_id, ex.namespace, row))
    older = {s.execution_id: s for s in history if s.execution_id not in live}
    for s in older.values():
        row = [s.execution_id, format_time(s.scheduled_for), phase_name(s), s.attempts, s.reason, age(s.scheduled_for, now)]
        keyed.append((s.scheduled_for, s.execution_id, s.namespace, row))
    keyed.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    rows: list[list[object]] = []
    for _, execution_id, namespace, row in keyed:
        where = [FROM_HISTORY if execution_id in older else FROM_CLUSTER] if older else []
        rows.append([*([namespace] if with_namespace else []), *row, *where])
    headers = ["NAMESPACE"] * with_namespace + EXECUTION_COLUMNS + [FROM_COLUMN] * bool(older)
    return headers, rows


def phase_name(summary: ExecutionSummary) -> str:
    """The history's state of an execution in the words of an Execution's phase (Succeeded, Dead…)."""
    return str(summary.state).capitalize()


def older_executions(
    api: OperatorApi, namespace: str, job: str, *, want: int, live: set[str]
) -> list[ExecutionSummary]:
    """Up to `want` of the job's executions from the history that are not among the `live`
    ones, newest first, asked a page at a time."""
    found: list[ExecutionSummary] = []
    cont: str | None = None
    while len(found) < want:
        page, cont = api.job_executions(namespace, job, limit=want - len(found) + len(live), cont=cont)
        found.extend(s for s in page if s.execution_id not in live)
        if cont is None:
            break
    return found[:want]


def history_of(
    args: argparse.Namespace, cluster: Cluster, jobs: list[dict[str, Any]], live: set[str]
) -> tuple[list[ExecutionSummary], str | None]:
    """The jobs' older executions from the operator's API, and why none could be asked (or None)."""
    if args.history == 0:
        return [], None
    try:
        api = operator_api(args, lambda: cluster.api, environ=os.environ)
        found: list[ExecutionSummary] = []
        for job in jobs:
            meta = job["metadata"]
            found += older_executions(api, meta["namespace"], meta["name"], want=args.history, live=live)
    except HistoryNotShown as why:
        return [], str(why)
    return found, None


def cmd_executions(args: argparse.Namespace) -> int:
    cluster = Cluster()
    if args.all_namespaces:
        jobs = cluster.jobs_named(args.job)
        if not jobs:
            raise BadInput(f'scheduledjob "{args.job}" not found in any namespace')
        where = "any namespace"
    else:
        namespace = cluster.namespace(args.namespace)
        jobs = [cluster.job(args.job, namespace)]
        where = f'namespace "{namespace}"'
    uids = ",".join(job["metadata"]["uid"] for job in jobs)
    objs = cluster.executions.select(
        selector=f"{LABEL_JOB_UID} in ({uids})",
        namespace=None if args.all_namespaces else jobs[0]["metadata"]["namespace"],
    )
    live = {str(obj["metadata"]["name"]) for obj in objs}
    older, why_not = history_of(args, cluster, jobs, live)
    if why_not is not None:
        print(f"kubectl vigil: older executions from the history database are not shown: {why_not}", file=sys.stderr)
    if not objs and not older and args.output == "table":
        print(f'No executions of scheduledjob "{args.job}" in {where}.', file=sys.stderr)
        return 0
    headers, rows = execution_table(objs, now=datetime.now(UTC), with_namespace=args.all_namespaces, history=older)
    return emit(args, {"executions": table_data(headers, rows)}, lambda: render_table(headers, rows))


def history_count(text: str) -> int:
    """`--history N`: a whole number from 0 to MAX_HISTORY."""
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_HISTORY:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to {MAX_HISTORY}, not {text!r}")
    return int(text)


# --- describe EXECUTION -----------------------------------------------------------------------


def phase_since(ex: Execution) -> datetime:
    """When the execution entered its current phase."""
    if ex.finished_at is not None:  # terminal phases
        return ex.finished_at
    if ex.phase is Phase.RUNNING and ex.started_at is not None:
        return ex.started_at
    if ex.phase is Phase.BACKOFF and ex.attempts and ex.attempts[-1].finished_at is not None:
        return ex.attempts[-1].finished_at
    return ex.ready_since


def attempt_rows(ex: Execution, *, now: datetime, present: Collection[str] | None = None) -> list[list[object]]:
    """One row per recorded attempt, and one for the attempt running now (its pod named only if
    it is among the `present` ones, when they are known)."""
    rows = [_attempt_row(result) for result in ex.attempts]
    if ex.phase is Phase.RUNNING and not ex.recorded(ex.attempt):
        started = ex.started_at
        ran = precise_duration(now - started) if started is not None else None
        where = f"pod {ex.pod}" if present is None or ex.pod in present else "its pod is gone"
        rows.append([ex.attempt, RUNNING_OUTCOME, None, None, _time(started), None, ran, where])
    return rows


def _attempt_row(result: AttemptResult) -> list[object]:
    ran = None
    if result.started_at is not None and result.finished_at is not None:
        ran = precise_duration(result.finished_at - result.started_at)
    message = " ".join(result.message.split())  # one line per attempt
    return [
        result.attempt, result.outcome, result.reason, result.exit_code,
        _time(result.started_at), _time(result.finished_at), ran, message,
    ]  # fmt: skip


def describe_lines(obj: Mapping[str, Any], *, now: datetime, pods: Iterable[str] | None = None) -> list[str]:
    """The execution's timeline: what it is for, where it stands, then every attempt. With
    `pods` (the names of its pods that exist), where the current attempt's log is: its pod,
    or — the pod gone — the stored tail (never a dead pod named as if it were there)."""
    ex = read_execution(dict(obj))
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    since = phase_since(ex)
    fields: list[tuple[str, object]] = [
        ("Name", ex.execution_id),
        ("Namespace", ex.namespace),
        ("Job", ex.job),
        ("Source", spec.get("source") or DEFAULT_SOURCE),
        ("Scheduled for", format_time(ex.scheduled_for)),
        ("Period", f"{cell(spec.get('periodStart'))} → {cell(spec.get('periodEnd'))}"),
        ("Priority", ex.priority),
        ("Phase", f"{ex.phase} since {format_time(since)} ({relative(since, now)}), reason {cell(ex.reason)}"),
    ]
    if ex.retry_at is not None:
        fields.append(("Retry at", f"{format_time(ex.retry_at)} ({relative(ex.retry_at, now)})"))
    if spec.get("cancel") and not ex.phase.terminal:
        fields.append(("Cancel", f"requested ({cell(spec.get('cancelReason'))}); the operator stops it"))
    requests = int(spec.get("retryRequests") or 0)
    if requests:
        fields.append(("Retry requests", f"{requests} (acted on {int(status.get('observedRetryRequests') or 0)})"))
    if pods is not None and (ex.attempts or ex.phase is Phase.RUNNING):
        fields.append(pod_field(ex, pods))
    width = max(len(label) for label, _ in fields) + 2
    lines = [f"{label + ':':{width}}{value}" for label, value in fields]
    attempts = attempt_rows(ex, now=now, present=None if pods is None else set(pods))
    lines.append("")
    lines.extend(render_table(ATTEMPT_COLUMNS, attempts).splitlines() if attempts else ["Attempts: none yet"])
    return lines


def cmd_describe(args: argparse.Namespace) -> int:
    cluster = Cluster()
    namespace = cluster.namespace(args.namespace)
    obj = cluster.execution(args.execution, namespace)
    pods = pods_of(cluster, namespace, args.execution)
    return emit(args, obj, lambda: "\n".join(describe_lines(obj, now=datetime.now(UTC), pods=pods)))


# --- dead-letters -----------------------------------------------------------------------------


def dead_letter_table(objs: Iterable[Mapping[str, Any]], *, now: datetime) -> Table:
    """Dead executions (by status, whatever the label says), by namespace, job, then oldest first."""
    dead = [ex for _, ex in readable(objs) if ex.phase is Phase.DEAD]
    dead.sort(key=lambda ex: (ex.namespace, ex.job, ex.finished_at or now, ex.execution_id))
    rows: list[list[object]] = [
        [ex.namespace, ex.job, ex.execution_id, ex.attempt, ex.reason, human_duration(now - (ex.finished_at or now))]
        for ex in dead
    ]
    return list(DEAD_LETTER_COLUMNS), rows


def cmd_dead_letters(args: argparse.Namespace) -> int:
    cluster = Cluster()
    namespace = None if args.all_namespaces else cluster.namespace(args.namespace)
    every = cluster.executions.select(selector="", namespace=namespace)
    objs = [o for o in every if phase_of(o) == Phase.DEAD]
    headers, rows = dead_letter_table(objs, now=datetime.now(UTC))
    if not rows and args.output == "table":
        where = "any namespace" if namespace is None else f'namespace "{namespace}"'
        print(f"No dead executions in {where}.", file=sys.stderr)
        return 0
    return emit(args, {"deadLetters": table_data(headers, rows)}, lambda: render_table(headers, rows))


def _time(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


def add_parsers(sub: Any) -> None:
    """Register the verbs of this module on the CLI's subparsers."""
    ex = sub.add_parser("executions", help="a job's executions, newest first, older ones from the history database")
    ex.add_argument("job", help="a ScheduledJob")
    ex.add_argument(
        "--history", type=history_count, default=DEFAULT_HISTORY, metavar="N",
        help=f"also show up to N executions retention deleted, from the history database through the operator's "
        f"API (default {DEFAULT_HISTORY}; 0: do not ask)",
    )  # fmt: skip
    ex.add_argument(
        "--api-url", help="the operator's HTTP API, e.g. https://127.0.0.1:8080 after kubectl port-forward "
        "(default: $VIGIL_API_URL)",
    )  # fmt: skip
    add_tls_options(ex)
    add_namespace_options(ex, listing=True)
    add_output_option(ex)
    ex.set_defaults(func=cmd_executions)

    de = sub.add_parser("describe", help="an execution's timeline: every attempt and why it ended")
    de.add_argument("execution", help="an execution id (the Execution's name)")
    add_namespace_options(de)
    add_output_option(de)
    de.set_defaults(func=cmd_describe)

    dl = sub.add_parser("dead-letters", help="executions whose every attempt failed (phase Dead)")
    add_namespace_options(dl, listing=True)
    add_output_option(dl)
    dl.set_defaults(func=cmd_dead_letters)

