"""A job's executions read back from the history database, page by page, on SQLite and PostgreSQL.

This is what answers for the Executions retention deleted (`kubectl vigil executions`, through
the operator's HTTP API): one summary per execution — the last attempt's state, reason, pod and
finish, the number of attempts, the first attempt's start — newest occurrence first, only that
job's in that namespace. Pages follow one another by a cursor without a gap or a repeat,
including executions scheduled for the same instant and across days (PostgreSQL's daily
partitions); a page size outside 1..MAX_PAGE_SIZE is refused; an unreachable database is
`HistoryUnavailable`.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.core.history import (
    MAX_PAGE_SIZE,
    AttemptRecord,
    AttemptState,
    ExecutionSummary,
    HistoryCursor,
)
from vigil.core.ports import HistoryUnavailable
from vigil.history.store import SqlHistory

SCHEDULED = datetime(2026, 5, 1, 2, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def attempt(execution_id: str, number: int = 1, **changes: Any) -> AttemptRecord:
    start = SCHEDULED + number * 10 * SECOND
    base = AttemptRecord(
        execution_id=execution_id,
        attempt=number,
        namespace="team-a",
        job="reconcile",
        job_uid="uid-1",
        priority="normal",
        state=AttemptState.SUCCEEDED,
        scheduled_for=SCHEDULED,
        reason="Completed",
        started_at=start,
        finished_at=start + 5 * SECOND,
        pod=f"{execution_id}-{number}",
        updated_at=start + 5 * SECOND,
    )
    return dataclasses.replace(base, **changes)


def every_page(history: SqlHistory, *, limit: int) -> list[list[str]]:
    pages: list[list[str]] = []
    after: HistoryCursor | None = None
    while True:
        page = history.job_executions("team-a", "reconcile", limit=limit, after=after)
        pages.append([e.execution_id for e in page.executions])
        if page.after is None:
            return pages
        after = page.after


def test_each_execution_is_one_summary_of_its_last_attempt(history: SqlHistory) -> None:
    failed = {"state": AttemptState.FAILED, "reason": "ExitCode3", "error": "exit code 3"}
    history.write(
        [
            attempt("ex-retried", 1, **failed),
            attempt("ex-retried", 3, state=AttemptState.DEAD, reason="OOMKilled", error="killed"),
            attempt("ex-retried", 2, **failed),
            attempt("ex-newer", scheduled_for=SCHEDULED + timedelta(hours=1)),
            attempt("ex-other-job", job="cleanup"),
            attempt("ex-other-namespace", namespace="team-b"),
        ]
    )

    page = history.job_executions("team-a", "reconcile", limit=10)

    assert page.after is None
    assert page.executions == [
        ExecutionSummary(
            execution_id="ex-newer", namespace="team-a", job="reconcile", job_uid="uid-1",
            priority="normal", scheduled_for=SCHEDULED + timedelta(hours=1),
            state=AttemptState.SUCCEEDED, attempts=1, reason="Completed",
            started_at=SCHEDULED + 10 * SECOND, finished_at=SCHEDULED + 15 * SECOND, pod="ex-newer-1",
        ),
        ExecutionSummary(
            execution_id="ex-retried", namespace="team-a", job="reconcile", job_uid="uid-1",
            priority="normal", scheduled_for=SCHEDULED, state=AttemptState.DEAD, attempts=3,
            reason="OOMKilled", started_at=SCHEDULED + 10 * SECOND,
            finished_at=SCHEDULED + 35 * SECOND, pod="ex-retried-3", error="killed",
        ),
    ]  # fmt: skip


def test_an_execution_still_running_shows_its_running_attempt(history: SqlHistory) -> None:
    history.write(
        [
            attempt("ex-1", 1, state=AttemptState.FAILED, reason="ExitCode1"),
            attempt("ex-1", 2, state=AttemptState.RUNNING, reason="", finished_at=None),
        ]
    )

    [summary] = history.job_executions("team-a", "reconcile", limit=5).executions

    assert (summary.state, summary.attempts, summary.finished_at) == (AttemptState.RUNNING, 2, None)
    assert summary.started_at == SCHEDULED + 10 * SECOND


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 8])
def test_pages_follow_each_other_without_a_gap_or_a_repeat(history: SqlHistory, limit: int) -> None:
    """Seven executions over three days (three PostgreSQL partitions), two of them scheduled for
    the same instant (the job was deleted and created again: another uid, another id)."""
    when = [SCHEDULED + timedelta(days=d // 3, minutes=d) for d in range(6)]
    records = [attempt(f"ex-{i}", scheduled_for=at) for i, at in enumerate(when)]
    records += [attempt("ex-6", scheduled_for=when[4], job_uid="uid-2"), attempt("ex-4", 2, scheduled_for=when[4])]
    history.write(records)

    pages = every_page(history, limit=limit)

    newest_first = ["ex-5", "ex-6", "ex-4", "ex-3", "ex-2", "ex-1", "ex-0"]
    assert [e for page in pages for e in page] == newest_first
    assert all(len(page) == limit for page in pages[:-1]) and 0 < len(pages[-1]) <= limit
    assert len(pages) == -(-len(newest_first) // limit)  # no empty last page, even at a multiple


def test_a_job_without_history_is_one_empty_page(history: SqlHistory) -> None:
    history.write([attempt("ex-1")])

    page = history.job_executions("team-a", "never-ran", limit=10)

    assert (page.executions, page.after) == ([], None)


@pytest.mark.parametrize("limit", [0, -1, MAX_PAGE_SIZE + 1])
def test_a_page_size_out_of_bounds_is_refused(history: SqlHistory, limit: int) -> None:
    with pytest.raises(ValueError, match="limit"):
        history.job_executions("team-a", "reconcile", limit=limit)


def test_an_unreachable_database_is_history_unavailable(unreachable: SqlHistory) -> None:
    with pytest.raises(HistoryUnavailable):
        unreachable.job_executions("team-a", "reconcile", limit=10)
