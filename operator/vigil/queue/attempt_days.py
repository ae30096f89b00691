"""The daily partitions of `attempts`: made ahead, dropped once older than the retention.

Why by day. `attempts` grows with every attempt (at 10,000 executions a second,
close to a billion rows a day) and nothing reads old ones but a timeline. Range
partitions on `day` — the UTC day of the execution's `scheduled_for`, the same for
all its attempts — turn retention into dropping one table a day, where a DELETE
would rewrite and vacuum every row. A day, not an hour: the timeline's read
(attempts of one execution, whose day it does not know) probes every partition's
key, so the count of partitions should stay small: retention plus a few.

Which days. Maintenance keeps a partition for every day from `now - retention`
to `now + ahead` (two days): attempts of executions scheduled days ago (a backlog,
a retry through the API) land in their own day's partition as long as it is kept.
A day with no partition (older than the retention, or beyond the horizon) goes to
DEFAULT, so an insert never fails; when its partition is made, its rows move out
of DEFAULT in the same transaction (CREATE the table alone, move the rows, ATTACH
it). Rows of days older than the retention that DEFAULT holds (the rows the
migration copied, attempts of an execution scheduled long ago) are deleted in
bounded batches once they also finished longer than the retention ago.

Locks. Making a partition takes ACCESS EXCLUSIVE on DEFAULT at once, the lock
ATTACH needs: taking a weaker one first and upgrading to it at ATTACH could
deadlock with a transaction that read DEFAULT and then inserts into it. Dropping
takes ACCESS EXCLUSIVE on the parent, which every acknowledgement waits behind,
so each step sets a short lock_timeout and a step that times out is tried again
next round. Both locks last milliseconds, once a day.

Several replicas. Every trigger shard's loop calls this beside the buckets'
upkeep; a session advisory lock of its own lets one maintainer work at a time, the
others return at once. Every step is idempotent.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from vigil.core.timeparse import require_aware
from vigil.queue.partitions import (
    Maintenance,
    Partitioned,
    existing_partitions,
    make_partition,
    one_maintainer,
    qualified,
    short_lock_timeout,
)

ATTEMPTS = Partitioned(parent="attempts", default="attempts_default", prefix="attempts_p", column="day")
NAME_FORMAT = "%Y%m%d"
#: Days kept behind today: the setting `queue.attemptsRetentionDays` (vigil.settings.Queue).
DEFAULT_RETENTION_DAYS = 14
#: Days made ahead of today: a clock a little fast, or a day turning during a round, finds its partition.
DEFAULT_AHEAD_DAYS = 2
#: Old DEFAULT rows deleted per transaction, and transactions per round: a round stays short
#: (it runs in the trigger's loop), and a large backlog still goes at 10,000 rows a minute.
PURGE_BATCH = 1000
PURGE_BATCHES = 10
ADVISORY_KEY = "vigil_queue_attempt_partitions"


def partition_name(day: date) -> str:
    return ATTEMPTS.prefix + day.strftime(NAME_FORMAT)


def day_of(at: datetime) -> date:
    """The UTC day of instant `at`: the partition an execution scheduled then files its attempts in."""
    return require_aware(at, name="at").astimezone(UTC).date()


def maintain(
    connection: psycopg.Connection[Any],
    *,
    now: datetime,
    retention_days: int = DEFAULT_RETENTION_DAYS,
    ahead_days: int = DEFAULT_AHEAD_DAYS,
) -> Maintenance:
    """Make the partitions of [today - retention, today + ahead], drop older ones, purge old DEFAULT rows.

    `connection` must be in autocommit mode: each step is its own transaction.
    """
    if retention_days < 1:
        raise ValueError(f"retention_days must be at least 1, got {retention_days}")
    if not connection.autocommit:
        raise ValueError("maintain() needs an autocommit connection: each partition is its own transaction")
    with one_maintainer(connection, ADVISORY_KEY) as mine:
        if not mine:
            return Maintenance(created=[], dropped=[], skipped=True)
        oldest = day_of(now) - timedelta(days=retention_days)
        existing = existing_partitions(connection, ATTEMPTS)
        created, moved = [], 0
        for day in _days(oldest, day_of(now) + timedelta(days=ahead_days)):
            name = partition_name(day)
            if name in existing:
                continue
            try:
                moved += make_partition(connection, ATTEMPTS, name, day, day + timedelta(days=1))
            except psycopg.errors.LockNotAvailable:
                break  # a long transaction holds DEFAULT: the next round makes the rest
            created.append(name)
        dropped = [name for name in sorted(existing) if name < partition_name(oldest) and _drop(connection, name)]
        purged = _purge_default(connection, before=oldest, finished_before=now - timedelta(days=retention_days))
        return Maintenance(created=created, dropped=dropped, moved=moved, purged=purged)


def partitions(connection: psycopg.Connection[Any]) -> list[str]:
    """The names of the daily partitions that exist now, oldest first (DEFAULT excluded)."""
    return sorted(existing_partitions(connection, ATTEMPTS))


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=k) for k in range((last - first).days + 1)]


def _drop(connection: psycopg.Connection[Any], name: str) -> bool:
    """Drop a day's partition past the retention; False when a lock timed out (next round tries again)."""
    try:
        with connection.transaction():
            short_lock_timeout(connection)
            connection.execute(sql.SQL("LOCK TABLE ONLY {} IN ACCESS EXCLUSIVE MODE").format(qualified(ATTEMPTS.parent)))
            connection.execute(sql.SQL("DROP TABLE {}").format(qualified(name)))
            return True
    except psycopg.errors.LockNotAvailable:
        return False


def _purge_default(connection: psycopg.Connection[Any], *, before: date, finished_before: datetime) -> int:
    """Delete DEFAULT's rows of days before `before` that finished before `finished_before`, in batches."""
    statement = sql.SQL(
        "DELETE FROM {default} WHERE (execution_id, attempt, day) IN ("
        " SELECT execution_id, attempt, day FROM {default}"
        " WHERE day < %(before)s AND finished_at < %(finished_before)s LIMIT %(limit)s)"
    ).format(default=qualified(ATTEMPTS.default))
    params = {"before": before, "finished_before": finished_before, "limit": PURGE_BATCH}
    purged = 0
    for _ in range(PURGE_BATCHES):
        try:
            with connection.transaction():
                short_lock_timeout(connection)
                deleted = max(connection.execute(statement, params).rowcount, 0)
        except psycopg.errors.LockNotAvailable:
            break
        purged += deleted
        if deleted < PURGE_BATCH:
            break
    return purged
