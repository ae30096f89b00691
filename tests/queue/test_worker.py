"""The worker SDK against real PostgreSQL: in-process workers, and `vigil worker` subprocesses killed,
frozen and stopped (SIGKILL, SIGSTOP, SIGTERM), observed through what the tasks wrote and the store.

Waits are conditions with deadlines (tests/waiting.py); the only sleeping is the
`hold` task's own polling for its release, which is the workload.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.queue.conftest import execution_row
from tests.queue.tasks import DSN_ENV, create_tables
from tests.queue.workers import FAST, in_process, release, runs, spawn
from tests.waiting import wait_for
from vigil import metrics
from vigil.core.queue import QueueDeclaration, split_queue_key
from vigil.queue.store import QueueStore, Submission

pytestmark = pytest.mark.postgres

LEASE_SECONDS = FAST.lease.total_seconds()


@pytest.fixture
def tables(dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    create_tables(dsn)
    monkeypatch.setenv(DSN_ENV, dsn)
    return dsn


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Subprocess workers started by a test; whatever is left is killed at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait(timeout=30)


def now() -> datetime:
    return datetime.now(UTC)


def events(dsn: str, execution_id: str) -> list[tuple[int, str]]:
    return [(attempt, event) for _, attempt, _, event in runs(dsn, execution_id)]


def succeeded_metric(queue: str) -> float:
    """The worker's counter of `queue` (a store key, NS/NAME), labelled as the operator's gauges are."""
    namespace, name = split_queue_key(queue)
    labels = {"namespace": namespace, "queue": name, "outcome": "succeeded"}
    return metrics.REGISTRY.get_sample_value("vigil_queue_attempts_total", labels) or 0.0


def test_submitted_work_runs_once_and_is_acknowledged(store: QueueStore, tables: str) -> None:
    queue = "shop/orders"  # a TaskQueue's key: its metrics carry namespace="shop", queue="orders"
    before = succeeded_metric(queue)
    with in_process(tables, queue) as counts:
        ids = store.submit(queue, [Submission("record", {"n": i}) for i in range(20)], now=now())
        ids += store.submit(queue, [Submission("record_async")], now=now())
        wait_for(lambda: store.counts(queue)["succeeded"] == 21, timeout=30, what="21 succeeded")
    assert sorted(eid for eid, *_ in runs(tables) if _[2] == "ran") == sorted(ids)
    assert counts.succeeded == 21 and counts.failed == 0
    assert succeeded_metric(queue) - before == 21
    assert [h["outcome"] for h in store.attempts(ids[0])] == ["succeeded"]
    assert events(tables, ids[-1]) == [(1, "ran"), (1, "acted")]


def test_a_poison_task_is_retried_then_dead_lettered_while_the_rest_flows(
    store: QueueStore, tables: str
) -> None:
    with in_process(tables, "q"):
        [poison] = store.submit("q", [Submission("poison", {"n": 0}, max_attempts=3)], now=now())
        good = store.submit("q", [Submission("record") for _ in range(30)], now=now())
        wait_for(lambda: store.counts("q") == {"ready": 0, "leased": 0, "succeeded": 30, "dead": 1, "cancelled": 0},
                 timeout=30, what="30 succeeded and 1 dead")  # fmt: skip
    dead = store.execution(poison)
    assert dead is not None and dead["attempt"] == 3 and "poison 0" in dead["last_error"]
    assert [(h["attempt"], h["outcome"]) for h in store.attempts(poison)] == [
        (1, "failed"), (2, "failed"), (3, "failed"),
    ]  # fmt: skip
    assert events(tables, poison) == [(1, "ran"), (2, "ran"), (3, "ran")]  # same id every attempt
    assert [(store.execution(eid) or {}).get("state") for eid in good] == ["succeeded"] * len(good)


def test_a_worker_killed_mid_task_runs_again_with_the_same_id_after_its_lease(
    store: QueueStore, tables: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    processes.append(spawn(tables, "q", tmp_path / "a.log"))
    [eid] = store.submit("q", [Submission("hold")], now=now())
    wait_for(lambda: (1, "started") in events(tables, eid), timeout=30, what="attempt 1 started")
    processes.append(spawn(tables, "q", tmp_path / "b.log"))  # idle beside it, ready to take over
    wait_for(lambda: "queue q, tasks " in (tmp_path / "b.log").read_text(), timeout=30, what="worker b up")
    processes[0].kill()
    killed = time.monotonic()
    wait_for(lambda: (2, "started") in events(tables, eid), timeout=30, interval=0.05, what="attempt 2")
    rerun_after = time.monotonic() - killed
    release(tables, eid)
    wait_for(lambda: (store.execution(eid) or {}).get("state") == "succeeded", timeout=30, what="success")
    assert [(h["attempt"], h["outcome"]) for h in store.attempts(eid)] == [
        (1, "lease_expired"), (2, "succeeded"),
    ]  # fmt: skip
    # the lease (its last extension was at most one heartbeat before the kill), then one expiry
    # pass and one lease round trip; issue 13's target is lease + 1 s, with room for a loaded machine
    print(f"re-run {rerun_after:.2f}s after SIGKILL, lease {LEASE_SECONDS:.0f}s")
    assert rerun_after < LEASE_SECONDS + 2, rerun_after


def test_a_frozen_worker_past_its_lease_runs_a_duplicate_and_once_lets_one_act(
    store: QueueStore, tables: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    processes.append(spawn(tables, "q", tmp_path / "a.log"))
    [eid] = store.submit("q", [Submission("hold")], now=now())
    wait_for(lambda: (1, "started") in events(tables, eid), timeout=30, what="attempt 1 started")
    processes[0].send_signal(signal.SIGSTOP)  # frozen: no heartbeat, the task stands still
    processes.append(spawn(tables, "q", tmp_path / "b.log"))
    wait_for(lambda: (2, "started") in events(tables, eid), timeout=30, what="the duplicate started")
    release(tables, eid)
    wait_for(lambda: (2, "finished") in events(tables, eid), timeout=30, what="the duplicate finished")
    processes[0].send_signal(signal.SIGCONT)  # the first copy wakes and carries on
    wait_for(lambda: (1, "finished") in events(tables, eid), timeout=30, what="the first copy finished")
    wait_for(lambda: store.attempts(eid)[0]["duplicate"], timeout=30, what="attempt 1 marked duplicate")
    seen = events(tables, eid)
    assert [event for event in seen if event[1] in ("acted", "skipped")] in (
        [(2, "acted"), (1, "skipped")],
        [(1, "skipped"), (2, "acted")],
    )
    assert (store.execution(eid) or {}).get("state") == "succeeded"
    assert "ran after its lease was taken (a duplicate)" in (tmp_path / "a.log").read_text()


def test_sigterm_drains_in_flight_work_and_leases_nothing_more(
    store: QueueStore, tables: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "a.log"
    processes.append(spawn(tables, "q", log))
    [eid] = store.submit("q", [Submission("hold")], now=now())
    wait_for(lambda: (1, "started") in events(tables, eid), timeout=30, what="attempt 1 started")
    processes[0].send_signal(signal.SIGTERM)
    wait_for(lambda: "draining 1 in-flight" in log.read_text(), timeout=30, what="the drain to begin")
    [later] = store.submit("q", [Submission("record")], now=now())
    release(tables, eid)
    assert processes[0].wait(timeout=30) == 0
    assert (store.execution(eid) or {}).get("state") == "succeeded"
    assert [(h["attempt"], h["outcome"]) for h in store.attempts(eid)] == [(1, "succeeded")]
    assert (store.execution(later) or {}).get("state") == "ready"  # submitted after SIGTERM: left


def test_an_idle_worker_is_woken_by_notify_not_by_its_poll(store: QueueStore, tables: str) -> None:
    """With a minute-long poll, only the submit's NOTIFY can start the work within seconds."""
    slow_poll = dataclasses.replace(FAST, poll_interval=timedelta(minutes=1), expiry_interval=timedelta(minutes=1))
    with in_process(tables, "q", slow_poll):
        wait_for(lambda: listening(tables), timeout=30, what="the worker to LISTEN")
        submitted = time.monotonic()
        [eid] = store.submit("q", [Submission("record")], now=now())
        wait_for(lambda: (store.execution(eid) or {}).get("state") == "succeeded", timeout=20,
                 interval=0.05, what="the notified execution to succeed")  # fmt: skip
        assert time.monotonic() - submitted < 20


def listening(dsn: str) -> bool:
    with psycopg.connect(dsn) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
        ).fetchone()
    return row is not None and row[0] > 0


def test_work_cut_short_by_the_drain_timeout_is_left_to_its_lease(store: QueueStore, tables: str) -> None:
    """Neither acknowledged nor failed: the lease stays until it expires, and the work runs again."""
    quick_drain = dataclasses.replace(FAST, drain_timeout=timedelta(milliseconds=300))
    with in_process(tables, "q", quick_drain):
        [eid] = store.submit("q", [Submission("hold_async")], now=now())
        wait_for(lambda: (1, "started") in events(tables, eid), timeout=30, what="attempt 1 started")
    row = store.execution(eid)
    assert row is not None and (row["state"], row["attempt"]) == ("leased", 1)
    assert store.attempts(eid) == []
    with in_process(tables, "q"):
        wait_for(lambda: (2, "started") in events(tables, eid), timeout=30, what="attempt 2 after the lease")
        release(tables, eid)
        wait_for(lambda: (store.execution(eid) or {}).get("state") == "succeeded", timeout=30, what="success")


def test_a_worker_follows_its_queues_declaration_lease_and_reserved_slots(store: QueueStore, tables: str) -> None:
    """The declared lease wins over the worker's flag; half of a 4-slot worker stays for priority 0."""
    declared = QueueDeclaration(lease=timedelta(seconds=40), heartbeat=timedelta(seconds=10), priorities={0: 0.5})
    store.declare("q", declared, generation=1, now=now())
    backfill = store.submit("q", [Submission("hold", priority=9) for _ in range(6)], now=now())
    with in_process(tables, "q"):
        wait_for(lambda: store.counts("q")["leased"] == 2, timeout=30, what="the backfill in the shared slots")
        urgent = store.submit("q", [Submission("hold", priority=0) for _ in range(2)], now=now())
        wait_for(lambda: store.counts("q")["leased"] == 4, timeout=30, what="priority 0 in its reserved slots")
        held = [execution_row(store, eid) for eid in urgent]
        assert all(h["state"] == "leased" for h in held)
        left = held[0]["lease_expires_at"] - now()
        assert timedelta(seconds=30) < left <= timedelta(seconds=40)  # the declaration's, not FAST's 2 s
        for eid in backfill + urgent:
            release(tables, eid)
        wait_for(lambda: store.counts("q")["succeeded"] == 8, timeout=60, what="everything to finish")
