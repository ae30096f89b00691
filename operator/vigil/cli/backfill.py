"""`kubectl vigil backfill JOB --from DATE --to DATE`: run a job for occurrences of the past.

Each occurrence of the job's schedule with its nominal time in [from, to] gets
an Execution exactly like the one the trigger would have created: the same
execution id (a function of the job uid and the nominal time), the same period,
marked `source: Backfill`. Because the name is the id, creating one that
exists — by an earlier backfill or by the trigger itself — is a 409 and counts
as "already existed": a backfill run twice creates nothing new, and never a
second run of an occurrence. The executions are Ready on creation; the
operator's dispatcher starts them within the namespace's share of capacity. Only a job that runs
a pod template is backfilled this way: a `workflowTemplate` or `task:` job's occurrences are not
Execution objects, and backfill refuses them (exit 2), as `run` does, rather than create
Executions that could never start.

A DATE (YYYY-MM-DD) means whole days on the job's own clock (its `timezone`),
`--to`'s day included; an RFC 3339 instant means exactly that instant. The
range and occurrence arithmetic below is pure and clock-free.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import re
import sys
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from vigil.cli.cluster import Cluster, add_namespace_options
from vigil.cli.errors import BadInput
from vigil.cli.jobcontrol import run_refusal
from vigil.cli.output import add_output_option, emit
from vigil.cli.tables import render_table
from vigil.core.chain import JobView
from vigil.core.ids import ExecutionId, execution_id
from vigil.core.schedule import (
    RESOLUTION,
    Occurrence,
    Schedule,
    load_zone,
    occurrence_at,
    occurrences_between,
)
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.kube.stores.executions import execution_body
from vigil.model.execution import ExecutionSource
from vigil.model.jobspec import InvalidJob, job_view
from vigil.model.names import LABEL_JOB_UID

DEFAULT_LIMIT = 1000  # occurrences per backfill; more needs an explicit --limit
DATE_FORMAT = re.compile(r"\d{4}-\d{2}-\d{2}")
CREATED, EXISTED, WOULD_CREATE = "created", "already exists", "would create"
COLUMNS = ["SCHEDULED", "PERIOD START", "PERIOD END", "EXECUTION", "RESULT"]
_ONE_DAY = timedelta(days=1)


class TooManyOccurrences(ValueError):
    """The range holds more occurrences than the limit allows."""


@dataclasses.dataclass(frozen=True)
class NominalRange:
    """Nominal times from `first` to `last`, both included (UTC, whole seconds)."""

    first: datetime
    last: datetime


@dataclasses.dataclass(frozen=True)
class Planned:
    occurrence: Occurrence
    execution_id: ExecutionId


# --- pure: the range and its occurrences ------------------------------------------------------


def start_of_day(day: date, timezone: str) -> datetime:
    """The first instant of `day` on the clock of `timezone`, in UTC.

    Where midnight itself is skipped by a daylight-saving jump, this is the
    instant of the jump (PEP 495: a missing time maps with the earlier offset).
    """
    return datetime.combine(day, time(0), tzinfo=load_zone(timezone)).astimezone(UTC)


def parse_bound(text: str, *, timezone: str, end: bool) -> datetime:
    """One end of the range: a DATE's first (or, for --to, last) second, or an RFC 3339 instant."""
    if DATE_FORMAT.fullmatch(text):
        try:
            day = date.fromisoformat(text)
            return start_of_day(day + _ONE_DAY, timezone) - RESOLUTION if end else start_of_day(day, timezone)
        except (ValueError, OverflowError) as err:
            raise ValueError(f"invalid date {text!r}: {err}") from None
    try:
        instant = parse_rfc3339(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a date (YYYY-MM-DD) nor an RFC 3339 instant (like 2026-08-01T02:00:00Z)"
        ) from None
    whole = instant.replace(microsecond=0)  # occurrences are whole seconds: round inwards
    return whole + RESOLUTION if whole < instant and not end else whole


def nominal_range(start: str, end: str, *, timezone: str) -> NominalRange:
    """[--from, --to] as instants; ValueError for a bad bound or --from after --to."""
    first = parse_bound(start, timezone=timezone, end=False)
    last = parse_bound(end, timezone=timezone, end=True)
    if first > last:
        raise ValueError(
            f"--from {start} ({format_rfc3339(first)}) is after --to {end} ({format_rfc3339(last)})"
        )
    return NominalRange(first=first, last=last)


def nominals_in(schedule: Schedule, span: NominalRange, *, limit: int) -> list[datetime]:
    """The schedule's nominal times in the range, oldest first; TooManyOccurrences beyond `limit`."""
    found = occurrences_between(schedule, span.first - RESOLUTION, span.last)
    nominals = list(itertools.islice(found, limit + 1))
    if len(nominals) > limit:
        raise TooManyOccurrences(
            f"more than {limit} occurrences from {format_rfc3339(span.first)} to {format_rfc3339(span.last)}; "
            "narrow the range or raise --limit"
        )
    return nominals


def plan_backfill(view: JobView, span: NominalRange, *, limit: int) -> list[Planned]:
    """Each occurrence in the range with its period and its execution id."""
    return [
        Planned(occurrence_at(view.schedule, nominal, jitter=view.offset), execution_id(view.uid, nominal))
        for nominal in nominals_in(view.schedule, span, limit=limit)
    ]


def result_table(planned: list[Planned], results: list[str]) -> str:
    rows: list[list[object]] = [
        [format_rfc3339(p.occurrence.nominal), format_rfc3339(p.occurrence.period_start),
         format_rfc3339(p.occurrence.period_end), p.execution_id, result]
        for p, result in zip(planned, results, strict=True)
    ]  # fmt: skip
    return render_table(COLUMNS, rows)


def summary(results: list[str], *, dry_run: bool) -> str:
    existed = results.count(EXISTED)
    if dry_run:
        return f"dry run: would create {results.count(WOULD_CREATE)}, already existed {existed} (nothing was created)"
    return f"created {results.count(CREATED)}, already existed {existed}"


# --- against the cluster ----------------------------------------------------------------------


def create_executions(cluster: Cluster, job: dict[str, Any], planned: list[Planned]) -> list[str]:
    """Create each execution; a 409 means it exists already (same id, same occurrence)."""
    results = []
    for p in planned:
        body = execution_body(
            job=job,
            execution_id=p.execution_id,
            scheduled_for=p.occurrence.nominal,
            period_start=p.occurrence.period_start,
            period_end=p.occurrence.period_end,
            source=str(ExecutionSource.BACKFILL),
        )
        results.append(CREATED if cluster.executions.create(body) else EXISTED)
    return results


def preview(cluster: Cluster, job: dict[str, Any], planned: list[Planned]) -> list[str]:
    """What a backfill would do, from one list of the job's executions."""
    meta = job["metadata"]
    existing = cluster.executions.select(selector=f"{LABEL_JOB_UID}={meta['uid']}", namespace=meta["namespace"])
    names = {obj["metadata"]["name"] for obj in existing}
    return [EXISTED if p.execution_id in names else WOULD_CREATE for p in planned]


def cmd_backfill(args: argparse.Namespace) -> int:
    cluster = Cluster()
    namespace = cluster.namespace(args.namespace)
    job = cluster.job(args.job, namespace)
    refusal = run_refusal(job, "backfill")
    if refusal:
        raise BadInput(refusal)
    try:
        view, spec = job_view(job)
        span = nominal_range(args.start, args.end, timezone=spec.timezone)
        planned = plan_backfill(view, span, limit=args.limit)
    except InvalidJob as err:
        raise BadInput(f'scheduledjob "{args.job}" in namespace "{namespace}" is invalid: {err}') from None
    except ValueError as err:
        raise BadInput(f"backfill {args.job}: {err}") from None
    _warn_about_future(planned, now=datetime.now(UTC))
    results = preview(cluster, job, planned) if args.dry_run else create_executions(cluster, job, planned)
    lines = [f"scheduledjob {args.job} ({spec.timezone}): {len(planned)} occurrence(s) "
             f"from {format_rfc3339(span.first)} to {format_rfc3339(span.last)}"]  # fmt: skip
    if planned:
        lines.append(result_table(planned, results))
    lines.append(summary(results, dry_run=args.dry_run))
    data = {
        "job": args.job, "timezone": spec.timezone, "from": span.first, "to": span.last, "dryRun": args.dry_run,
        "occurrences": [
            {"scheduled": p.occurrence.nominal, "periodStart": p.occurrence.period_start,
             "periodEnd": p.occurrence.period_end, "executionId": p.execution_id, "result": result}
            for p, result in zip(planned, results, strict=True)
        ],
    }  # fmt: skip
    return emit(args, data, "\n".join(lines))


def _warn_about_future(planned: list[Planned], *, now: datetime) -> None:
    future = sum(p.occurrence.nominal > now for p in planned)
    if future:
        print(f"note: {future} occurrence(s) are still in the future; backfilled, they run now, "
              "not at their scheduled time", file=sys.stderr)  # fmt: skip


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_parsers(sub: Any) -> None:
    """Register the verb of this module on the CLI's subparsers."""
    bf = sub.add_parser("backfill", help="create the executions of past occurrences (idempotent)")
    bf.add_argument("job", help="a ScheduledJob")
    bf.add_argument("--from", dest="start", metavar="DATE", required=True, help="YYYY-MM-DD (in the job's timezone) or RFC 3339")
    bf.add_argument("--to", dest="end", metavar="DATE", required=True, help="YYYY-MM-DD (that day included) or RFC 3339")
    bf.add_argument("--dry-run", action="store_true", help="list what would be created; create nothing")
    bf.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT,
                    help=f"refuse more occurrences than this (default {DEFAULT_LIMIT})")  # fmt: skip
    add_namespace_options(bf)
    add_output_option(bf)
    bf.set_defaults(func=cmd_backfill)
