"""The volume tier's trigger for one shard: fire the due occurrences, insert each job's next one.

A pass, in one transaction per batch:

1. reads its shard's due bucket rows (fire_at <= now, fired_at IS NULL) with their
   jobs — only partitions whose minutes have come, through a partial index of the
   unfired rows, so the cost follows the due work and never the catalogue — and
   locks them with SKIP LOCKED (a second trigger of the same shard, in a failover
   overlap, takes other rows instead of waiting);
2. plans each with the pure core, exactly as the declarative tier does
   (`vigil.core.chain.plan_entry`: catch-up after an outage, jitter, daylight
   saving, the next occurrence) and renders the payloads with their periods;
3. applies the plans in one statement (sql/buckets.sql `trigger_apply`): the rows are
   marked only where still unfired, and the executions, next occurrences,
   Missed records and next_run updates are joined to the rows that statement
   marked. An occurrence fires only with its mark, its mark is set once, and its
   execution id (the core's, from job id and nominal time) is the executions
   table's primary key: two triggers cannot both fire it, and a crash between any
   two steps rolls all of them back.

A bad row fails alone. A rendered payload is checked before the write
(vigil.core.jsonvalues: NUL, lone surrogates, NaN, depth, size) and its occurrence
settles Failed with the reason. Should PostgreSQL still refuse a value (any
DataError), the statement runs in a savepoint, and a refused one is applied again
in halves, down to the row it refuses, which settles Failed alone (the reason on
its bucket row, the metric `vigil_queue_trigger_refused_total`); every other row
of the batch commits. The common case stays one statement; one bad row among
2,000 costs about two dozen. Never a batch retried forever, never a shard stopped.

`now` is a parameter everywhere. `run` is the loop an operator replica calls from a
thread for each shard it leads; it also keeps the partitions made (the buckets' hourly ones,
vigil.queue.partitions, and the attempts' daily ones, vigil.queue.attempt_days).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from vigil import pgconnect
from vigil.core import jsonvalues
from vigil.core.buckets import MINUTE, BucketEntry, Outcome, minute_of
from vigil.core.chain import (
    CatchUp,
    CatchUpPolicy,
    EntryPlan,
    Fire,
    JobView,
    Reason,
    Record,
    Unlaunched,
    plan_entry,
    settle_unlaunched,
)
from vigil.core.payload import PayloadError, occurrence_variables, render_payload
from vigil.core.recurring import cron_schedule
from vigil.core.schedule import GapPolicy, OverlapPolicy
from vigil.core.timeparse import require_aware
from vigil.core.trigger import seconds_to_next_pass
from vigil.queue import attempt_days, bounds, partitions
from vigil.queue.queries import QUERIES, checked_json

log = logging.getLogger(__name__)

#: Due rows planned and applied per transaction: large enough that the round trips amortise,
#: small enough that a transaction holds its row locks for tens of milliseconds.
DEFAULT_BATCH = 2000
#: Characters of a reason kept on a bucket row (PostgreSQL's message, a template's error).
REASON_MAX_CHARS = 1024


@dataclasses.dataclass
class PassReport:
    """What one pass did: executions inserted and occurrences ended otherwise, and the lateness."""

    fired: list[str] = dataclasses.field(default_factory=list)  # execution ids, in fire order
    missed: int = 0  # occurrences recorded Missed by the catch-up policy
    skipped: int = 0  # occurrences of deleted (or unreadable) jobs
    failed: int = 0  # occurrences whose payload could not be rendered, or was refused (below)
    refused: int = 0  # of those, rows PostgreSQL itself refused (a DataError), each settled Failed alone
    lost_races: int = 0  # rows another trigger marked first (planned here, applied there)
    lags: list[float] = dataclasses.field(default_factory=list)  # per fire: seconds from its fire_at to the pass's now
    #: The earliest unfired fire time ahead of the pass, in its minute or the next: `run` starts
    #: the next pass then rather than a whole interval later. None: nothing due that soon.
    next_fire: datetime | None = None

    def merge(self, other: PassReport) -> None:
        self.fired += other.fired
        self.missed += other.missed
        self.skipped += other.skipped
        self.failed += other.failed
        self.refused += other.refused
        self.lost_races += other.lost_races
        self.lags += other.lags


@dataclasses.dataclass(frozen=True)
class _Due:
    """A due bucket row and its job as read (job fields None when the job row is gone)."""

    row: dict[str, Any]

    @property
    def job_id(self) -> str:
        return str(self.row["job_id"])


class ShardTrigger:
    """The trigger of one shard on its own connection (see the module docstring)."""

    def __init__(
        self,
        dsn: str,
        *,
        shard: int,
        batch: int = DEFAULT_BATCH,
        attempts_retention_days: int = attempt_days.DEFAULT_RETENTION_DAYS,
    ) -> None:
        if shard < 0:
            raise ValueError(f"shard must not be negative, got {shard}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        if attempts_retention_days < 1:
            raise ValueError(f"attempts_retention_days must be at least 1, got {attempts_retention_days}")
        self.dsn = dsn
        self.shard = shard
        self.batch = batch
        self.attempts_retention_days = attempts_retention_days
        self._connection: psycopg.Connection[Any] | None = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def abort(self) -> None:
        """Break off whatever the connection is waiting for, from another thread.

        A database behind a proxy that stops forwarding (or a wedged pooler) acknowledges what
        is sent and answers nothing, and no timeout of libpq's ends that wait: keepalives are
        answered by the proxy. Shutting the socket down makes the waiting call fail at once
        (an OperationalError, as any cut connection), and `run` retries on a fresh connection.
        The server rolls the abandoned transaction back by itself (pgconnect's
        idle_in_transaction_session_timeout), so its row locks go too.
        """
        connection = self._connection
        if connection is None or connection.closed:
            return
        with contextlib.suppress(OSError, psycopg.Error):
            duplicate = socket.socket(fileno=os.dup(connection.pgconn.socket))
            with duplicate:
                duplicate.shutdown(socket.SHUT_RDWR)

    def connection(self) -> psycopg.Connection[Any]:
        if self._connection is None or self._connection.closed:
            self._connection = pgconnect.connect(self.dsn, autocommit=True)
        return self._connection

    def run_pass(self, *, now: datetime) -> PassReport:
        """Fire everything of this shard due at `now`, batch by batch, until a batch comes back short."""
        now = require_aware(now, name="now")
        report = PassReport()
        while True:
            done, read, marked = self._batch(now)
            report.merge(done)
            if read < self.batch or marked == 0:  # all read, or no progress (another trigger has them)
                report.next_fire = self._next_fire(now)
                return report

    def _next_fire(self, now: datetime) -> datetime | None:
        minute = minute_of(now)
        params = {"shard": self.shard, "now": now, "minute": minute, "horizon": minute + MINUTE}
        row = self.connection().execute(QUERIES["trigger_next"], params).fetchone()
        return row[0] if row else None

    def maintain(self, *, now: datetime, ahead: timedelta = partitions.DEFAULT_AHEAD) -> partitions.Maintenance:
        """Create partitions ahead and drop fully fired ones behind (one maintainer at a time)."""
        return partitions.maintain(self.connection(), now=now, ahead=ahead)

    def maintain_attempts(self, *, now: datetime) -> partitions.Maintenance:
        """Make the attempts' daily partitions, drop those past the retention (one maintainer at a time)."""
        return attempt_days.maintain(self.connection(), now=now, retention_days=self.attempts_retention_days)

    def _batch(self, now: datetime) -> tuple[PassReport, int, int]:
        """One transaction: read, plan and apply a batch; the report, the rows read and the rows marked."""
        connection = self.connection()
        with connection.transaction():
            cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
            rows = cursor.execute(
                QUERIES["trigger_due"],
                {"shard": self.shard, "now": now, "minute": minute_of(now), "limit": self.batch},
            ).fetchall()
            if not rows:
                return PassReport(), 0, 0
            planned = _within_quotas(connection, [_plan(_Due(row), now) for row in rows], now)
            applied, marked = _apply(connection, planned, now)
        report = _report(applied, marked, now)
        report.refused = sum(item.refused for item in applied)
        return report, len(rows), len(marked)


_Marked = set[tuple[str, datetime]]


def _apply(
    connection: psycopg.Connection[Any], planned: Sequence[_Planned], now: datetime
) -> tuple[list[_Planned], _Marked]:
    """Apply `planned` in one statement inside a savepoint; when PostgreSQL refuses a value in
    it, the two halves each the same way, down to a refused row, which settles Failed alone.

    The plans as applied (a refused row's settled) and the (job id, nominal) pairs marked."""
    try:
        with connection.transaction():  # a savepoint: a refusal undoes this statement only
            rows = connection.execute(QUERIES["trigger_apply"], _apply_params(planned, now)).fetchall()
        return list(planned), {(job_id, nominal) for job_id, nominal, _ in rows}
    except psycopg.errors.DataError as err:
        if len(planned) > 1:
            half = len(planned) // 2
            first, first_marked = _apply(connection, planned[:half], now)
            second, second_marked = _apply(connection, planned[half:], now)
            return first + second, first_marked | second_marked
        [item] = planned
        if not item.plan.fires:  # nothing of its own to drop: not a row's value; the pass fails
            raise
        why = f"the queue store refused the execution: {err.diag.message_primary}"
        if err.diag.message_detail:
            why += f" ({err.diag.message_detail})"
        log.warning("trigger: job %s occurrence %s settled Failed: %s", item.due.job_id, item.due.row["nominal"], why)
        return _apply(connection, [_refused(item, why, now)], now)


def _refused(item: _Planned, why: str, now: datetime) -> _Planned:
    """`item` with every fire settled Failed for `why`: a row with no payload left to refuse."""
    unlaunched: dict[str, Unlaunched] = {
        fire.execution_id: Unlaunched(Outcome.FAILED, Reason.LAUNCH_REFUSED, why) for fire in item.plan.fires
    }
    return _Planned(item.due, settle_unlaunched(item.plan, unlaunched, now=now), {}, refused=1)


def _within_quotas(connection: psycopg.Connection[Any], planned: Sequence[_Planned], now: datetime) -> list[_Planned]:
    """`planned` with the fires past their namespace's quota settled Failed (QuotaExceeded).

    Each namespace's fires are admitted in the batch's order (vigil.queue.bounds.admit: the
    longest prefix that fits), namespaces in sorted order, so two shards' triggers lock the
    counter rows in one order. In the batch's transaction: a rollback takes the admissions
    back; an occurrence another trigger marks first stays counted until the next recount.
    """
    offered: dict[str, list[tuple[int, str]]] = {}  # namespace -> (index in planned, execution id)
    for index, item in enumerate(planned):
        for fire in item.plan.fires:
            if fire.execution_id in item.payloads:
                offered.setdefault(bounds.namespace_of(item.due.row["queue"]), []).append((index, fire.execution_id))
    refused: dict[int, dict[str, Unlaunched]] = {}
    for namespace in sorted(offered):
        for index, execution, why in _over_quota(connection, namespace, planned, offered[namespace]):
            refused.setdefault(index, {})[execution] = Unlaunched(Outcome.FAILED, Reason.QUOTA_EXCEEDED, why)
    if not refused:
        return list(planned)
    log.warning("trigger: %d occurrence(s) settled Failed: QuotaExceeded", sum(map(len, refused.values())))
    return [
        _Planned(item.due, settle_unlaunched(item.plan, refused[index], now=now), item.payloads, item.refused)
        if index in refused else item
        for index, item in enumerate(planned)
    ]  # fmt: skip


def _over_quota(
    connection: psycopg.Connection[Any], namespace: str, planned: Sequence[_Planned], fires: Sequence[tuple[int, str]]
) -> list[tuple[int, str, str]]:
    """Admit `fires` of one namespace; the ones refused by its quota, each with why.

    In a savepoint: a payload PostgreSQL refuses (a DataError) fails the admission too, and then
    the fires are admitted one at a time, the refused one left out (`_apply` settles it Failed alone).
    """
    payloads = [checked_json(planned[index].payloads[execution]) for index, execution in fires]
    try:
        with connection.transaction():
            found = bounds.admit(connection, namespace, payloads)
    except psycopg.errors.DataError:
        over: list[tuple[int, str, str]] = []
        for (index, execution), payload in zip(fires, payloads, strict=True):
            try:
                with connection.transaction():
                    alone = bounds.admit(connection, namespace, [payload])
            except psycopg.errors.DataError:
                continue
            if alone.admitted == 0:
                over.append((index, execution, str(alone.refusal(namespace, whole=False))))
        return over
    why = str(found.refusal(namespace, whole=False))
    return [(index, execution, why) for index, execution in fires[found.admitted :]]


@dataclasses.dataclass(frozen=True)
class _Planned:
    """One due row's decisions, with the payloads of its fires rendered."""

    due: _Due
    plan: EntryPlan
    payloads: dict[str, str]  # execution id → payload JSON
    refused: int = 0  # 1: PostgreSQL refused its execution's row, and it was settled Failed


def _job_view(due: _Due) -> JobView | None:
    row = due.row
    if row["queue"] is None or not row["enabled"]:
        return None
    return row_view(row)


def row_view(row: Mapping[str, Any]) -> JobView:
    """The core's view of a catalogued job from its `jobs` columns (the trigger's and the chain
    repair's: `vigil.queue.repair`); ValueError for a row no validation would have let in."""
    return JobView(
        namespace=str(row["queue"]).partition("/")[0],
        name=str(row["job_id"]),
        uid=str(row["job_id"]),
        generation=1,
        schedule=cron_schedule(row["cron"], row["timezone"], GapPolicy(row["dst_gap"]), OverlapPolicy(row["dst_overlap"])),
        schedule_hash="",
        jitter=row["jitter"],
        catch_up=CatchUp(
            policy=CatchUpPolicy(row["catch_up_policy"]), window=row["catch_up_window"], limit=row["catch_up_limit"]
        ),
    )


def _plan(due: _Due, now: datetime) -> _Planned:
    row = due.row
    entry = BucketEntry(
        key="",
        namespace="",
        name=due.job_id,
        uid=due.job_id,
        generation=1,
        schedule_hash="",
        nominal=row["nominal"],
        fire_at=row["fire_at"],
    )
    try:
        job = _job_view(due)
    except ValueError:  # a row no validation would have let in (a zone tzdata no longer has)
        return _Planned(due, plan_entry(entry, None, now=now, invalid=True), {})
    plan = plan_entry(entry, job, now=now)
    payloads: dict[str, str] = {}
    refused: dict[str, Unlaunched] = {}
    for fire in plan.fires:
        try:
            payloads[fire.execution_id] = _payload(row, fire)
        except (PayloadError, jsonvalues.UnsafeValue) as err:
            refused[fire.execution_id] = Unlaunched(Outcome.FAILED, Reason.LAUNCH_REFUSED, str(err))
    return _Planned(due, settle_unlaunched(plan, refused, now=now), payloads)


def _payload(row: dict[str, Any], fire: Fire) -> str:
    occurrence = fire.occurrence
    variables = occurrence_variables(
        period_start=occurrence.period_start,
        period_end=occurrence.period_end,
        scheduled_for=occurrence.nominal,
        execution_id=fire.execution_id,
        job_name=fire.job.name,
        job_namespace=fire.job.namespace,
    )
    rendered = render_payload(
        payload=row["payload"], template=row["payload_template"], variables=variables, timezone=row["timezone"],
        monotonic=time.monotonic,  # the render's wall-clock budget (vigil.core.templatebudget)
    )
    jsonvalues.check_text(rendered, path="payload")  # what the store would refuse, refused here
    return rendered


_OUTCOMES = {Outcome.FIRED, Outcome.MISSED, Outcome.SKIPPED, Outcome.FAILED}


def _apply_params(planned: Sequence[_Planned], now: datetime) -> dict[str, Any]:
    heads: dict[str, list[Any]] = {
        key: [] for key in ("job_ids", "nominals", "minutes", "outcomes", "mark_ids", "next_runs", "reasons")
    }
    fires: dict[str, list[Any]] = {
        key: []
        for key in (
            "fire_job_ids", "fire_heads", "fire_ids", "fire_queues", "fire_tasks", "fire_payloads",
            "fire_priorities", "fire_tenants", "fire_max_attempts", "fire_run_afters", "fire_scheduled",
        )
    }
    rows: dict[str, list[Any]] = {
        key: []
        for key in (
            "row_job_ids", "row_heads", "row_minutes", "row_shards", "row_nominals", "row_fire_ats",
            "row_fired_ats", "row_outcomes", "row_execution_ids", "row_reasons",
        )
    }
    for item in planned:
        _add_head(heads, item)
        _add_fires(fires, item)
        _add_rows(rows, item, now)
    minutes = heads["minutes"]
    return {"now": now, "low": min(minutes), "high": max(minutes), **heads, **fires, **rows}


def _add_head(heads: dict[str, list[Any]], item: _Planned) -> None:
    row, plan = item.due.row, item.plan
    outcome = plan.mark.outcome if plan.mark.outcome in _OUTCOMES else Outcome.SKIPPED
    heads["job_ids"].append(item.due.job_id)
    heads["nominals"].append(row["nominal"])
    heads["minutes"].append(row["minute"])
    heads["outcomes"].append(str(outcome))
    heads["mark_ids"].append(plan.mark.execution_id)
    heads["next_runs"].append(plan.insert.nominal if plan.insert is not None else None)
    record = next((r for r in plan.records if r.occurrence.nominal == row["nominal"]), None)
    heads["reasons"].append(_reason(record) if record is not None else (plan.mark.reason or None))


def _add_fires(fires: dict[str, list[Any]], item: _Planned) -> None:
    row = item.due.row
    for fire in item.plan.fires:
        fires["fire_job_ids"].append(item.due.job_id)
        fires["fire_heads"].append(row["nominal"])
        fires["fire_ids"].append(fire.execution_id)
        fires["fire_queues"].append(row["queue"])
        fires["fire_tasks"].append(row["task"])
        fires["fire_payloads"].append(checked_json(item.payloads[fire.execution_id]))
        fires["fire_priorities"].append(row["priority"])
        fires["fire_tenants"].append(row["tenant"])
        fires["fire_max_attempts"].append(row["max_attempts"])
        fires["fire_run_afters"].append(fire.occurrence.fire_at)
        fires["fire_scheduled"].append(fire.occurrence.nominal)


def _add_rows(rows: dict[str, list[Any]], item: _Planned, now: datetime) -> None:
    """The next occurrence (unfired) and the records of occurrences ended without firing."""
    head, plan = item.due.row, item.plan

    def add(
        nominal: datetime,
        fire_at: datetime,
        fired_at: datetime | None,
        outcome: str | None,
        execution: str | None,
        reason: str | None = None,
    ) -> None:
        rows["row_job_ids"].append(item.due.job_id)
        rows["row_heads"].append(head["nominal"])
        rows["row_minutes"].append(minute_of(fire_at))
        rows["row_shards"].append(head["shard"])
        rows["row_nominals"].append(nominal)
        rows["row_fire_ats"].append(fire_at)
        rows["row_fired_ats"].append(fired_at)
        rows["row_outcomes"].append(outcome)
        rows["row_execution_ids"].append(execution)
        rows["row_reasons"].append(reason)

    if plan.insert is not None:
        add(plan.insert.nominal, plan.insert.fire_at, None, None, None)
    seen = {head["nominal"]}
    for fire in plan.fires:  # a catch-up batch fires occurrences that had no row: record them
        if fire.occurrence.nominal not in seen:
            seen.add(fire.occurrence.nominal)
            add(fire.occurrence.nominal, fire.occurrence.fire_at, now, str(Outcome.FIRED), fire.execution_id)
    for record in plan.records:
        outcome = record.outcome if record.outcome in _OUTCOMES else Outcome.SKIPPED
        if record.occurrence.nominal not in seen:
            seen.add(record.occurrence.nominal)
            add(record.occurrence.nominal, record.occurrence.fire_at, now, str(outcome), None, _reason(record))


def _reason(record: Record) -> str:
    """A record's reason as its bucket row keeps it: "Reason: message", cut, plain text only."""
    text = f"{record.reason}: {record.message}" if record.message else str(record.reason)
    text = text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode()
    return text[:REASON_MAX_CHARS]


def _report(planned: Sequence[_Planned], marked: set[tuple[str, datetime]], now: datetime) -> PassReport:
    report = PassReport()
    for item in planned:
        if (item.due.job_id, item.due.row["nominal"]) not in marked:
            report.lost_races += 1
            continue
        report.fired += [fire.execution_id for fire in item.plan.fires]
        report.lags += [(now - fire.occurrence.fire_at).total_seconds() for fire in item.plan.fires]
        for record in item.plan.records:
            if record.outcome is Outcome.MISSED:
                report.missed += 1
            elif record.outcome is Outcome.FAILED:
                report.failed += 1
            else:
                report.skipped += 1
    return report


def run(
    trigger: ShardTrigger,
    *,
    clock: Callable[[], datetime],
    stop: threading.Event,
    interval: timedelta = timedelta(milliseconds=250),
    maintain_every: timedelta = timedelta(minutes=1),
    on_pass: Callable[[PassReport], None] | None = None,
    on_error: Callable[[], None] | None = None,
    pass_deadline: timedelta = timedelta(seconds=30),
    on_unreachable: Callable[[], None] | None = None,
    unreachable_after: timedelta = timedelta(seconds=60),
    reachable: Callable[[], bool] = lambda: False,
) -> None:
    """Run `trigger` until `stop` is set: a pass every `interval`, or sooner when the last pass
    said an occurrence comes due before that (`PassReport.next_fire`; passes at least
    `core.trigger.MIN_PASS_GAP` apart), partition upkeep (buckets and attempts) every `maintain_every`.

    For a thread of an operator replica that leads the shard. A failed pass (the database
    restarting, or anything else) is logged and retried on the next tick on a fresh connection:
    its transaction rolled back, so nothing was half done. A pass still waiting on the database
    after `pass_deadline` (every pass takes milliseconds; only a connection that went silent takes
    that long) is broken off (`ShardTrigger.abort`), so the thread never hangs on a dead path.
    When every pass has failed on the connection for `unreachable_after`, and a fresh connection
    cannot reach the store either (`reachable()`: a pass may also fail because it waited on locks a
    cut-off replica still holds), `on_unreachable` is called once (the operator hands its shards to
    a replica that reaches the store); the loop goes on trying until it is stopped.
    """
    maintained: datetime | None = None
    failing_since: datetime | None = None  # the first of an unbroken run of failed passes
    watch = PassWatch(pass_deadline, trigger.abort, name=f"trigger-shard-{trigger.shard}-deadline")
    try:
        while not stop.is_set():
            now = clock()
            wait = interval.total_seconds()
            try:
                with watch.armed():
                    if maintained is None or now - maintained >= maintain_every:
                        trigger.maintain(now=now)
                        trigger.maintain_attempts(now=now)
                        maintained = now
                    report = trigger.run_pass(now=now)
                if report.missed or report.failed:  # rows, not objects: no Events; the log and the metric say it
                    log.warning(
                        "trigger shard %d: %d occurrence(s) recorded Missed by their catch-up policy, %d Failed "
                        "(payload template, or a value the store refused: %d)", trigger.shard, report.missed,
                        report.failed, report.refused,
                    )  # fmt: skip
                failing_since = None
                if on_pass is not None:
                    on_pass(report)
                wait = seconds_to_next_pass(interval=wait, next_fire=report.next_fire, now=clock())
            except psycopg.OperationalError as err:  # the database restarting, a cut connection
                log.warning("trigger shard %d: %s; retrying on a fresh connection", trigger.shard, err)
                trigger.close()
                if on_error is not None:
                    on_error()
                failing_since = failing_since or now
                if on_unreachable is not None and now - failing_since >= unreachable_after and not reachable():
                    log.warning("trigger shard %d: the queue store unreachable for %s", trigger.shard, now - failing_since)
                    on_unreachable()
                    on_unreachable = None  # once per loop: the replica withdraws, and stops this loop
            except Exception:  # never let the shard's thread die while its Lease is held
                log.exception("trigger shard %d: pass failed; retrying next tick", trigger.shard)
                trigger.close()
                if on_error is not None:
                    on_error()
            stop.wait(wait)
    finally:
        watch.close()
        trigger.close()



class PassWatch:
    """Breaks off a pass that outlives its deadline: one watcher thread per shard's loop.

    `run` arms it around each pass (`with watch.armed():`); the watcher, waiting on a condition,
    calls `abort` once the armed pass is older than `limit`. One thread for the loop's life, not
    a timer per pass (passes come every 250 ms).
    """

    def __init__(self, limit: timedelta, abort: Callable[[], None], *, name: str) -> None:
        self._limit = limit.total_seconds()
        self._abort = abort
        self._changed = threading.Condition()
        self._due: float | None = None  # monotonic deadline of the armed pass
        self._ended = False
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        with self._changed:
            self._due = time.monotonic() + self._limit
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._due = None

    def close(self) -> None:
        with self._changed:
            self._ended = True
            self._changed.notify()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        with self._changed:
            while not self._ended:
                if self._due is None:
                    self._changed.wait()
                elif time.monotonic() < self._due:
                    self._changed.wait(self._due - time.monotonic())
                else:
                    log.warning("a trigger pass outlived its %.0fs deadline: breaking its connection off", self._limit)
                    self._due = None
                    self._abort()
