"""The hourly partitions of schedule_buckets: created ahead, dropped behind once fully fired.

Why hourly. The table is partitioned by range on `minute`; a partition holds 60
minutes. A trigger pass reads only partitions whose minutes have come (plan-time
pruning on `minute <= now`), and within them only unfired rows (a partial index),
so its cost follows the due work whatever the width. What the width sets is the
number of tables: one per minute would be 1,440 a day, each statement that cannot
prune (the unnest-driven marks, catch-up reads over past partitions) would plan
and lock all of them, and maintenance would run DDL every minute. An hour keeps
about 50 partitions alive (48 ahead, a few behind) and DDL to once an hour.

Ahead and DEFAULT. Partitions exist for the next `ahead` (48 h by default), so every
job that runs at least daily (its next occurrence at most ~25 h ahead, with a
daylight-saving day) lands in an hourly partition. A rarer job's next occurrence
(weekly, monthly) lands in the DEFAULT partition, so an insert never fails. When
the hour's partition is made, its rows move out of DEFAULT in the same
transaction: CREATE the table alone, move the rows, ATTACH it. DEFAULT is locked
ACCESS EXCLUSIVE for that moment, the mode ATTACH needs, taken first: a row
could otherwise arrive between the move and the ATTACH, which would then refuse,
and a weaker lock upgraded at ATTACH deadlocks with a firing transaction that
read DEFAULT and then inserts into it. PostgreSQL scans DEFAULT during ATTACH,
so its size — the rare jobs only — bounds the pause.

Dropping. A partition whose hour has passed is dropped only when none of its rows
is unfired, checked under the parent's lock in the transaction that drops it
(DROP takes ACCESS EXCLUSIVE on the parent: every statement waits for it, so
maintenance sets a short lock_timeout and tries again next round rather than
queue behind a long transaction and stall the trigger). Marked rows that land in
DEFAULT for a past minute (Missed records after an outage) are deleted with it.

Several replicas. A session advisory lock makes one maintainer at a time; the
others return at once with nothing done. Every step is idempotent (a partition
that exists is not made again, one already gone is not dropped again).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from vigil.core.timeparse import require_aware

SCHEMA = "vigil_queue"
PARENT = "schedule_buckets"
DEFAULT_PARTITION = "schedule_buckets_default"
PARTITION_PREFIX = "schedule_buckets_p"
PARTITION_WIDTH = timedelta(hours=1)
NAME_FORMAT = "%Y%m%d%H"
#: Partitions made ahead of now: more than a day, so daily jobs never wait in DEFAULT.
DEFAULT_AHEAD = timedelta(hours=48)
#: How long maintenance waits for a table lock before giving up until the next round:
#: a waiting ACCESS EXCLUSIVE request blocks every statement queued behind it.
LOCK_TIMEOUT = "2s"
ADVISORY_KEY = "vigil_queue_partitions"


@dataclasses.dataclass(frozen=True)
class Maintenance:
    """What one round did: partitions made (with rows moved out of DEFAULT) and dropped."""

    created: list[str]
    dropped: list[str]
    moved: int = 0
    purged: int = 0
    skipped: bool = False  # another replica held the lock


@dataclasses.dataclass(frozen=True)
class Partitioned:
    """A range-partitioned table of the store: parent, DEFAULT partition, partitions' prefix, key column."""

    parent: str
    default: str
    prefix: str
    column: str


BUCKETS = Partitioned(PARENT, DEFAULT_PARTITION, PARTITION_PREFIX, "minute")


@contextlib.contextmanager
def one_maintainer(connection: psycopg.Connection[Any], key: str) -> Iterator[bool]:
    """Hold the session advisory lock `key` for the block: True, or False at once when another holds it."""
    params = {"key": key}
    if not connection.execute("SELECT pg_try_advisory_lock(hashtext(%(key)s))", params).fetchone()[0]:  # type: ignore[index]  # SELECT of a function returns exactly one row
        yield False
        return
    try:
        yield True
    finally:
        connection.execute("SELECT pg_advisory_unlock(hashtext(%(key)s))", params)


def partition_name(start: datetime) -> str:
    return PARTITION_PREFIX + start.astimezone(UTC).strftime(NAME_FORMAT)


def partition_start(at: datetime) -> datetime:
    """The start of the hour partition holding instant `at`."""
    return require_aware(at, name="at").astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def maintain(connection: psycopg.Connection[Any], *, now: datetime, ahead: timedelta = DEFAULT_AHEAD) -> Maintenance:
    """Create the partitions of [hour of now, now + ahead] and drop the fully fired past ones.

    `connection` must be in autocommit mode: each partition is its own transaction.
    """
    if not connection.autocommit:
        raise ValueError("maintain() needs an autocommit connection: each partition is its own transaction")
    with one_maintainer(connection, ADVISORY_KEY) as mine:
        if not mine:
            return Maintenance(created=[], dropped=[], skipped=True)
        existing = existing_partitions(connection, BUCKETS)
        created, moved = [], 0
        for start in _hours(partition_start(now), partition_start(now + ahead)):
            name = partition_name(start)
            if name in existing:
                continue
            try:
                moved += make_partition(connection, BUCKETS, name, start, start + PARTITION_WIDTH)
            except psycopg.errors.LockNotAvailable:
                break  # a long transaction holds DEFAULT: the next round makes the rest
            created.append(name)
        current = partition_start(now)
        dropped = [name for name in sorted(existing) if name < partition_name(current) and _drop(connection, name)]
        purged = _purge_default(connection, before=current)
        return Maintenance(created=created, dropped=dropped, moved=moved, purged=purged)


def partitions(connection: psycopg.Connection[Any]) -> list[str]:
    """The names of the hourly partitions that exist now, oldest first (DEFAULT excluded)."""
    return sorted(existing_partitions(connection, BUCKETS))


def _hours(first: datetime, last: datetime) -> list[datetime]:
    count = int((last - first) / PARTITION_WIDTH) + 1
    return [first + k * PARTITION_WIDTH for k in range(count)]


def existing_partitions(connection: psycopg.Connection[Any], table: Partitioned) -> set[str]:
    """The names of `table`'s partitions that exist now (DEFAULT excluded)."""
    rows = connection.execute(
        """
        SELECT child.relname FROM pg_inherits
        JOIN pg_class AS parent ON parent.oid = pg_inherits.inhparent
        JOIN pg_class AS child ON child.oid = pg_inherits.inhrelid
        JOIN pg_namespace AS ns ON ns.oid = parent.relnamespace
        WHERE ns.nspname = %(schema)s AND parent.relname = %(parent)s AND child.relname LIKE %(prefix)s
        """,
        {"schema": SCHEMA, "parent": table.parent, "prefix": table.prefix + "%"},
    ).fetchall()
    return {row[0] for row in rows}


def qualified(name: str) -> sql.Identifier:
    return sql.Identifier(SCHEMA, name)


def short_lock_timeout(connection: psycopg.Connection[Any]) -> None:
    """For the transaction: wait LOCK_TIMEOUT for a table lock, then give up until the next round."""
    connection.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))


def make_partition(connection: psycopg.Connection[Any], table: Partitioned, name: str, low: Any, high: Any) -> int:
    """Make `table`'s partition [low, high), moving its rows out of DEFAULT first; returns the rows moved."""
    bounds = {"low": low, "high": high}
    with connection.transaction():
        short_lock_timeout(connection)
        # Parent first, then DEFAULT: the order every statement through the parent takes them in.
        # DEFAULT at once in the mode ATTACH needs: a weaker lock upgraded at ATTACH deadlocks with a
        # transaction that read DEFAULT (due rows) and then inserts into it (a far occurrence).
        connection.execute(sql.SQL("LOCK TABLE ONLY {} IN SHARE UPDATE EXCLUSIVE MODE").format(qualified(table.parent)))
        connection.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(qualified(table.default)))
        connection.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(
                qualified(name), qualified(table.parent)
            )
        )
        moved = connection.execute(
            sql.SQL(
                "WITH moved AS (DELETE FROM {default} WHERE {column} >= %(low)s AND {column} < %(high)s RETURNING *) "
                "INSERT INTO {part} SELECT * FROM moved"
            ).format(default=qualified(table.default), column=sql.Identifier(table.column), part=qualified(name)),
            bounds,
        ).rowcount
        connection.execute(
            sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
                qualified(table.parent), qualified(name), sql.Literal(low), sql.Literal(high)
            )
        )
    return max(moved, 0)


def _drop(connection: psycopg.Connection[Any], name: str) -> bool:
    """Drop a past partition if no row in it is unfired; False when it must stay (or a lock timed out)."""
    try:
        with connection.transaction():
            short_lock_timeout(connection)
            connection.execute(sql.SQL("LOCK TABLE ONLY {} IN ACCESS EXCLUSIVE MODE").format(qualified(PARENT)))
            unfired = connection.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE fired_at IS NULL)").format(qualified(name))
            ).fetchone()
            if unfired is None or unfired[0]:
                return False
            connection.execute(sql.SQL("DROP TABLE {}").format(qualified(name)))
            return True
    except psycopg.errors.LockNotAvailable:
        return False


def _purge_default(connection: psycopg.Connection[Any], *, before: datetime) -> int:
    """Delete marked rows DEFAULT holds for minutes before `before` (records of a dropped past hour)."""
    try:
        with connection.transaction():
            short_lock_timeout(connection)
            cursor = connection.execute(
                sql.SQL("DELETE FROM {} WHERE minute < %(before)s AND fired_at IS NOT NULL").format(
                    qualified(DEFAULT_PARTITION)
                ),
                {"before": before},
            )
            return max(cursor.rowcount, 0)
    except psycopg.errors.LockNotAvailable:
        return 0
