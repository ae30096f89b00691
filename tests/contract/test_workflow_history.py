"""The workflow history contract of the history database, run against SQLite and a real PostgreSQL.

`SqlHistory` as a `WorkflowHistorySink` must behave the same on both databases:
entries round-trip with every field, aware UTC times and their JSON `data`
unchanged; writes are idempotent by (workflow uid, seq) and never change a row
already there; reads come back in seq order, for the newest workflow of a name
unless a uid is given, and one entry by uid and seq (where an offloaded step
output is read back); entry 0 carries the pinned definition (and only entry 0
may), which reads back as written; a history reads in pages by seq whose cursor
keeps to the uid the first page found, even when the name is used again between
pages; retention deletes a workflow's entries together once every one is older
than the cutoff; an unreachable database — including a real PostgreSQL stopped
under the adapter — is `HistoryUnavailable`; and a database migrated before
workflow history existed gains the table and keeps its attempts, and one
migrated before definitions were kept gains the column and keeps its entries
(their definition None).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import alembic.command
import alembic.config
import pytest
import sqlalchemy as sa

from tests.contract.historydb import RETENTION_DAYS, fresh_dsn
from tests.contract.postgres import PostgresServer
from vigil.core.history import AttemptRecord, AttemptState, WorkflowCursor, WorkflowEventRecord
from vigil.core.ports import HistoryUnavailable, WorkflowHistorySink
from vigil.history.migrations import SCRIPT_LOCATION
from vigil.history.store import WORKFLOW_EVENTS_BATCH, SqlHistory, workflow_events

STARTED = datetime(2026, 5, 1, 2, 0, tzinfo=UTC)
#: A pinned definition as a Workflow's status.definition holds it (with a parameter and a template).
PINNED = {
    "source": {"inline": True},
    "steps": [
        {"id": "extract", "type": "pod", "dependsOn": [], "template": {"spec": {"containers": [
            {"name": "main", "image": "busybox", "command": ["sh", "-c", "echo 'Zoë' \"$X\""]}]}}},
        {"id": "sign-off", "type": "approval", "dependsOn": ["extract"], "approval": {"approvers": ["group:ops"]}},
    ],
    "onFailure": "fail",
    "parameters": {"day": "2026-05-01", "limit": 10},
}  # fmt: skip
UID = "0b7e4c1a-0000-4000-8000-00000000000a"
LONDON = ZoneInfo("Europe/London")


def entry(
    seq: int, *, uid: str = UID, at: datetime | None = None, **changes: Any
) -> WorkflowEventRecord:
    """The `seq`th entry of a workflow's history, one second after the one before."""
    when = at or STARTED + timedelta(seconds=seq)
    base = WorkflowEventRecord(
        namespace="team-a",
        workflow="nightly-etl",
        workflow_uid=uid,
        seq=seq,
        event="StepSucceeded",
        step=f"step-{seq}",
        attempt=1,
        at=when,
        data={"seq": seq, "type": "StepSucceeded", "step": f"step-{seq}", "at": when.isoformat()},
    )
    return dataclasses.replace(base, **changes)


def history_of(
    uid: str, count: int, *, start: datetime, **changes: Any
) -> list[WorkflowEventRecord]:
    return [
        entry(seq, uid=uid, at=start + timedelta(minutes=seq), **changes) for seq in range(count)
    ]


def row_count(history: SqlHistory) -> int:
    with history.engine.connect() as connection:
        query = sa.select(sa.func.count()).select_from(workflow_events)
        return int(connection.execute(query).scalar_one())


def an_attempt(state: AttemptState, **times: datetime) -> AttemptRecord:
    """An execution attempt row, to show the attempts table is left to its own rules."""
    return AttemptRecord(
        execution_id="exec-1",
        attempt=1,
        namespace="team-a",
        job="reconcile",
        job_uid="job-uid",
        priority="normal",
        state=state,
        scheduled_for=STARTED,
        **times,
    )


# -- rows -------------------------------------------------------------------------------------


def test_an_entry_round_trips_with_every_field_in_utc(history: SqlHistory) -> None:
    local = STARTED.astimezone(LONDON) + timedelta(microseconds=250)
    written = [
        entry(0, event="WorkflowStarted", step=None, attempt=None, at=local),
        entry(1, event="StepFailed", step="extract", attempt=3),
    ]
    sink: WorkflowHistorySink = history  # SqlHistory is the port's adapter (checked by mypy)

    sink.write_workflow_events(written)

    read = history.workflow_events("team-a", "nightly-etl")
    assert read == [
        dataclasses.replace(written[0], at=STARTED + timedelta(microseconds=250)),
        written[1],
    ]
    assert (read[0].step, read[0].attempt) == (None, None)
    assert all(r.at.utcoffset() == timedelta(0) for r in read)


def test_the_entrys_json_data_is_kept_as_written(history: SqlHistory) -> None:
    data = {
        "type": "ApprovalGranted",
        "step": "sign-off",
        "by": "Zoë Ørsted <zoe@example.com>",
        "note": 'quotes " and \\ and a\nnewline',
        "attempt": 2,
        "ratio": 0.125,
        "big": 2**53 + 1,
        "flags": [True, False, None],
        "nested": {"outputs": {"rows": [1, 2, 3], "empty": {}, "none": []}},
    }

    history.write_workflow_events([entry(0, data=data)])

    [read] = history.workflow_events("team-a", "nightly-etl")
    assert read.data == data
    assert isinstance(read.data["attempt"], int) and isinstance(read.data["ratio"], float)
    assert read.data["big"] == 2**53 + 1  # no float rounding on the way through


def test_naive_times_and_negative_positions_are_refused(history: SqlHistory) -> None:
    with pytest.raises(ValueError, match="naive"):
        history.write_workflow_events([entry(0, at=datetime(2026, 5, 1, 2, 0))])  # noqa: DTZ001 - a naive time on purpose: the call must refuse it
    with pytest.raises(ValueError, match="negative"):
        history.write_workflow_events([entry(-1)])
    assert row_count(history) == 0


def test_writing_the_same_entries_again_leaves_one_row_each(history: SqlHistory) -> None:
    entries = [entry(seq) for seq in range(3)]

    history.write_workflow_events(entries)
    history.write_workflow_events(entries)
    history.write_workflow_events([*reversed(entries), entries[1]])  # repeated within one batch too

    assert row_count(history) == 3
    assert history.workflow_events("team-a", "nightly-etl") == entries


def test_an_entry_already_written_is_never_changed(history: SqlHistory) -> None:
    first = entry(0, event="StepStarted", data={"type": "StepStarted"})
    history.write_workflow_events([first])

    history.write_workflow_events(
        [dataclasses.replace(first, event="Other", data={"type": "Other"})]
    )

    assert history.workflow_events("team-a", "nightly-etl") == [first]


def test_more_entries_than_one_batch_are_all_written(history: SqlHistory) -> None:
    entries = [entry(seq) for seq in range(2 * WORKFLOW_EVENTS_BATCH + 3)]

    history.write_workflow_events(entries)

    assert [r.seq for r in history.workflow_events("team-a", "nightly-etl")] == list(
        range(len(entries))
    )


# -- queries ----------------------------------------------------------------------------------


def test_entries_come_back_in_seq_order_whatever_the_write_order(history: SqlHistory) -> None:
    history.write_workflow_events([entry(3), entry(1)])
    history.write_workflow_events([entry(4), entry(0), entry(2)])
    history.write_workflow_events(
        [
            entry(0, uid="other-workflow", workflow="weekly"),
            entry(0, uid="other-namespace", namespace="team-b"),
        ]
    )

    assert [r.seq for r in history.workflow_events("team-a", "nightly-etl")] == [0, 1, 2, 3, 4]
    assert [r.workflow_uid for r in history.workflow_events("team-a", "weekly")] == [
        "other-workflow"
    ]
    assert history.workflow_events("team-a", "missing") == []


def test_one_entry_reads_back_by_uid_and_seq(history: SqlHistory) -> None:
    output = {"rendition": "480p", "bytes": "x" * 5000}
    written = [entry(0), entry(1, event="PodSucceeded", data={"event": "PodSucceeded", "output": output})]
    history.write_workflow_events([*written, entry(1, uid="another-uid")])
    sink: WorkflowHistorySink = history
    assert sink.workflow_event(UID, 1) == written[1]
    assert (sink.workflow_event(UID, 1) or written[0]).data["output"] == output
    assert sink.workflow_event(UID, 2) is None
    assert sink.workflow_event("no-such-uid", 0) is None


def test_a_reused_name_reads_as_its_newest_workflow_unless_a_uid_is_given(
    history: SqlHistory,
) -> None:
    old = history_of("uid-old", 4, start=STARTED)
    new = history_of("uid-new", 2, start=STARTED + timedelta(days=1))
    history.write_workflow_events(new + old)

    assert history.workflow_events("team-a", "nightly-etl") == new
    assert history.workflow_events("team-a", "nightly-etl", uid="uid-old") == old
    assert history.workflow_events("team-a", "nightly-etl", uid="uid-unknown") == []
    assert history.workflow_events("team-b", "nightly-etl", uid="uid-old") == []


# -- the definition on entry 0, and pages -----------------------------------------------------


def test_entry_0_carries_the_pinned_definition_and_no_other_entry_does(history: SqlHistory) -> None:
    written = [entry(0, definition=PINNED), entry(1), entry(2)]

    history.write_workflow_events(written)

    read = history.workflow_events("team-a", "nightly-etl")
    assert read == written
    assert read[0].definition == PINNED and [r.definition for r in read[1:]] == [None, None]
    assert history.workflow_event(UID, 0) == written[0]
    with history.engine.connect() as connection:  # SQL NULL, not JSON null, on the other entries
        query = sa.select(sa.func.count()).select_from(workflow_events).where(workflow_events.c.definition.is_(None))
        assert connection.execute(query).scalar_one() == 2
    with pytest.raises(ValueError, match="only entry 0"):
        history.write_workflow_events([entry(3, definition=PINNED)])


def test_a_history_reads_in_pages_by_seq_to_the_end(history: SqlHistory) -> None:
    written = [entry(0, definition=PINNED), *(entry(seq) for seq in range(1, 7))]
    history.write_workflow_events(written)

    pages, after = [], None
    while True:
        page = history.workflow_history("team-a", "nightly-etl", limit=3, after=after)
        pages.append([r.seq for r in page.entries])
        if page.after is None:
            break
        after = page.after
    assert pages == [[0, 1, 2], [3, 4, 5], [6]]
    assert history.workflow_history("team-a", "nightly-etl", limit=7).after is None
    assert history.workflow_history("team-a", "missing", limit=3).entries == []
    with pytest.raises(ValueError, match="at least 1"):
        history.workflow_history("team-a", "nightly-etl", limit=0)


def test_the_pages_after_the_first_keep_to_its_workflow_when_the_name_is_used_again(
    history: SqlHistory,
) -> None:
    old = history_of("uid-old", 4, start=STARTED)
    history.write_workflow_events(old)
    first = history.workflow_history("team-a", "nightly-etl", limit=2)
    assert first.after == WorkflowCursor("uid-old", 1)

    history.write_workflow_events(history_of("uid-new", 3, start=STARTED + timedelta(days=1)))

    assert history.workflow_history("team-a", "nightly-etl", limit=2, after=first.after).entries == old[2:]
    assert [r.workflow_uid for r in history.workflow_history("team-a", "nightly-etl", limit=2).entries] == [
        "uid-new", "uid-new",
    ]  # fmt: skip
    # A cursor names a uid, but the name and namespace asked for still bound what it reads.
    elsewhere = history.workflow_history("team-b", "nightly-etl", limit=2, after=WorkflowCursor("uid-old", -1))
    assert elsewhere.entries == [] and elsewhere.after is None


# -- retention --------------------------------------------------------------------------------


def test_retention_deletes_a_workflows_entries_once_all_are_older_than_the_cutoff(
    history: SqlHistory,
) -> None:
    now = datetime(2026, 5, 20, 15, 30, tzinfo=UTC)
    cutoff = datetime(2026, 5, 13, tzinfo=UTC)  # the start of the UTC day RETENTION_DAYS before now
    finished = history_of("finished", 3, start=cutoff - timedelta(days=2))
    just_before = [entry(0, uid="just-before", workflow="b", at=cutoff - timedelta(microseconds=1))]
    spanning = history_of("spanning", 2, start=cutoff - timedelta(minutes=1), workflow="c")
    recent = history_of("recent", 2, start=cutoff, workflow="d")
    history.write_workflow_events(finished + just_before + spanning + recent)

    expiry = history.drop_expired_partitions(now)

    assert expiry.cutoff == cutoff
    assert expiry.workflow_events_deleted == len(finished) + len(just_before)
    assert history.workflow_events("team-a", "nightly-etl") == []
    assert history.workflow_events("team-a", "b") == []
    assert history.workflow_events("team-a", "c") == spanning  # still writing: kept whole
    assert history.workflow_events("team-a", "d") == recent
    assert history.drop_expired_partitions(now).workflow_events_deleted == 0


def test_retention_leaves_attempts_to_their_own_rule(history: SqlHistory) -> None:
    now = STARTED + timedelta(days=RETENTION_DAYS + 2)
    old_attempt = an_attempt(AttemptState.SUCCEEDED, finished_at=STARTED)
    history.write([old_attempt])
    history.write_workflow_events(history_of(UID, 2, start=now))

    expiry = history.drop_expired_partitions(now)

    assert history.timeline("exec-1") == []
    assert expiry.workflow_events_deleted == 0
    assert len(history.workflow_events("team-a", "nightly-etl")) == 2


# -- availability -----------------------------------------------------------------------------


def test_an_unreachable_database_is_history_unavailable(unreachable: SqlHistory) -> None:
    with pytest.raises(HistoryUnavailable):
        unreachable.write_workflow_events([entry(0)])
    with pytest.raises(HistoryUnavailable):
        unreachable.workflow_events("team-a", "nightly-etl")
    with pytest.raises(HistoryUnavailable):
        unreachable.workflow_event(UID, 0)
    with pytest.raises(HistoryUnavailable):
        unreachable.drop_expired_partitions(STARTED)

    unreachable.write_workflow_events([])  # nothing to write: the database is not asked


@pytest.mark.postgres
def test_entries_written_through_a_postgres_outage_are_in_once_it_returns(
    postgres: PostgresServer,
) -> None:
    history = SqlHistory(postgres.create_database(), connect_timeout_seconds=2)
    history.migrate()
    entries = [entry(seq) for seq in range(6)]
    history.write_workflow_events(entries[:3])

    postgres.stop()
    try:
        with pytest.raises(HistoryUnavailable):
            history.write_workflow_events(entries)
        with pytest.raises(HistoryUnavailable):
            history.workflow_events("team-a", "nightly-etl")
    finally:
        postgres.start()

    history.write_workflow_events(entries)  # the caller's retry: the first three again, harmlessly
    assert history.workflow_events("team-a", "nightly-etl") == entries
    assert row_count(history) == len(entries)
    history.close()


# -- schema -----------------------------------------------------------------------------------


def test_a_database_from_before_workflow_history_gains_it_and_keeps_its_attempts(
    backend: str, request: pytest.FixtureRequest
) -> None:
    history = SqlHistory(fresh_dsn(backend, request))
    config = alembic.config.Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    with history.engine.begin() as connection:
        config.attributes["connection"] = connection
        alembic.command.upgrade(config, "0001")
    assert not sa.inspect(history.engine).has_table("workflow_events")
    attempt = an_attempt(AttemptState.RUNNING, started_at=STARTED)
    history.write([attempt])

    history.migrate()

    try:
        columns = [c["name"] for c in sa.inspect(history.engine).get_columns("workflow_events")]
        assert columns == list(workflow_events.columns.keys())
        assert [r.attempt for r in history.timeline("exec-1")] == [1]
        history.write_workflow_events([entry(0)])
        assert history.workflow_events("team-a", "nightly-etl") == [entry(0)]
    finally:
        history.close()


def test_entries_mirrored_before_definitions_were_kept_read_back_without_one(
    backend: str, request: pytest.FixtureRequest
) -> None:
    history = SqlHistory(fresh_dsn(backend, request))
    config = alembic.config.Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    with history.engine.begin() as connection:
        config.attributes["connection"] = connection
        alembic.command.upgrade(config, "0002")
        columns = [c for c in workflow_events.columns if c.name != "definition"]  # the table 0002 made
        as_0002 = sa.Table("workflow_events", sa.MetaData(), *(c._copy() for c in columns))
        connection.execute(sa.insert(as_0002), [{c.name: getattr(entry(0), c.name) for c in columns}])

    history.migrate()

    try:
        [read] = history.workflow_events("team-a", "nightly-etl")
        assert (read.seq, read.definition) == (0, None)
        history.write_workflow_events([entry(0, uid="uid-after", definition=PINNED)])
        assert history.workflow_events("team-a", "nightly-etl", uid="uid-after")[0].definition == PINNED
    finally:
        history.close()
