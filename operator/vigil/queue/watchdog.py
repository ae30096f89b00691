"""The watchdog over the volume tier: overdue recurring jobs, broken chains, dead letters and
waiting work, read from the queue store in four statements a pass, whatever the catalogue's size,
and a fifth that leaves each declared queue's share of the verdicts in the store
(`watch_summaries`), where the TaskQueue pass reads its `JobsOverdue` and `ChainBroken`
conditions — wherever this runs (the trigger leader or `vigil watchdog`), and never per job.

The statements (sql/watchdog.sql, and sql/buckets.sql `integrity_broken_chains`) return rows only
for what is in trouble, at most `cap` jobs per verdict (each queue's first before any queue's
second) with each queue's count, so a million healthy jobs cost PostgreSQL index probes and
Python nothing. The verdicts are the declarative tier's rules (`vigil.core.queuewatch`
feeds them). Volume-tier jobs are rows, not Kubernetes objects, so they get no Events: a
job's trouble is logged at WARNING when it starts and at INFO when it ends, and the
report goes to `publish` (the metrics, handed in by the runtime). With `repair` (the
settings' `audit.repair`, the declarative tier's switch) an audit pass also re-enters each
broken chain it found (`vigil.queue.repair`), two statements more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from vigil import pgconnect
from vigil.core.ports import Clock
from vigil.core.queue import QueueUnavailable
from vigil.core.queuewatch import (
    DEFAULT_SERIES_CAP,
    RECENT_EXECUTIONS,
    Episodes,
    JobVerdict,
    QueueJobFacts,
    QueueWatchReport,
    broken_chain_verdicts,
    dead_letters,
    oldest_ready_ages,
    overdue_verdicts,
    summarise,
)
from vigil.core.watchdog import FindingKind
from vigil.queue.queries import QUERIES
from vigil.queue.repair import repair_chains

log = logging.getLogger(__name__)

OVERDUE = str(FindingKind.OVERDUE)
CHAIN_BROKEN = str(FindingKind.SCHEDULE_CHAIN_BROKEN)


def _no_publish(report: QueueWatchReport) -> None:
    return None


class QueueWatchdog:
    def __init__(
        self,
        dsn: str,
        *,
        clock: Clock,
        cap: int = DEFAULT_SERIES_CAP,
        publish: Callable[[QueueWatchReport], None] = _no_publish,
        connect: Callable[[], psycopg.Connection[Any]] | None = None,
        repair: bool = False,
    ) -> None:
        if cap < 1:
            raise ValueError(f"cap must be at least 1, got {cap}")
        self._connect = connect or (lambda: pgconnect.connect(dsn, autocommit=True))
        self._clock = clock
        self._cap = cap
        self._publish = publish
        self._episodes = Episodes()
        self._repair = repair

    def check(self, *, audit: bool = True) -> QueueWatchReport:
        """One pass: read, judge, repair the broken chains (with `repair`), log the episodes that
        start or end, publish."""
        now = self._clock.now()
        try:
            report = self._read(now, audit=audit)
        except psycopg.OperationalError as error:
            raise QueueUnavailable(str(error).strip().splitlines()[0] or type(error).__name__) from None
        self._log_episodes(report)
        self._publish(report)
        return report

    def _read(self, now: datetime, *, audit: bool) -> QueueWatchReport:
        with self._connect() as connection:
            overdue_rows = connection.execute(
                QUERIES["watchdog_overdue"], {"now": now, "limit": self._cap, "recent": RECENT_EXECUTIONS}
            ).fetchall()
            broken_rows = (
                connection.execute(QUERIES["integrity_broken_chains"], {"limit": self._cap}).fetchall()
                if audit else None
            )  # fmt: skip
            dead_rows = connection.execute(QUERIES["watchdog_dead_letters"]).fetchall()
            ready_rows = connection.execute(QUERIES["watchdog_oldest_ready"], {"limit": self._cap}).fetchall()
            overdue = overdue_verdicts((_overdue_facts(row) for row in overdue_rows), now)
            broken = None
            if broken_rows is not None:
                facts = (QueueJobFacts(job_id=job_id, queue=queue, created_at=created) for job_id, queue, created, _ in broken_rows)
                broken = broken_chain_verdicts(facts, now)
            repaired = repair_chains(connection, [v.job_id for v in broken], now=now) if broken and self._repair else []
            report = QueueWatchReport(
                now=now,
                overdue=overdue,
                overdue_counts=_counts((row[1], row[5]) for row in overdue_rows),
                broken=broken,
                broken_counts=None if broken_rows is None else _counts((row[1], row[3]) for row in broken_rows),
                dead_letters=dead_letters(dead_rows, now),
                oldest_ready=oldest_ready_ages(ready_rows, now),
                repaired=repaired,
            )
            connection.execute(QUERIES["watch_summarise"], _summary_params(report))
        return report

    def _log_episodes(self, report: QueueWatchReport) -> None:
        verdicts: dict[tuple[str, str], str] = {}
        messages: dict[tuple[str, str], JobVerdict] = {}
        for kind, found in ((OVERDUE, report.overdue), (CHAIN_BROKEN, report.broken or [])):
            for verdict in found:
                key = (kind, verdict.job_id)
                verdicts[key] = str(verdict.finding.reason)
                messages[key] = verdict
        judged = [OVERDUE] + ([CHAIN_BROKEN] if report.broken is not None else [])
        started, ended = self._episodes.advance(verdicts, judged=judged)
        for key in started:
            verdict = messages[key]
            log.warning(
                "%s %s job %s (%s): %s", key[0], verdict.queue, verdict.job_id, verdict.finding.reason,
                verdict.finding.message,
            )  # fmt: skip
        for kind, job_id in ended:
            log.info("%s cleared: job %s", kind, job_id)


def _overdue_facts(row: tuple[Any, ...]) -> QueueJobFacts:
    """A `watchdog_overdue` row as the rules' input (its `in_queue` count is the report's)."""
    job_id, queue, created_at, interval, last_success, _, last_fired, ready_since, running_since, last_failure = row
    return QueueJobFacts(
        job_id=job_id, queue=queue, created_at=created_at, expected_max_interval=interval,
        last_success=last_success, last_fired=last_fired, ready_since=ready_since,
        running_since=running_since, last_failure=last_failure,
    )  # fmt: skip


def _summary_params(report: QueueWatchReport) -> dict[str, Any]:
    """`watch_summarise`'s parameters: each queue in trouble's share of the pass."""
    shares = summarise(report)
    return {
        "now": report.now,
        "audited": report.broken is not None,
        "queues": list(shares),
        "overdue": [share.overdue for share in shares.values()],
        "overdue_jobs": [Jsonb([list(job) for job in share.overdue_jobs]) for share in shares.values()],
        "broken": [share.broken for share in shares.values()],
        "broken_jobs": [Jsonb([list(job) for job in share.broken_jobs]) for share in shares.values()],
    }


def _counts(rows: Iterable[tuple[str, int]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for queue, in_queue in rows:
        counts[queue] = int(in_queue)
    return counts
