"""`vigil` / `kubectl vigil`: run the operator, and ask it questions.

    vigil operator --config FILE          run the operator (what the Deployment runs)
    vigil watchdog --config FILE          run the watchdog alone (its own Deployment)
    kubectl vigil next -f FILE|JOB [--from RFC3339] [--count N]
                                          the next occurrences (no cluster needed with -f)
    kubectl vigil occurrences JOB         the trigger ledger: each occurrence's outcome
    kubectl vigil executions JOB [--history N]
                                          the job's executions, newest first, with older ones
                                          from the history database (VIGIL_API_URL)
    kubectl vigil describe EXECUTION      an execution's timeline, attempt by attempt
    kubectl vigil logs JOB|EXECUTION|WF STEP [--attempt N] [-f]
                                          an attempt's log: its pod's, or the tail stored once
                                          the pod is gone (VIGIL_API_URL)
    kubectl vigil dead-letters [-A]       executions whose every attempt failed
    kubectl vigil retry EXECUTION         run a dead execution once more (same execution id)
    kubectl vigil cancel EXECUTION|JOB    cancel an execution, or all in-flight ones of a job (and its workflows)
    kubectl vigil backfill JOB --from DATE --to DATE [--dry-run]
                                          create the executions of past occurrences
    kubectl vigil approve|reject WF STEP --reason TEXT
                                          decide a workflow's approval step
    kubectl vigil retry WF STEP [--reason TEXT]
                                          run a failed workflow step again
    kubectl vigil complete WF STEP --output JSON [--reason TEXT]
                                          finish a workflow step by hand
    kubectl vigil cancel [--workflow] WF [--reason TEXT]
                                          cancel a workflow
    kubectl vigil timeline WF [--events]  a workflow's steps (or its whole history); a deleted
                                          one's from the history database (VIGIL_API_URL)
    kubectl vigil queue stats [NAME]      TaskQueues' statuses, and per priority and tenant
    kubectl vigil queue jobs|dead-letters NAME [--limit N] [--continue TOKEN] [-o json|yaml]
                                          a TaskQueue's jobs or dead executions, a page at a time
    kubectl vigil queue retry NAME EXECUTION...|--all-dead
                                          run a TaskQueue's dead executions again (the queue
                                          verbs ask the operator's API: VIGIL_API_URL)
    kubectl vigil run JOB [--request-id ID]   run a job now, outside its schedule (once per request id)
    kubectl vigil suspend JOB --reason TEXT   stop a job firing, in your name; `resume JOB` undoes it
    kubectl vigil completion bash|zsh     a shell completion script
    kubectl vigil console                 the operator's web console, through a port-forward
    vigil worker --queue NS/NAME --tasks MODULE...
                                          run a volume-tier worker (`vigil worker --help`)

Global flags, before the verb: --kubeconfig FILE, --context NAME, --as USER
[--as-group GROUP] (kubectl's), and --request-timeout. Verbs that print take
-o table|json|yaml.

Installed as `kubectl-vigil`, kubectl finds it as a plugin. Verbs that read the
cluster take -n/--namespace (default: the kubeconfig context's namespace).
Every input the command cannot use — a file, a name, a date, a refused action —
ends with one line on stderr and exit code 2. What the API server, its
admission or the operator turns down ends with one line and exit code 1. The
workflow verbs wait for the operator to record the request (--no-wait not to).

`operator` and `watchdog` are parsed here but run by the entry point
(`vigil.__main__`), which passes them in as `serve`: the CLI never imports the
operator's composition root. `worker` is parsed here only so that `--help`
lists it: the entry point runs it before the CLI is imported.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml

from vigil.cli import (
    backfill,
    console,
    executions,
    interventions,
    logs,
    queues,
    timeline,
    watch,
    workflows,
)
from vigil.cli.cluster import (
    REQUEST_TIMEOUT_SECONDS,
    Cluster,
    Connection,
    add_namespace_options,
    parse_timeout,
    set_connection,
    set_request_timeout,
)
from vigil.cli.completion import add_parsers as add_completion
from vigil.cli.errors import EXIT_API_FAILURE, EXIT_BAD_INPUT, BadInput, api_failure
from vigil.cli.jobcontrol import add_parsers as add_job_control
from vigil.cli.output import add_output_option, emit
from vigil.core.schedule import next_occurrences, occurrence_at
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.model.jobspec import InvalidJob, job_view

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
__all__ = ["EXIT_BAD_INPUT", "BadInput", "main", "parser"]  # tests and scripts import these from here


def _read_documents(path: str) -> list[Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        return list(yaml.safe_load_all(text))
    except OSError as err:
        raise BadInput(f"{path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise BadInput(f"{path}: not valid YAML: {err}") from None


def _load_file(path: str) -> dict[str, Any]:
    docs = [d for d in _read_documents(path) if isinstance(d, dict) and d.get("kind") == "ScheduledJob"]
    if not docs:
        raise BadInput(f"{path}: no ScheduledJob found (no document has kind: ScheduledJob)")
    obj = docs[0]
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", PLACEHOLDER_UID)
    meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
    meta.setdefault("generation", 1)
    return dict(obj)


def _fetch_job(name: str, namespace: str | None) -> dict[str, Any]:
    cluster = Cluster()
    return cluster.job(name, cluster.namespace(namespace))


def cmd_next(args: argparse.Namespace) -> int:
    obj = _load_file(args.file) if args.file else _fetch_job(args.job, args.namespace)
    try:
        view, spec = job_view(obj)
        start = parse_rfc3339(args.start) if args.start else datetime.now(UTC)
    except InvalidJob as err:
        raise BadInput(f"invalid ScheduledJob: {err}") from None
    except ValueError as err:
        raise BadInput(f"--from: {err}") from None
    zone = spec.timezone
    lines = [f"{'NOMINAL (UTC)':22} {'FIRE AT (UTC)':26} {'LOCAL (' + zone + ')':28} PERIOD START (UTC)"]
    data = []
    for nominal in next_occurrences(view.schedule, start, count=args.count):
        occ = occurrence_at(view.schedule, nominal, jitter=view.offset)
        local = nominal.astimezone(ZoneInfo(zone)).isoformat()
        fire = occ.fire_at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        lines.append(f"{format_rfc3339(nominal):22} {fire:26} {local:28} {format_rfc3339(occ.period_start)}")
        data.append({"nominal": nominal, "fireAt": fire, "local": local,
                     "periodStart": occ.period_start, "periodEnd": occ.period_end})  # fmt: skip
    if args.file and view.jitter:
        lines.append(f"(jitter window {view.jitter}; the offset depends on the job's uid, known once applied)")
    return emit(args, {"timezone": zone, "occurrences": data}, "\n".join(lines))


def cmd_occurrences(args: argparse.Namespace) -> int:
    obj = _fetch_job(args.job, args.namespace)
    ledger = (obj.get("status") or {}).get("occurrences") or []
    lines = [f"{'NOMINAL':22} {'OUTCOME':11} {'EXECUTION':22} {'AT':22} REASON"]
    lines += [
        f"{entry.get('nominal', ''):22} {entry.get('outcome', ''):11} {entry.get('executionId', '-'):22} "
        f"{entry.get('at', ''):22} {entry.get('reason', '')}"
        for entry in ledger
    ]
    return emit(args, {"occurrences": ledger}, "\n".join(lines))


#: Runs `operator` or `watchdog` with the config file given (if any); the entry point's.
Serve = Callable[[str, Path | None], int]
RUNTIME_VERBS = ("operator", "watchdog")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubectl vigil", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--request-timeout",
        type=parse_timeout,
        default=REQUEST_TIMEOUT_SECONDS,
        metavar="DURATION",
        help=f"give up on an API request after this long (30, 30s or 2m; default {REQUEST_TIMEOUT_SECONDS:g}s)",
    )
    p.add_argument("--kubeconfig", metavar="FILE", help="the kubeconfig to use (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", metavar="NAME", help="the kubeconfig context to use (default: its current-context)")
    p.add_argument("--as", dest="impersonate", metavar="USER", help="act as this user (kubectl's --as)")
    p.add_argument("--as-group", dest="impersonate_group", metavar="GROUP", help="with --as: as a member of this group")
    sub = p.add_subparsers(dest="command", required=True)

    for verb, text in (("operator", "run the operator"), ("watchdog", "run the watchdog alone (its own Deployment)")):
        run = sub.add_parser(verb, help=text)
        run.add_argument("--config", type=Path, help="the operator's config.yaml")
    worker = sub.add_parser("worker", help="run a volume-tier worker: vigil worker --help", add_help=False)
    worker.add_argument("worker_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    nx = sub.add_parser("next", help="print the next occurrences of a job")
    nx.add_argument("job", nargs="?", help="a ScheduledJob in the cluster")
    nx.add_argument("-f", "--file", help="a ScheduledJob manifest (no cluster needed); - for stdin")
    nx.add_argument("--from", dest="start", help="start after this RFC 3339 time (default: now)")
    nx.add_argument("--count", type=int, default=5)
    add_namespace_options(nx)
    add_output_option(nx)
    nx.set_defaults(func=cmd_next)

    oc = sub.add_parser("occurrences", help="the trigger ledger of a job")
    oc.add_argument("job")
    add_namespace_options(oc)
    add_output_option(oc)
    oc.set_defaults(func=cmd_occurrences)

    executions.add_parsers(sub)
    logs.add_parsers(sub)
    interventions.add_parsers(sub)
    workflows.add_parsers(sub)
    timeline.add_parsers(sub)
    backfill.add_parsers(sub)
    watch.add_parsers(sub)
    queues.add_parsers(sub)
    console.add_parsers(sub)
    add_job_control(sub)  # run, suspend, resume
    add_completion(sub, root=p)
    return p


def main(argv: Sequence[str] | None = None, *, serve: Serve | None = None) -> int:
    """Run one verb; `operator` and `watchdog` go to `serve` (the entry point's), the rest run here."""
    args = parser().parse_args(argv)
    if args.command == "next" and not (args.file or args.job):
        parser().error("next: give a JOB name or -f FILE")
    try:
        set_request_timeout(args.request_timeout)
        set_connection(Connection(args.kubeconfig, args.context, args.impersonate, args.impersonate_group))
        if args.command == "worker":
            raise BadInput("worker: run it as `vigil worker` (or `python -m vigil worker`)")
        if args.command in RUNTIME_VERBS:
            if serve is None:
                raise BadInput(f"{args.command}: run it as `vigil {args.command}` (or `python -m vigil {args.command}`)")
            return serve(args.command, args.config)
        return int(args.func(args))
    except BadInput as err:
        print(f"kubectl vigil: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as err:
        failure = api_failure(err)
        if failure is None:
            raise  # a bug: keep the traceback
        print(f"kubectl vigil: {failure}", file=sys.stderr)
        return EXIT_API_FAILURE


if __name__ == "__main__":
    # `python -m vigil.cli.main` is the older spelling of `python -m vigil`: become that program
    # (same process id, same environment), so every command line written for it keeps working.
    os.execv(sys.executable, [sys.executable, "-m", "vigil", *sys.argv[1:]])
