"""The history database refusing writes while jobs fire: firing goes on, rows wait, none is lost.

Invariant 7: the history database is off the firing path. Two real ways for it to refuse writes:

* **SQLite on a full disk**: the database lives on a small tmpfs of its own (mounted for the
  scenario: this needs root, which the suite's machines have), and a ballast file fills what is
  left of it, so every write fails with "database or disk is full";
* **PostgreSQL refusing writes**: the history database is set read-only
  (`default_transaction_read_only`) and its sessions cut, so every write is refused with
  "cannot execute INSERT in a read-only transaction".

Meanwhile a burst of one-off jobs comes due (tests/faults/controlplane.py's `Burst`), and every
one of them must fire while the database refuses. Then space returns (the ballast deleted; the
database writable again) and every fired Execution's rows are written. For the checker, `Held`
is what the history database holds at the end: a fired execution missing from it is
acknowledged-then-lost; each final row seen written is the database's acknowledgement, so the
time to recover is from space returning to the first row written (polled every 0.2 s).
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.contract.postgres import PostgresServer
from tests.faults.checker import Verdict, check
from tests.faults.controlplane import Burst, Replicas, now
from tests.faults.history import FaultPhase, Held, History, Submission
from tests.faults.settling import settle
from tests.faults.sizes import LONG, SIZES
from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.waiting import wait_for
from vigil.history.store import SqlHistory

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SPREAD = timedelta(seconds=60 if LONG else 8)
TMPFS_SIZE = "8m"  # the schema and a few hundred rows; a ballast takes the rest
CHUNK = b"\0" * 65536
FINAL = ("Succeeded", "Dead", "Cancelled")
BUFFERED = "executions stay buffered"  # vigil.kube.controllers.historyflush's warning while the database refuses


class Refusal:
    """How a history database is made to refuse writes, and to take them again."""

    dsn: str

    def refuse(self) -> None:
        raise NotImplementedError

    def accept(self) -> None:
        raise NotImplementedError


class FullDisk(Refusal):
    """SQLite on a tmpfs of `TMPFS_SIZE`; `refuse` fills it with a ballast file, `accept` deletes it."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        self.dsn = f"sqlite:///{mountpoint}/history.db"
        self.ballast = mountpoint / "ballast"

    def refuse(self) -> None:
        with self.ballast.open("wb") as out:
            try:
                while True:
                    out.write(CHUNK)
                    out.flush()
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
        with contextlib.suppress(OSError), self.ballast.open("ab") as out:  # the last page the first left
            out.write(b"\0" * 4096)

    def accept(self) -> None:
        self.ballast.unlink()


class ReadOnlyPostgres(Refusal):
    """A PostgreSQL database of its own; `refuse` makes it read-only for every session, `accept` undoes it."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.dsn = server.create_database()
        self.name = self.dsn.rsplit("/", 1)[1]

    def _set(self, statement: str) -> None:
        with psycopg.connect(self.server.conninfo(), autocommit=True) as admin:
            admin.execute(sql.SQL(statement).format(sql.Identifier(self.name)))
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (self.name,))

    def refuse(self) -> None:
        self._set("ALTER DATABASE {} SET default_transaction_read_only = on")

    def accept(self) -> None:
        self._set("ALTER DATABASE {} RESET default_transaction_read_only")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mountpoint = tmp_path / "small-disk"
    mountpoint.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "--lazy", str(mountpoint)], check=True)


@pytest.fixture(params=["sqlite disk full", "postgres refusing writes"])
def refusal(request: pytest.FixtureRequest, tmp_path: Path) -> Refusal:
    if request.param == "sqlite disk full":
        return FullDisk(request.getfixturevalue("small_disk"))
    return ReadOnlyPostgres(request.getfixturevalue("postgres"))


def rows(dsn: str) -> dict[str, str]:
    """Each execution's latest attempt's state in the history database."""
    history = SqlHistory(dsn)
    try:
        with history.engine.connect() as connection:
            found = connection.exec_driver_sql("SELECT execution_id, attempt, state FROM attempts").fetchall()
    finally:
        history.close()
    latest: dict[str, tuple[int, str]] = {}
    for execution, attempt, state in found:
        if execution not in latest or attempt > latest[execution][0]:
            latest[execution] = (int(attempt), str(state))
    return {execution: state for execution, (_, state) in latest.items()}


def test_firing_goes_on_while_the_history_database_refuses_writes_and_no_row_is_lost(
    cluster: KubeCluster, namespace: str, tmp_path: Path, refusal: Refusal, request: pytest.FixtureRequest,
    verdicts: list[Verdict],
) -> None:  # fmt: skip
    scenario = f"history database: {request.node.callspec.params['refusal']}"
    fleet = OperatorFleet(cluster, tmp_path, history={"dsn": refusal.dsn})
    try:
        Replicas(fleet, 1)
        fleet.leader(timeout=90)
        history = History(now, scenario=scenario)
        burst = Burst(cluster, namespace, history)
        wait_for(lambda: _answers(refusal.dsn), timeout=60, what="the operator to create the history schema")
        history.fault("history refuses writes", FaultPhase.START)
        refusal.refuse()
        burst.create(SIZES.history_jobs, first=now() + timedelta(seconds=3), spread=SPREAD)
        burst.wait_all_fired(timeout=120)  # while every write of history is refused
        wait_for(lambda: _settled(burst), timeout=120, what="every execution final")
        # the rows wait: the operator says so (the database is not read meanwhile: on a full disk
        # SQLite cannot even open it for reading, its shared-memory index being a file to create)
        wait_for(lambda: BUFFERED in fleet.logs(), timeout=60, what="the operator to buffer its rows")
        refusal.accept()
        history.fault("history refuses writes", FaultPhase.END)
        returned = time.monotonic()
        seen: set[str] = set()
        settle(lambda: _all_written(burst, refusal.dsn, history, seen), timeout=30, what="every row written")
        print(f"every row written {time.monotonic() - returned:.1f} s after the database took writes again")
        burst.record()
        # the store that must not lose anything here is the history database: Held is what it holds
        verdict = check([e for e in history.events if not isinstance(e, Held)] + _held(history, refusal.dsn),
                        scenario=scenario)  # fmt: skip
        verdicts.append(verdict)
        print(verdict)
        assert verdict.ok, verdict.problems()
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)


def _answers(dsn: str) -> bool:
    try:
        rows(dsn)
    except Exception:  # the operator has not created the schema yet
        return False
    return True


def _settled(burst: Burst) -> bool:
    seen = burst.executions.all()
    return len(seen) == len(burst.due) and all(s.facts.get("phase") in FINAL for s in seen)


def _all_written(burst: Burst, dsn: str, history: History, seen: set[str]) -> bool:
    """Whether every fired execution's final row is written; each newly seen one is recorded as
    the history database's acknowledgement (a submission ok), for the time to recover."""
    written = {execution for execution, state in rows(dsn).items() if state == "succeeded"}
    for execution in sorted(written - seen):
        history.submitted(f"history row {execution}", Submission.OK, execution)
    seen |= written
    return {s.facts["execution"] for s in burst.executions.all()} <= written


def _held(history: History, dsn: str) -> list[Held]:
    return [Held(history.clock(), execution, state) for execution, state in rows(dsn).items()]
