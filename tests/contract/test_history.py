"""The history database contract, run against SQLite and a real PostgreSQL.

`SqlHistory` must behave the same on both databases: rows round-trip with every
field and aware UTC times; writes are idempotent by (execution id, attempt); a
record never moves an attempt backwards, whatever the arrival order (one table
of named scenarios); queries by job and
by execution; retention by whole UTC days (PostgreSQL drops partitions, SQLite
deletes rows); an unreachable database is `HistoryUnavailable`; migrations are
idempotent and produce exactly the canonical schema.sql.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from tests.contract.historydb import RETENTION_DAYS, fresh_dsn
from vigil.core.history import AttemptRecord, AttemptState
from vigil.core.ports import HistoryUnavailable
from vigil.history.migrations import VERSION_TABLE
from vigil.history.store import SQLITE_CACHE_KIB, SqlHistory, attempts
from vigil.sqlfiles import load_blocks

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "operator" / "vigil" / "history" / "schema.sql"
SCHEDULED = datetime(2026, 5, 1, 2, 0, tzinfo=UTC)
T1, T2, T3 = (SCHEDULED + timedelta(seconds=s) for s in (10, 20, 30))
LONDON = ZoneInfo("Europe/London")


def attempt(execution_id: str = "exec-1", number: int = 1, **changes: Any) -> AttemptRecord:
    base = AttemptRecord(
        execution_id=execution_id,
        attempt=number,
        namespace="team-a",
        job="reconcile",
        job_uid="6f1c2a9e-0000-4000-8000-000000000001",
        priority="normal",
        state=AttemptState.RUNNING,
        scheduled_for=SCHEDULED,
        started_at=T1,
        pod=f"{execution_id}-{number}",
        updated_at=T1,
    )
    return dataclasses.replace(base, **changes)


def finished(state: AttemptState, at: datetime, **changes: Any) -> dict[str, Any]:
    return {"state": state, "finished_at": at, "updated_at": at, **changes}


def row_count(history: SqlHistory) -> int:
    with history.engine.connect() as connection:
        return int(
            connection.execute(sa.select(sa.func.count()).select_from(attempts)).scalar_one()
        )


# -- rows -------------------------------------------------------------------------------------


def test_a_record_round_trips_with_every_field_in_utc(history: SqlHistory) -> None:
    local = SCHEDULED.astimezone(LONDON)
    written = attempt(
        state=AttemptState.FAILED,
        scheduled_for=local,
        started_at=local + timedelta(seconds=1, microseconds=250),
        finished_at=local + timedelta(seconds=9),
        updated_at=local + timedelta(seconds=9),
        reason="PodFailed",
        error="exit code 3",
        priority="high",
    )

    history.write([written])

    [read] = history.timeline("exec-1")
    assert read == dataclasses.replace(
        written,
        scheduled_for=SCHEDULED,
        started_at=SCHEDULED + timedelta(seconds=1, microseconds=250),
        finished_at=SCHEDULED + timedelta(seconds=9),
        updated_at=SCHEDULED + timedelta(seconds=9),
    )
    assert all(
        t is not None and t.utcoffset() == timedelta(0)
        for t in (read.scheduled_for, read.started_at)
    )


def test_updated_at_defaults_to_the_latest_time_the_record_carries(history: SqlHistory) -> None:
    history.write([attempt(updated_at=None, finished_at=T3, state=AttemptState.SUCCEEDED)])

    assert [r.updated_at for r in history.timeline("exec-1")] == [T3]


def test_naive_times_are_refused(history: SqlHistory) -> None:
    with pytest.raises(ValueError, match="naive"):
        history.write([attempt(started_at=datetime(2026, 5, 1, 2, 0))])  # noqa: DTZ001 - a naive time on purpose: the call must refuse it


def test_writing_the_same_records_again_leaves_one_row_each(history: SqlHistory) -> None:
    records = [attempt("exec-1"), attempt("exec-1", 2), attempt("exec-2")]

    history.write(records)
    history.write(records)
    history.write(list(reversed(records)))

    assert row_count(history) == 3


# -- precedence: an attempt never moves backwards ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class Arrival:
    name: str
    first: dict[str, Any]
    second: dict[str, Any]
    kept: dict[str, Any]


ARRIVALS = [
    Arrival(
        "a later stage replaces an earlier one",
        first={"state": AttemptState.RUNNING, "updated_at": T1},
        second=finished(AttemptState.SUCCEEDED, T2),
        kept=finished(AttemptState.SUCCEEDED, T2),
    ),
    Arrival(
        "a terminal state is never regressed, even by a newer record",
        first=finished(AttemptState.SUCCEEDED, T2),
        second={"state": AttemptState.RUNNING, "updated_at": T3},
        kept=finished(AttemptState.SUCCEEDED, T2),
    ),
    Arrival(
        "an older running record arriving late changes nothing",
        first=finished(AttemptState.DEAD, T2, reason="AttemptsExhausted"),
        second={"state": AttemptState.RUNNING, "updated_at": T1},
        kept=finished(AttemptState.DEAD, T2, reason="AttemptsExhausted"),
    ),
    Arrival(
        "running never goes back to ready",
        first={"state": AttemptState.RUNNING, "updated_at": T1},
        second={"state": AttemptState.READY, "started_at": None, "updated_at": T2},
        kept={"state": AttemptState.RUNNING, "updated_at": T1},
    ),
    Arrival(
        "within one stage the later update wins",
        first=finished(AttemptState.FAILED, T2, error="first report"),
        second=finished(AttemptState.FAILED, T3, error="final report"),
        kept=finished(AttemptState.FAILED, T3, error="final report"),
    ),
    Arrival(
        "within one stage an older update is ignored",
        first=finished(AttemptState.FAILED, T3, error="final report"),
        second=finished(AttemptState.FAILED, T2, error="first report"),
        kept=finished(AttemptState.FAILED, T3, error="final report"),
    ),
]


@pytest.mark.parametrize("arrival", ARRIVALS, ids=lambda a: a.name)
def test_arrival_order_never_moves_an_attempt_backwards(
    history: SqlHistory, arrival: Arrival
) -> None:
    history.write([attempt(**arrival.first)])
    history.write([attempt(**arrival.second)])

    assert history.timeline("exec-1") == [attempt(**arrival.kept)]


@pytest.mark.parametrize("arrival", ARRIVALS, ids=lambda a: a.name)
def test_one_batch_holding_both_records_keeps_the_same_one(
    history: SqlHistory, arrival: Arrival
) -> None:
    history.write([attempt(**arrival.first), attempt(**arrival.second)])

    assert history.timeline("exec-1") == [attempt(**arrival.kept)]


# -- queries ----------------------------------------------------------------------------------


def test_attempts_for_job_are_that_jobs_newest_first(history: SqlHistory) -> None:
    days = [SCHEDULED + timedelta(days=d) for d in range(3)]
    history.write(
        [attempt(f"exec-{d}", scheduled_for=day) for d, day in enumerate(days)]
        + [attempt("exec-0", 2, scheduled_for=days[0])]
        + [attempt("other-job", job="cleanup"), attempt("other-ns", namespace="team-b")]
    )

    recent = history.attempts_for_job("team-a", "reconcile")
    assert [(r.execution_id, r.attempt) for r in recent] == [
        ("exec-2", 1),
        ("exec-1", 1),
        ("exec-0", 2),
        ("exec-0", 1),
    ]
    assert [r.execution_id for r in history.attempts_for_job("team-a", "reconcile", limit=2)] == [
        "exec-2",
        "exec-1",
    ]
    assert history.attempts_for_job("team-a", "missing") == []


def test_timeline_lists_an_executions_attempts_in_order(history: SqlHistory) -> None:
    history.write([attempt(number=n) for n in (3, 1, 2)] + [attempt("exec-2")])

    assert [r.attempt for r in history.timeline("exec-1")] == [1, 2, 3]
    assert history.timeline("unknown") == []


# -- retention --------------------------------------------------------------------------------


def test_retention_removes_whole_days_older_than_the_retention(history: SqlHistory) -> None:
    now = datetime(2026, 5, 20, 15, 30, tzinfo=UTC)
    cutoff = datetime(2026, 5, 13, tzinfo=UTC)  # the start of the UTC day RETENTION_DAYS before now
    expired = [cutoff - timedelta(days=3), cutoff - timedelta(microseconds=1)]
    kept = [cutoff, cutoff + timedelta(hours=12), now]
    history.write([attempt(f"at-{t.isoformat()}", scheduled_for=t) for t in expired + kept])

    expiry = history.drop_expired_partitions(now)

    assert expiry.cutoff == cutoff
    remaining = history.attempts_for_job("team-a", "reconcile")
    assert sorted(r.scheduled_for for r in remaining) == kept
    if history.partitioned:
        assert expiry.partitions_dropped == ["attempts_20260510", "attempts_20260512"]
        assert history.partitions() == ["attempts_20260513", "attempts_20260520"]
    else:
        assert expiry.rows_deleted == len(expired)
    assert history.drop_expired_partitions(now).partitions_dropped == []


def test_a_dropped_day_can_be_written_again(history: SqlHistory) -> None:
    old = attempt(scheduled_for=SCHEDULED)
    history.write([old])
    history.drop_expired_partitions(SCHEDULED + timedelta(days=RETENTION_DAYS + 2))

    history.write([old])  # e.g. a record buffered for longer than the retention

    assert history.timeline("exec-1") == [old]


def test_a_day_dropped_by_another_replica_can_be_written_again(history: SqlHistory) -> None:
    old = attempt(scheduled_for=SCHEDULED)
    history.write([old])  # this replica now knows the day's partition exists
    other = SqlHistory(
        str(history.engine.url.render_as_string(hide_password=False)), retention_days=1
    )
    try:
        other.drop_expired_partitions(SCHEDULED + timedelta(days=3))
    finally:
        other.close()

    history.write([old])

    assert history.timeline("exec-1") == [old]


# -- availability -----------------------------------------------------------------------------


def test_a_sqlite_connection_keeps_a_small_page_cache(tmp_path: Path) -> None:
    """Every pooled connection kept SQLite's default 2 MiB: the HTTP API's workers reading
    timelines at once held five of them (bench api, the operator's RSS serving)."""
    history = SqlHistory(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        with history.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA cache_size").scalar_one() == -SQLITE_CACHE_KIB
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
    finally:
        history.close()


def test_an_unreachable_database_is_history_unavailable(unreachable: SqlHistory) -> None:
    with pytest.raises(HistoryUnavailable):
        unreachable.write([attempt()])
    with pytest.raises(HistoryUnavailable):
        unreachable.timeline("exec-1")
    with pytest.raises(HistoryUnavailable):
        unreachable.migrate()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])  # SQLite's full disk is an OperationalError already
def test_a_database_refusing_writes_is_history_unavailable(history: SqlHistory) -> None:
    """A PostgreSQL database that takes no writes for now (read-only here; a full disk, a server
    shutting down alike) is an outage to wait out, not an error: the rows stay buffered."""
    url = history.engine.url
    with history.engine.connect() as connection:
        connection.exec_driver_sql(f'ALTER DATABASE "{url.database}" SET default_transaction_read_only = on')
        connection.commit()
    history.engine.dispose()  # new sessions take the setting
    try:
        with pytest.raises(HistoryUnavailable, match="read-only"):
            history.write([attempt()])
    finally:
        with history.engine.connect() as connection:
            connection.exec_driver_sql("SET TRANSACTION READ WRITE")  # this session began read-only
            connection.exec_driver_sql(f'ALTER DATABASE "{url.database}" RESET default_transaction_read_only')
            connection.commit()
        history.engine.dispose()
    history.write([attempt()])
    assert history.timeline("exec-1") == [attempt()]


# -- schema -----------------------------------------------------------------------------------


def test_migrating_again_changes_nothing(history: SqlHistory) -> None:
    history.write([attempt()])

    history.migrate()

    assert history.timeline("exec-1") == [attempt()]


def schema_shape(engine: sa.Engine) -> dict[str, Any]:
    """Tables, columns, keys and indexes as the database reports them, in comparable form."""
    inspector = sa.inspect(engine)
    shape: dict[str, Any] = {}
    for table in sorted(set(inspector.get_table_names()) - {VERSION_TABLE}):
        shape[table] = {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)
            ],
            "primary_key": inspector.get_pk_constraint(table),
            "indexes": sorted(repr(sorted(i.items())) for i in inspector.get_indexes(table)),
        }
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            shape["partition_key"] = connection.exec_driver_sql(
                "SELECT pg_get_partkeydef('attempts'::regclass)"
            ).scalar_one()
    return shape


def test_schema_sql_is_what_the_migrations_produce(
    backend: str, request: pytest.FixtureRequest
) -> None:
    canonical = sa.create_engine(fresh_dsn(backend, request, name="canonical"))
    statements = load_blocks(SCHEMA_FILE.read_text())[backend].split(";")
    with canonical.begin() as connection:
        for statement in filter(str.strip, statements):
            connection.exec_driver_sql(statement)
    migrated = SqlHistory(fresh_dsn(backend, request, name="migrated"))
    migrated.migrate()
    try:
        expected, actual = schema_shape(canonical), schema_shape(migrated.engine)
    finally:
        canonical.dispose()
        migrated.close()

    assert set(expected) >= {"attempts", "workflow_events"}
    assert actual == expected
    assert [name for name, _type, _nullable in actual["attempts"]["columns"]] == list(
        attempts.columns.keys()
    )


