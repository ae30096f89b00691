"""The history database adapter: attempts upserted by (execution id, attempt), read back by job or execution;
workflow history entries inserted by (workflow uid, seq), read back by workflow.

`SqlHistory` implements `vigil.core.ports.HistorySink` on SQLite (one file, the
embedded default) and PostgreSQL (production) with the same SQLAlchemy Core
statements. The schema is in schema.sql, the raw SQL in queries.sql, and the
migrations that build the schema in migrations/.

The two databases differ in one place. On PostgreSQL `attempts` is partitioned
by UTC day of `scheduled_for`: each day's partition is created (idempotently,
under an advisory lock) before its first row is written, and retention drops
whole partitions. A partitioned table's primary key must contain the partition
key, so there the key is (execution_id, attempt, scheduled_for); `scheduled_for`
is the occurrence's nominal time, a function of the execution id (DESIGN
invariant 3), so the idempotency key is still effectively (execution id,
attempt). Callers must give every attempt of an execution the same
`scheduled_for`. On SQLite retention deletes rows at the same whole-day
boundary, so both keep exactly the same rows.

A write never moves an attempt backwards (vigil.history.precedence): the
upsert's WHERE clause is that rule in SQL. Every failure to reach the database
raises `HistoryUnavailable`, so the caller (the history flusher, which leaves
the Executions marked unwritten) writes them later; writing them twice is harmless.

Workflow history (`write_workflow_events`, `workflow_events`) is the
`WorkflowHistorySink`: an append-only log, so a write is an insert that keeps
the row already there (ON CONFLICT DO NOTHING) and needs no precedence rule.
Its statements are the named queries in queries.sql, on both databases; the
table is not partitioned, and retention deletes a workflow's rows together once
all of them are older than the cutoff, so a history read back is never missing
its beginning. A workflow's name can be reused (deleted, created again): reads
by name return the newest incarnation — the uid with the latest entry — unless
a uid is given. Entry 0's row also carries the workflow's pinned definition, so
once ttlAfterFinished has deleted the Workflow its history can still be folded;
`workflow_history` reads it in pages (by seq, keyed on the uid the first page
found), which the operator's HTTP API serves to `kubectl vigil timeline`.

`job_executions` is the long-term record of a job once retention has deleted
its older Executions: one summary per execution (its last attempt), newest
first, in keyset pages (a cursor of scheduled time and execution id, so a page
costs the same however deep it is). The operator's HTTP API serves it.

`write_log_tail` / `log_tail` are the `LogTailSink`: the bounded end of an attempt's log
(vigil.core.logtail), one row per attempt in `attempt_logs`, kept once its pod is gone and
expired with the attempts (same whole-day cutoff) on both databases.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Dialect, Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError, IntegrityError

from vigil import pgconnect
from vigil.core.history import (
    MAX_PAGE_SIZE,
    AttemptRecord,
    AttemptState,
    ExecutionPage,
    ExecutionSummary,
    HistoryCursor,
    WorkflowCursor,
    WorkflowEventRecord,
    WorkflowHistoryPage,
)
from vigil.core.logtail import LogTail
from vigil.core.ports import HistoryUnavailable
from vigil.history.migrations import SCRIPT_LOCATION
from vigil.history.precedence import STAGES, TERMINAL_STAGE, key_of, updated_at_of, winners
from vigil.sqlfiles import load_queries

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
QUERIES_FILE = HERE / "queries.sql"

DEFAULT_RETENTION_DAYS = 30
DEFAULT_CONNECT_TIMEOUT_SECONDS = 5  # an unreachable server must not hold a writer for long
SQLITE_BUSY_TIMEOUT_SECONDS = 5.0  # a writer waits this long for another's lock before giving up
#: SQLite's own page cache per connection (KiB). Its default, 2 MiB, is kept by every connection
#: the pool holds: five of them while the HTTP API's workers read timelines at once held 10 MiB of
#: the operator's memory for pages the kernel's page cache holds anyway (a miss is a read() from
#: it, not a disk seek). A quarter of a MiB keeps an index's upper levels and a batch's pages.
SQLITE_CACHE_KIB = 256
NO_PARTITION_SQLSTATE = "23514"  # "no partition of relation found for row": a day dropped under us
PARTITION_PREFIX = "attempts_"
PARTITION_NAME = re.compile(r"^attempts_(\d{8})$")
WORKFLOW_EVENTS_BATCH = 500  # entries per insert transaction: ~20-30 ms on either database here
WORKFLOW_EVENTS_READ = 1000  # entries per query when a whole history is read (workflow_events)


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Aware datetimes in, UTC out; stored as UTC (SQLite keeps no zone, so it gets naive UTC)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"history times must be timezone-aware, got naive {value!r}")
        utc = value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = sa.MetaData()

# The table as the statements below see it (the key as on SQLite); the DDL is the migrations'.
attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("execution_id", sa.Text, primary_key=True),
    sa.Column("attempt", sa.SmallInteger, primary_key=True),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("job", sa.Text, nullable=False),
    sa.Column("job_uid", sa.Text, nullable=False),
    sa.Column("priority", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("scheduled_for", UtcDateTime, nullable=False),
    sa.Column("started_at", UtcDateTime),
    sa.Column("finished_at", UtcDateTime),
    sa.Column("pod", sa.Text, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)
# Workflow history entries as the named queries see them; the DDL is migration 0002's.
# `data` is JSON as text on SQLite, JSONB on PostgreSQL (the migration's type, so casts match);
# `definition` (migration 0003) the same, but nullable: None is SQL NULL, not JSON null.
JsonData = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
JsonOrNull = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")

workflow_events = sa.Table(
    "workflow_events",
    metadata,
    sa.Column("workflow_uid", sa.Text, primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("workflow", sa.Text, nullable=False),
    sa.Column("event", sa.Text, nullable=False),
    sa.Column("step", sa.Text),
    sa.Column("attempt", sa.Integer),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("data", JsonData, nullable=False),
    sa.Column("definition", JsonOrNull),
)

# Attempts' log tails (migration 0004), keyed like the attempts.
attempt_logs = sa.Table(
    "attempt_logs",
    metadata,
    sa.Column("execution_id", sa.Text, primary_key=True),
    sa.Column("attempt", sa.SmallInteger, primary_key=True),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("job", sa.Text, nullable=False),
    sa.Column("pod", sa.Text, nullable=False),
    sa.Column("scheduled_for", UtcDateTime, nullable=False),
    sa.Column("captured_at", UtcDateTime, nullable=False),
    sa.Column("truncated", sa.Boolean, nullable=False),
    sa.Column("log_bytes", sa.BigInteger, nullable=False),
    sa.Column("note", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
)

UPDATED_BY_UPSERT = [
    c.name for c in attempts.columns if not c.primary_key and c.name != "scheduled_for"
]


QUERIES = load_queries(QUERIES_FILE)

# The workflow_events named queries, their binds and result columns typed as the table's.
WORKFLOW_EVENT_TYPES: dict[str, sa.types.TypeEngine[Any]] = {
    "at": UtcDateTime(),
    "data": JsonData,
    "definition": JsonOrNull,
}
INSERT_WORKFLOW_EVENT = sa.text(QUERIES["insert_workflow_event"]).bindparams(
    *(sa.bindparam(name, type_=type_) for name, type_ in WORKFLOW_EVENT_TYPES.items())
)
LATEST_WORKFLOW_EVENTS = sa.text(QUERIES["latest_workflow_events"]).columns(**WORKFLOW_EVENT_TYPES)
WORKFLOW_EVENTS_OF_UID = sa.text(QUERIES["workflow_events_of_uid"]).columns(**WORKFLOW_EVENT_TYPES)
WORKFLOW_EVENT = sa.text(QUERIES["workflow_event"]).columns(**WORKFLOW_EVENT_TYPES)
JOB_EXECUTIONS = (
    sa.text(QUERIES["job_executions"])
    .bindparams(sa.bindparam("after_scheduled_for", type_=UtcDateTime()))
    .columns(scheduled_for=UtcDateTime(), started_at=UtcDateTime(), finished_at=UtcDateTime())
)
#: The first page's cursor: after every row (SQLite and PostgreSQL both hold this instant).
AFTER_EVERYTHING = HistoryCursor(datetime(9999, 12, 31, tzinfo=UTC), "")
EXPIRE_WORKFLOW_EVENTS = sa.text(QUERIES["expire_workflow_events"]).bindparams(
    sa.bindparam("cutoff", type_=UtcDateTime())
)


def normalise_url(dsn: str) -> URL:
    """The SQLAlchemy URL for a DSN; plain `postgresql://` and `postgres://` mean psycopg 3."""
    url = sa.make_url(
        dsn.replace("postgres://", "postgresql://", 1) if dsn.startswith("postgres://") else dsn
    )
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() not in ("postgresql", "sqlite"):
        raise ValueError(
            f"history database must be SQLite or PostgreSQL, not {url.get_backend_name()!r}"
        )
    return url


def create_history_engine(dsn: str, *, connect_timeout_seconds: int) -> Engine:
    url = normalise_url(dsn)
    if url.get_backend_name() == "postgresql":
        bounds = pgconnect.connect_arguments(pgconnect.MIGRATION_LIMITS)  # keepalives, JIT off, ...
        return sa.create_engine(
            url, pool_pre_ping=True, connect_args={**bounds, "connect_timeout": connect_timeout_seconds}
        )
    engine = sa.create_engine(
        url, pool_pre_ping=True, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}
    )

    @sa.event.listens_for(engine, "connect")
    def _connection_settings(dbapi_connection: Any, _record: Any) -> None:
        # Write-ahead logging: readers (the CLI) never block the writer, nor it them.
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")  # negative: KiB, not pages

    return engine


#: SQLSTATEs of a PostgreSQL server that is there but takes no writes for now: a read-only
#: transaction (a standby, or a database set read-only), and the classes of insufficient
#: resources (53: disk full, out of memory, too many connections) and of an operator's
#: intervention (57P: shutting down, starting up). Like a lost connection they pass: the rows
#: wait in the Executions (vigil.kube.controllers.historyflush) instead of failing every flush with a trace.
REFUSING_WRITES = ("25006", "53", "57P")


def _is_outage(error: DBAPIError) -> bool:
    if error.connection_invalidated or isinstance(error, sa.exc.OperationalError | sa.exc.InterfaceError):
        return True
    sqlstate = getattr(error.orig, "sqlstate", None) or ""
    return bool(sqlstate) and sqlstate.startswith(REFUSING_WRITES)


@contextlib.contextmanager
def unavailable_on_outage() -> Iterator[None]:
    """Turn "cannot reach the database" into HistoryUnavailable; let real errors through."""
    try:
        yield
    except DBAPIError as error:
        if _is_outage(error):
            raise HistoryUnavailable(f"history database unreachable: {error.orig}") from error
        raise
    except (DisconnectionError, sa.exc.TimeoutError) as error:
        raise HistoryUnavailable(f"history database unreachable: {error}") from error


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def expiry_cutoff(now: datetime, *, retention_days: int) -> datetime:
    """Rows scheduled before this instant are expired: whole UTC days, at least `retention_days` old."""
    return day_start((now.astimezone(UTC) - timedelta(days=retention_days)).date())


def partition_name(day: date) -> str:
    return f"{PARTITION_PREFIX}{day:%Y%m%d}"


def partition_day(name: str) -> date | None:
    match = PARTITION_NAME.match(name)
    return date.fromisoformat(match.group(1)) if match else None


def _stage_sql(state: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
    nonterminal = {str(s): stage for s, stage in STAGES.items() if stage < TERMINAL_STAGE}
    return sa.case(nonterminal, value=state, else_=TERMINAL_STAGE)


def _upsert(dialect: str) -> sa.Insert:
    """INSERT … ON CONFLICT DO UPDATE, only when the new row supersedes the stored one."""
    insert = postgresql.insert(attempts) if dialect == "postgresql" else sqlite.insert(attempts)
    key = ["execution_id", "attempt"] + (["scheduled_for"] if dialect == "postgresql" else [])
    new, old = insert.excluded, attempts.c
    supersedes = sa.or_(
        _stage_sql(new.state) > _stage_sql(old.state),
        sa.and_(_stage_sql(new.state) == _stage_sql(old.state), new.updated_at >= old.updated_at),
    )
    return insert.on_conflict_do_update(
        index_elements=key, set_={name: new[name] for name in UPDATED_BY_UPSERT}, where=supersedes
    )


def _log_upsert(dialect: str) -> sa.Insert:
    """INSERT … ON CONFLICT: a stored tail stays; only a row that says the log could not be
    read (a `note`) gives way, and only to a tail that was read."""
    insert = postgresql.insert(attempt_logs) if dialect == "postgresql" else sqlite.insert(attempt_logs)
    new, old = insert.excluded, attempt_logs.c
    return insert.on_conflict_do_update(
        index_elements=["execution_id", "attempt"],
        set_={c.name: new[c.name] for c in attempt_logs.columns if not c.primary_key},
        where=sa.and_(old.note != "", new.note == ""),
    )


def _log_row(tail: LogTail) -> dict[str, Any]:
    for name in ("scheduled_for", "captured_at"):
        if getattr(tail, name).tzinfo is None:
            raise ValueError(f"{name} of the log of {tail.execution_id}#{tail.attempt} is naive")
    if "\x00" in tail.text:
        raise ValueError(f"the log of {tail.execution_id}#{tail.attempt} holds NUL (vigil.core.logtail bounds it)")
    return {c.name: getattr(tail, c.name) for c in attempt_logs.columns}


def _require_aware(record: AttemptRecord) -> None:
    for name in ("scheduled_for", "started_at", "finished_at", "updated_at"):
        value = getattr(record, name)
        if value is not None and value.tzinfo is None:
            raise ValueError(
                f"{name} of {key_of(record)} is naive: history times must be timezone-aware"
            )


def _row(record: AttemptRecord) -> dict[str, Any]:
    _require_aware(record)
    return {
        "execution_id": record.execution_id,
        "attempt": record.attempt,
        "namespace": record.namespace,
        "job": record.job,
        "job_uid": record.job_uid,
        "priority": record.priority,
        "state": str(record.state),
        "reason": record.reason,
        "scheduled_for": record.scheduled_for,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "pod": record.pod,
        "error": record.error,
        "updated_at": updated_at_of(record),
    }


def _record(row: sa.RowMapping) -> AttemptRecord:
    fields = {str(name): value for name, value in row.items()}
    return AttemptRecord(**{**fields, "state": AttemptState(row["state"])})


def _summary(row: sa.RowMapping) -> ExecutionSummary:
    fields = {str(name): value for name, value in row.items()}
    return ExecutionSummary(**{**fields, "state": AttemptState(row["state"])})


def _workflow_event_row(record: WorkflowEventRecord) -> dict[str, Any]:
    if record.at.tzinfo is None:
        raise ValueError(
            f"at of workflow event {record.workflow_uid}#{record.seq} is naive: "
            "history times must be timezone-aware"
        )
    if record.seq < 0:
        raise ValueError(f"seq of workflow event {record.workflow_uid} is negative: {record.seq}")
    if record.definition is not None and record.seq != 0:
        raise ValueError(
            f"workflow event {record.workflow_uid}#{record.seq} carries a definition: only entry 0 does"
        )
    row = {c.name: getattr(record, c.name) for c in workflow_events.columns}
    definition = dict(record.definition) if record.definition is not None else None
    return {**row, "data": dict(record.data), "definition": definition}


def _workflow_event(row: sa.RowMapping) -> WorkflowEventRecord:
    return WorkflowEventRecord(**{str(name): value for name, value in row.items()})


def _batches(rows: Sequence[dict[str, Any]], size: int) -> Iterator[Sequence[dict[str, Any]]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


@dataclass(frozen=True)
class Expiry:
    """What one retention pass removed: rows scheduled before `cutoff`, and workflows whose
    every history entry is before it."""

    cutoff: datetime
    partitions_dropped: list[str]  # PostgreSQL
    rows_deleted: int  # SQLite
    workflow_events_deleted: int  # both
    log_tails_deleted: int = 0  # both


class SqlHistory:
    """The history sink and its queries, on SQLite or PostgreSQL (see the module docstring)."""

    def __init__(
        self,
        dsn: str,
        *,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        connect_timeout_seconds: int = DEFAULT_CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        if retention_days < 1:
            raise ValueError("retention_days must be at least 1")
        self.retention_days = retention_days
        self.engine = create_history_engine(dsn, connect_timeout_seconds=connect_timeout_seconds)
        self.partitioned = self.engine.dialect.name == "postgresql"
        self._upsert = _upsert(self.engine.dialect.name)
        self._log_upsert = _log_upsert(self.engine.dialect.name)
        self._known_partitions: set[date] = set()

    def close(self) -> None:
        self.engine.dispose()

    def migrate(self) -> None:
        """Bring the schema to the newest migration; a no-op when it is there already."""
        # Imported here: alembic brings mako and pygments (about 11 MiB), and the operator runs
        # this in a child process (`vigil.history.migrating`) so that it never holds them.
        import alembic.command
        import alembic.config

        config = alembic.config.Config()
        config.set_main_option("script_location", str(SCRIPT_LOCATION))
        with unavailable_on_outage(), self.engine.begin() as connection:
            if self.partitioned:
                connection.exec_driver_sql(QUERIES["lock_ddl"])
            config.attributes["connection"] = connection
            alembic.command.upgrade(config, "head")

    # -- writing -------------------------------------------------------------------------------

    def write(self, records: list[AttemptRecord]) -> None:
        """Upsert attempts by (execution id, attempt); raise HistoryUnavailable if unreachable."""
        rows = [_row(record) for record in winners(records)]
        if not rows:
            return
        with unavailable_on_outage():
            try:
                self._write_rows(rows)
            except IntegrityError as error:
                if (
                    not self.partitioned
                    or getattr(error.orig, "sqlstate", None) != NO_PARTITION_SQLSTATE
                ):
                    raise
                self._known_partitions.clear()  # another replica's retention dropped a day we knew
                self._write_rows(rows)

    def _write_rows(self, rows: list[dict[str, Any]]) -> None:
        if self.partitioned:
            self._ensure_partitions({row["scheduled_for"].astimezone(UTC).date() for row in rows})
        with self.engine.begin() as connection:
            connection.execute(self._upsert, rows)

    def _ensure_partitions(self, days: Iterable[date]) -> None:
        missing = sorted(set(days) - self._known_partitions)
        if not missing:
            return
        with self.engine.begin() as connection:  # its own short transaction: DDL locks the parent
            connection.exec_driver_sql(QUERIES["lock_ddl"])
            for day in missing:
                statement = QUERIES["create_partition"].format(
                    partition=partition_name(day),
                    start=day_start(day).isoformat(),
                    end=day_start(day + timedelta(days=1)).isoformat(),
                )
                connection.exec_driver_sql(statement)
        self._known_partitions.update(missing)

    def write_workflow_events(self, records: list[WorkflowEventRecord]) -> None:
        """Insert workflow history entries by (workflow uid, seq), keeping rows already there.

        Batches of WORKFLOW_EVENTS_BATCH, one transaction each: after a failure some
        batches may be in, and writing all the records again is harmless.
        Raises HistoryUnavailable if the database is unreachable.
        """
        rows = [_workflow_event_row(record) for record in records]
        with unavailable_on_outage():
            for batch in _batches(rows, WORKFLOW_EVENTS_BATCH):
                with self.engine.begin() as connection:
                    connection.execute(INSERT_WORKFLOW_EVENT, list(batch))

    def write_log_tail(self, tail: LogTail) -> None:
        """Store an attempt's log tail, keyed by (execution id, attempt); writing it again keeps
        the first (a tail that was read replaces only a note that it could not be). Raises
        HistoryUnavailable if the database is unreachable, ValueError for a naive time or a NUL."""
        row = _log_row(tail)
        with unavailable_on_outage(), self.engine.begin() as connection:
            connection.execute(self._log_upsert, [row])

    def has_log_tail(self, execution_id: str, attempt: int) -> bool:
        """Is this attempt's log tail stored (read, not a note that it could not be)?"""
        query = sa.select(attempt_logs.c.attempt).where(
            attempt_logs.c.execution_id == execution_id,
            attempt_logs.c.attempt == attempt,
            attempt_logs.c.note == "",
        )
        with unavailable_on_outage(), self.engine.connect() as connection:
            return connection.execute(query).first() is not None

    def log_tail(self, namespace: str, execution_id: str, *, attempt: int | None = None) -> LogTail | None:
        """The stored log tail of an attempt of the execution in `namespace` (without `attempt`,
        of its latest attempt that has one), or None."""
        query = sa.select(attempt_logs).where(
            attempt_logs.c.namespace == namespace, attempt_logs.c.execution_id == execution_id
        )
        if attempt is not None:
            query = query.where(attempt_logs.c.attempt == attempt)
        query = query.order_by(attempt_logs.c.attempt.desc()).limit(1)
        with unavailable_on_outage(), self.engine.connect() as connection:
            row = connection.execute(query).mappings().first()
        return LogTail(**{str(k): v for k, v in row.items()}) if row is not None else None

    # -- retention -----------------------------------------------------------------------------

    def drop_expired_partitions(self, now: datetime) -> Expiry:
        """Remove every whole UTC day older than `retention_days` before `now`.

        PostgreSQL drops those days' partitions of attempts; SQLite deletes their rows.
        On both, a workflow's history rows are deleted once all of them are that old.
        """
        cutoff = expiry_cutoff(now, retention_days=self.retention_days)
        dropped: list[str] = []
        deleted = 0
        with unavailable_on_outage():
            with self.engine.begin() as connection:
                if self.partitioned:
                    dropped = self._drop_partitions_before(connection, cutoff.date())
                else:
                    deleted = connection.execute(
                        sa.delete(attempts).where(attempts.c.scheduled_for < cutoff)
                    ).rowcount
            # Its own transaction, after the one holding the DDL lock: row locks are never
            # held while waiting for that lock.
            with self.engine.begin() as connection:
                events = connection.execute(EXPIRE_WORKFLOW_EVENTS, {"cutoff": cutoff}).rowcount
            with self.engine.begin() as connection:
                tails = connection.execute(
                    sa.delete(attempt_logs).where(attempt_logs.c.scheduled_for < cutoff)
                ).rowcount
        if dropped:
            log.info(
                "history retention dropped %d partitions: %s", len(dropped), ", ".join(dropped)
            )
        if events:
            log.info("history retention deleted %d workflow history entries", events)
        return Expiry(
            cutoff=cutoff,
            partitions_dropped=dropped,
            rows_deleted=deleted,
            workflow_events_deleted=events,
            log_tails_deleted=tails,
        )

    def _drop_partitions_before(self, connection: Connection, cutoff: date) -> list[str]:
        connection.exec_driver_sql(QUERIES["lock_ddl"])
        names = connection.exec_driver_sql(QUERIES["list_partitions"]).scalars().all()
        dropped: list[str] = []
        for name in names:
            day = partition_day(name)
            if day is not None and day < cutoff:
                connection.exec_driver_sql(QUERIES["drop_partition"].format(partition=name))
                self._known_partitions.discard(day)
                dropped.append(name)
        return dropped

    def partitions(self) -> list[str]:
        """The daily partitions that exist (PostgreSQL; always empty on SQLite), oldest first."""
        if not self.partitioned:
            return []
        with unavailable_on_outage(), self.engine.connect() as connection:
            return list(connection.exec_driver_sql(QUERIES["list_partitions"]).scalars().all())

    # -- queries -------------------------------------------------------------------------------

    def attempts_for_job(
        self, namespace: str, job: str, *, limit: int = 100
    ) -> list[AttemptRecord]:
        """The job's most recent attempts, newest occurrence first (then the latest attempt first)."""
        query = (
            sa.select(attempts)
            .where(attempts.c.namespace == namespace, attempts.c.job == job)
            .order_by(attempts.c.scheduled_for.desc(), attempts.c.attempt.desc())
            .limit(limit)
        )
        return self._records(query)

    def job_executions(
        self, namespace: str, job: str, *, limit: int, after: HistoryCursor | None = None
    ) -> ExecutionPage:
        """A page of the job's executions (every job of that name the namespace has had), newest
        occurrence first, each as its last attempt left it; the next page starts `after` the
        cursor this one returns."""
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE_SIZE}, not {limit}")
        cursor = after or AFTER_EVERYTHING
        params = {
            "namespace": namespace,
            "job": job,
            "after_scheduled_for": cursor.scheduled_for,
            "after_execution_id": cursor.execution_id,
            "limit": limit + 1,
        }
        with unavailable_on_outage(), self.engine.connect() as connection:
            rows = connection.execute(JOB_EXECUTIONS, params).mappings().all()
        found = [_summary(row) for row in rows[:limit]]
        last = found[-1] if len(rows) > limit else None
        return ExecutionPage(
            executions=found,
            after=HistoryCursor(last.scheduled_for, last.execution_id) if last else None,
        )

    def timeline(self, execution_id: str) -> list[AttemptRecord]:
        """Every attempt of one execution, first attempt first."""
        query = (
            sa.select(attempts)
            .where(attempts.c.execution_id == execution_id)
            .order_by(attempts.c.attempt)
        )
        return self._records(query)

    def workflow_events(
        self, namespace: str, workflow: str, *, uid: str | None = None
    ) -> list[WorkflowEventRecord]:
        """A workflow's whole history in order (by seq), read a page at a time.

        Without `uid`, that of the newest workflow of that name: the uid with the latest
        entry (`at`), should the name have been deleted and used again.
        """
        after = WorkflowCursor(uid, -1) if uid is not None else None
        found: list[WorkflowEventRecord] = []
        while True:
            page = self.workflow_history(namespace, workflow, limit=WORKFLOW_EVENTS_READ, after=after)
            found += page.entries
            if page.after is None:
                return found
            after = page.after

    def workflow_history(
        self, namespace: str, workflow: str, *, limit: int, after: WorkflowCursor | None = None
    ) -> WorkflowHistoryPage:
        """A page of a workflow's history entries, in seq order; the next page starts `after`
        the cursor this one returns.

        Without `after`, the first page of the newest workflow of that name (as
        `workflow_events`); the cursor names its uid, so the pages that follow are of that
        workflow even if the name is used again meanwhile. An unknown name is an empty page.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        where = {"namespace": namespace, "workflow": workflow, "limit": limit + 1}
        if after is None:
            query, params = LATEST_WORKFLOW_EVENTS, where
        else:
            query = WORKFLOW_EVENTS_OF_UID
            params = {**where, "workflow_uid": after.workflow_uid, "after_seq": after.seq}
        with unavailable_on_outage(), self.engine.connect() as connection:
            rows = connection.execute(query, params).mappings().all()
        entries = [_workflow_event(row) for row in rows[:limit]]
        last = entries[-1] if len(rows) > limit else None
        return WorkflowHistoryPage(
            entries=entries, after=WorkflowCursor(last.workflow_uid, last.seq) if last else None
        )

    def workflow_event(self, workflow_uid: str, seq: int) -> WorkflowEventRecord | None:
        """Entry `seq` of the workflow with uid `workflow_uid`, if it was written."""
        params = {"workflow_uid": workflow_uid, "seq": seq}
        with unavailable_on_outage(), self.engine.connect() as connection:
            row = connection.execute(WORKFLOW_EVENT, params).mappings().first()
            return _workflow_event(row) if row is not None else None

    def _records(self, query: sa.Select[Any]) -> list[AttemptRecord]:
        with unavailable_on_outage(), self.engine.connect() as connection:
            return [_record(row) for row in connection.execute(query).mappings()]
