"""Real faults on a real PostgreSQL server under the volume tier, each scenario checked by the checker.

The server is the scenario's own (tests/contract/postgres.py), since scenarios stop it and cut its
connections. The trigger runs as an operator replica runs a shard (`vigil.queue.trigger.run` on a
thread) on a clock `SPEED` times fast from a day ago, so minutes pass in seconds; workers are the
`vigil.worker` SDK, in this process or as `vigil worker` subprocesses. The history is read back
from the store after the fact (tests/faults/store.py: an audit trigger keeps every mark the
trigger sets; the attempt rows say each lease, expiry and acknowledgement) plus the scenario's own
`Due` and `Fault` events, and judged by tests/faults/checker.py.

* **Restarted mid-pass and mid-lease.** Recurring jobs fire every simulated minute and workers run
  them; once a few minutes have fired the server stops (a fast shutdown: every connection cut,
  the trigger's pass and the workers' leases in flight), stays down over three of the jobs'
  minutes, and starts again. Every occurrence fires once (catch-up All), every execution is
  acknowledged and still held.
* **Every connection terminated** (`pg_terminate_backend`): the trigger's, the workers' and the
  worker's LISTEN connection, several times while tasks hold their leases (2 s). The worker
  heartbeats at once on reconnecting, so no lease expires (no rerun at all), the LISTEN
  connection is back within a second, and a task submitted then is woken by its notification.
* **A worker frozen past its lease** (SIGSTOP), then thawed (SIGCONT): another worker takes its
  tasks once the leases expire; the frozen one's late acknowledgements are refused and its
  attempts marked duplicate. Each rerun is excused by an expiry and counted.

Times to recover are in the scenario's time: simulated seconds for the trigger's (divide by
`SPEED` for real ones), real seconds for the workers'.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.contract.postgres import PostgresServer
from tests.faults.checker import Verdict, check
from tests.faults.history import Attempt, AttemptPhase, FaultPhase, History
from tests.faults.settling import settle
from tests.faults.sizes import SIZES
from tests.faults.store import install_ledger, record_from_store
from tests.queue.conftest import conninfo
from tests.queue.tasks import DSN_ENV, create_tables
from tests.queue.workers import FAST, in_process, release, runs, spawn
from tests.waiting import wait_for
from vigil.core.chain import CatchUp, CatchUpPolicy
from vigil.core.queue import Submission
from vigil.core.recurring import RecurringJob
from vigil.queue import trigger as trigger_module
from vigil.queue.catalogue import Catalogue
from vigil.queue.store import QueueStore

pytestmark = pytest.mark.postgres

QUEUE = "faults/q"
SPEED = 30  # simulated seconds per real second: a minute every 2 s
DOWN_FOR = timedelta(minutes=3)  # the restarted server's outage, in the jobs' minutes
#: Terminating every backend must not cost a held lease: the worker reconnects and heartbeats at
#: once, well within its 2 s lease (tests/queue/workers.py FAST); and re-subscribes as soon.
RESUBSCRIBE_WITHIN = 2.0
FROZEN_WORKER_LOG = "ran after its lease was taken (a duplicate)"


class FastClock:
    """Simulated time from `base`, SPEED times faster than the real clock, stopping at `end`."""

    def __init__(self, base: datetime, end: datetime) -> None:
        self.base, self.end = base, end
        self.began = time.monotonic()

    def now(self) -> datetime:
        return min(self.end, self.base + timedelta(seconds=(time.monotonic() - self.began) * SPEED))


@pytest.fixture
def dsn(own_postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> str:
    info = conninfo(own_postgres, own_postgres.create_database())
    QueueStore(info).migrate()
    install_ledger(info)
    create_tables(info)
    monkeypatch.setenv(DSN_ENV, info)
    return info


def _rows(dsn: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as connection:
        return connection.execute(query).fetchall()


def _answers(dsn: str) -> bool:
    try:
        _rows(dsn, "SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def _fired(dsn: str) -> int:
    return int(str(_rows(dsn, "SELECT count(*) FROM public.fault_marks")[0][0]))


@pytest.fixture
def firing(dsn: str) -> Iterator[tuple[FastClock, list[tuple[str, datetime]]]]:
    """The trigger of shard 0 running on a FastClock over SIZES.queue_jobs every-minute jobs; the
    clock and the occurrences due (each job's minutes 1..queue_minutes)."""
    base = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=1)
    end = base + timedelta(minutes=SIZES.queue_minutes)
    every_minute = RecurringJob(
        QUEUE, "record", "* * * * *", jitter=timedelta(0), max_attempts=20,
        catch_up=CatchUp(policy=CatchUpPolicy.ALL, window=timedelta(hours=1), limit=100),
    )  # fmt: skip
    added = Catalogue(dsn, shards=1).add_many([every_minute] * SIZES.queue_jobs, now=base)
    due = [(a.job_id, base + timedelta(minutes=m)) for a in added for m in range(1, SIZES.queue_minutes + 1)]
    clock, stop = FastClock(base, end), threading.Event()
    thread = threading.Thread(
        target=trigger_module.run,
        args=(trigger_module.ShardTrigger(dsn, shard=0),),
        kwargs={"clock": clock.now, "stop": stop},
        name="trigger-shard-0",
    )
    thread.start()
    try:
        yield clock, due
        assert thread.is_alive(), "the trigger thread died"
    finally:
        stop.set()
        thread.join(timeout=30)


def _judge(history: History, dsn: str, *, strict_leases: bool = False) -> Verdict:
    record_from_store(history, dsn, at=history.clock(), attempts=True)
    with psycopg.connect(dsn) as connection:  # a late acknowledgement refused: the attempt marked duplicate
        refused = connection.execute(
            "SELECT execution_id, attempt, worker, finished_at FROM vigil_queue.attempts WHERE duplicate"
        ).fetchall()
    history.extend(Attempt(at, str(eid), int(n), AttemptPhase.REFUSED, str(w)) for eid, n, w, at in refused)
    verdict = check(history, strict_leases=strict_leases)
    print(verdict)
    return verdict


def _all_acknowledged(dsn: str, count: int) -> bool:
    return _rows(dsn, "SELECT state, count(*) FROM vigil_queue.executions GROUP BY state") == [("succeeded", count)]


def test_postgres_restarted_mid_pass_and_mid_lease(
    own_postgres: PostgresServer, dsn: str, firing: tuple[FastClock, list[tuple[str, datetime]]],
    verdicts: list[Verdict],
) -> None:  # fmt: skip
    clock, due = firing
    history = History(clock.now, scenario="postgres restarted mid-pass and mid-lease")
    for job, nominal in due:
        history.due(job, nominal)
    jobs = SIZES.queue_jobs
    with in_process(dsn, QUEUE):
        wait_for(lambda: _fired(dsn) >= 2 * jobs, timeout=60, interval=0.05, what="two minutes fired")
        history.fault("postgres restarted", FaultPhase.START)
        own_postgres.stop()  # mid-pass: the trigger fires a minute's jobs every 2 s; workers hold leases
        stopped_at = clock.now()
        wait_for(lambda: clock.now() >= stopped_at + DOWN_FOR, timeout=30, what="the clock past the outage")
        own_postgres.start()
        wait_for(lambda: _answers(dsn), timeout=30, what="the server answering")
        history.fault("postgres restarted", FaultPhase.END)
        settle(lambda: _fired(dsn) == len(due), timeout=60, what="every occurrence marked")
        settle(lambda: _all_acknowledged(dsn, _fired(dsn)), timeout=60, what="every execution acknowledged")
    verdict = _judge(history, dsn)
    verdicts.append(verdict)
    assert verdict.ok, verdict.problems()
    assert verdict.due == len(due) and verdict.recovery is not None


def _succeeded(store: QueueStore, execution: str) -> bool:
    return (store.execution(execution) or {}).get("state") == "succeeded"


def _backends(admin: psycopg.Connection[tuple[object, ...]], *, listening: bool = False) -> list[int]:
    """The server's other sessions of this database (every LISTEN connection only, when asked)."""
    query = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    if listening:
        query += " AND query ILIKE 'LISTEN %%'"
    return [int(str(pid)) for (pid,) in admin.execute(query).fetchall()]


def test_every_connection_terminated_costs_no_lease_and_the_worker_listens_again_at_once(
    dsn: str, firing: tuple[FastClock, list[tuple[str, datetime]]], verdicts: list[Verdict]
) -> None:
    clock, due = firing
    history = History(clock.now, scenario="pg_terminate_backend: trigger, workers, LISTEN")
    for job, nominal in due:
        history.due(job, nominal)
    store = QueueStore(dsn)
    resubscribed: list[float] = []
    roomy = dataclasses.replace(FAST, concurrency=SIZES.held_tasks + 2)  # held tasks leave slots free
    with in_process(dsn, QUEUE, roomy), psycopg.connect(dsn, autocommit=True) as admin:
        held = store.submit(QUEUE, [Submission("hold") for _ in range(SIZES.held_tasks)], now=datetime.now(UTC))
        wait_for(lambda: {e for e, _, _, event in runs(dsn) if event == "started"} >= set(held), timeout=30,
                 what="every held task started")  # fmt: skip
        wait_for(lambda: _backends(admin, listening=True), timeout=30, what="the worker listening")
        for _ in range(SIZES.terminations):
            history.fault("every backend terminated", FaultPhase.START)
            cut = time.monotonic()
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()")  # fmt: skip
            history.fault("every backend terminated", FaultPhase.END)
            wait_for(lambda: _backends(admin, listening=True), timeout=30, interval=0.05,
                     what="the worker listening again")  # fmt: skip
            resubscribed.append(time.monotonic() - cut)
            # woken by its notification: the worker polls only every FAST.poll_interval otherwise
            [woken] = store.submit(QUEUE, [Submission("record")], now=datetime.now(UTC))
            wait_for(functools.partial(_succeeded, store, woken), timeout=30, what="a task submitted after the cut to run")
        for execution in held:
            release(dsn, execution)
        settle(lambda: _fired(dsn) == len(due), timeout=60, what="every occurrence marked")
        total = len(due) + len(held) + SIZES.terminations
        settle(lambda: _all_acknowledged(dsn, total), timeout=60, what="every execution acknowledged")
    verdict = _judge(history, dsn, strict_leases=True)
    verdicts.append(verdict)
    print(f"LISTEN back after {', '.join(f'{s:.2f}' for s in resubscribed)} s")
    assert verdict.ok, verdict.problems()
    assert verdict.reruns_allowed == 0, "a held lease expired: the worker did not heartbeat at once on reconnecting"
    assert max(resubscribed) < RESUBSCRIBE_WITHIN, resubscribed


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """`vigil worker` subprocesses a scenario started; whatever is left is thawed and killed."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait(timeout=30)


def test_a_worker_frozen_past_its_lease_is_refused_when_thawed_and_its_duplicates_counted(
    dsn: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]], verdicts: list[Verdict]
) -> None:
    history = History(lambda: datetime.now(UTC), scenario="worker frozen past its lease (SIGSTOP/SIGCONT)")
    store = QueueStore(dsn)
    processes.append(spawn(dsn, QUEUE, tmp_path / "frozen.log", "--concurrency", str(SIZES.held_tasks)))
    held = store.submit(QUEUE, [Submission("hold") for _ in range(SIZES.held_tasks)], now=datetime.now(UTC))

    def started(attempt: int) -> set[str]:
        return {e for e, n, _, event in runs(dsn) if event == "started" and n == attempt}

    wait_for(lambda: started(1) >= set(held), timeout=60, what="every task started on the first worker")
    processes[0].send_signal(signal.SIGSTOP)  # frozen: no heartbeat, its tasks stand still
    history.fault("worker frozen", FaultPhase.START)  # recovered from: the other worker acknowledges
    history.fault("worker frozen", FaultPhase.END)  # its tasks (a lease, an expiry pass, a rerun)
    processes.append(spawn(dsn, QUEUE, tmp_path / "other.log", "--concurrency", str(SIZES.held_tasks)))
    wait_for(lambda: started(2) >= set(held), timeout=60, what="every task started again on the other worker")
    for execution in held:
        release(dsn, execution)
    wait_for(lambda: _all_acknowledged(dsn, len(held)), timeout=60, what="the second copies acknowledged")
    processes[0].send_signal(signal.SIGCONT)  # thawed: it finishes its copies and reports them, late
    wait_for(lambda: len(_rows(dsn, "SELECT 1 FROM vigil_queue.attempts WHERE duplicate")) == len(held),
             timeout=60, what="every late acknowledgement refused and marked duplicate")  # fmt: skip
    verdict = _judge(history, dsn, strict_leases=True)
    verdicts.append(verdict)
    assert verdict.ok, verdict.problems()
    assert verdict.reruns_allowed == len(held), "each task ran twice, each rerun excused by its lease's expiry"
    assert FROZEN_WORKER_LOG in (tmp_path / "frozen.log").read_text()
    assert {state for _, state in _rows(dsn, "SELECT execution_id, state FROM vigil_queue.executions")} == {"succeeded"}
