"""Three operator replicas, 8 trigger shards fire 10,000 jobs due together exactly once, through a crash.

The replicas are `vigil.runtime.volume.start_trigger_shards` as `vigil operator` starts it (in
threads here), sharing 8 shards through real Leases on the real API server, against real
PostgreSQL with the system clock. Once they share the shards 3/3/2, 10,000 yearly jobs are
catalogued whose occurrence is due (a cron of 1 January, catalogued an hour before the
last one), and as soon as the first of them fires on a three-shard replica, that replica
crashes: its triggers stop, its database sessions are cut (each replica connects with an
`application_name` of its own, so its open transactions roll back as a killed process's
would), and its Leases are left to expire. The two survivors take its shards, 4/4, and
every job fires exactly once: one execution per job, and one mark per occurrence in a
ledger the test database keeps (tests/queue/marks.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from kubernetes.config import kube_config

from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import KubeCluster
from tests.queue.conftest import conninfo
from tests.queue.marks import marks, record_marks
from tests.waiting import wait_for
from vigil.core.recurring import RecurringJob
from vigil.kube.kits.shardleases import ShardLeases
from vigil.queue.catalogue import Catalogue
from vigil.queue.store import QueueStore
from vigil.runtime.clients import lease_config
from vigil.runtime.volume import start_trigger_shards
from vigil.settings import Settings

__all__ = ["postgres"]

pytestmark = pytest.mark.postgres

SHARDS = 8
JOBS = 10_000
REPLICAS = ("replica-a", "replica-b", "replica-c")
LEASE_SECONDS = 4
#: Cataloguing and firing 10,000 jobs on a loaded 2-core machine, plus a Lease expiry.
FIRE_TIMEOUT = 180


@pytest.fixture
def queue_dsn(postgres: PostgresServer) -> str:
    dsn = conninfo(postgres, postgres.create_database())
    QueueStore(dsn).migrate()
    record_marks(dsn)
    return dsn


def _settings(namespace: str, dsn: str) -> Settings:
    return Settings.model_validate(
        {
            "namespace": namespace,
            "queue": {"dsn": dsn, "shards": SHARDS},
            "leader_election": {"lease_duration_seconds": LEASE_SECONDS, "renew_period_seconds": 1},
        }
    )


@pytest.fixture
def replicas(
    cluster: KubeCluster, namespace: str, queue_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, ShardLeases]]:
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))
    started: dict[str, ShardLeases] = {}
    for me in REPLICAS:
        settings = _settings(namespace, f"{queue_dsn} application_name={me}")  # its sessions, to cut them
        made = start_trigger_shards(settings, lease_config(settings, lease_name="vigil-leader", me=me), me=me)
        assert made is not None
        started[me] = made
    yield started
    for made in started.values():
        made.release()


def _rows(dsn: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as connection:
        return connection.execute(query, params).fetchall()


def _fired_on(dsn: str, shards: set[int]) -> int:
    [(count,)] = _rows(
        dsn,
        "SELECT count(*) FROM vigil_queue.executions e JOIN vigil_queue.jobs j USING (job_id)"
        " WHERE j.shard = ANY(%s)",
        (sorted(shards),),
    )
    return int(str(count))


def crash(replica: ShardLeases, *, dsn: str, application_name: str) -> None:
    """Stop `replica` as a SIGKILL would: Leases left to expire, its open transactions rolled back.

    `stop()` ends the triggers after their pass in flight; cutting the replica's sessions
    while it stops makes that pass fail and roll back, as the death of its process would.
    """
    stopped = threading.Event()

    def stop() -> None:
        replica.stop()
        stopped.set()

    stopping = threading.Thread(target=stop, name=f"crash-{application_name}")
    stopping.start()
    with psycopg.connect(dsn, autocommit=True) as admin:
        while not stopped.is_set():
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (application_name,),
            )
            stopped.wait(0.02)
    stopping.join()


def test_three_replicas_fire_ten_thousand_due_jobs_once_through_a_leaders_crash(
    queue_dsn: str, replicas: dict[str, ShardLeases]
) -> None:
    def shares() -> list[int]:
        return sorted(len(r.running) for r in replicas.values())

    wait_for(lambda: shares() == [2, 3, 3], timeout=60, what="8 shards shared 3/3/2")
    victim_name = next(name for name, r in replicas.items() if len(r.running) == 3)
    victim = replicas[victim_name]
    victim_shards = victim.running

    new_year = datetime(datetime.now(UTC).year, 1, 1, tzinfo=UTC)  # past by the system clock: due now
    jobs = [RecurringJob("team-a/q", "report", "0 0 1 1 *", jitter=timedelta(0)) for _ in range(JOBS)]
    added: list[object] = []
    cataloguing = threading.Thread(
        target=lambda: added.extend(Catalogue(queue_dsn, shards=SHARDS).add_many(jobs, now=new_year - timedelta(hours=1)))
    )
    cataloguing.start()
    wait_for(lambda: _fired_on(queue_dsn, victim_shards) > 0, timeout=FIRE_TIMEOUT, interval=0.02,
             what="the first job fired on the victim's shards")  # fmt: skip
    crash(victim, dsn=queue_dsn, application_name=victim_name)
    fired_before_crash = _fired_on(queue_dsn, victim_shards)
    cataloguing.join(timeout=FIRE_TIMEOUT)
    assert len(added) == JOBS

    survivors = [r for name, r in replicas.items() if name != victim_name]
    wait_for(lambda: sorted(len(r.running) for r in survivors) == [4, 4], timeout=60,
             what="the survivors took the dead replica's shards, 4/4")  # fmt: skip
    assert survivors[0].running.isdisjoint(survivors[1].running)
    assert victim_shards <= survivors[0].running | survivors[1].running
    assert victim.running == set()

    def executions() -> list[tuple[object, ...]]:
        return _rows(queue_dsn, "SELECT job_id, count(*) FROM vigil_queue.executions GROUP BY job_id")

    wait_for(lambda: len(executions()) == JOBS, timeout=FIRE_TIMEOUT, what=f"{JOBS} jobs fired")
    catalogued = {row[0] for row in _rows(queue_dsn, "SELECT job_id FROM vigil_queue.jobs")}
    assert {job_id for job_id, _ in executions()} == catalogued
    assert {count for _, count in executions()} == {1}, "a job fired twice"
    # every occurrence marked once (fired rows of a past hour leave with upkeep: the ledger counts)
    ledger = marks(queue_dsn)
    assert len(ledger) == JOBS and {row[0] for row in ledger} == catalogued
    assert {(nominal, outcome, times) for _, nominal, outcome, _, times in ledger} == {(new_year, "Fired", 1)}
    fired = {row[0]: row[1] for row in _rows(queue_dsn, "SELECT job_id, execution_id FROM vigil_queue.executions")}
    assert all(fired[job_id] == execution for job_id, _, _, execution, _ in ledger)
    # and each chain goes on: exactly one next occurrence per job, a year on, waiting
    [(waiting, distinct, nominal)] = _rows(
        queue_dsn,
        "SELECT count(*), count(DISTINCT job_id), min(nominal) FROM vigil_queue.schedule_buckets"
        " WHERE fired_at IS NULL GROUP BY nominal",
    )
    assert (waiting, distinct, nominal) == (JOBS, JOBS, new_year.replace(year=new_year.year + 1))
    print(f"{fired_before_crash} jobs of the victim's shards had fired when it crashed; the survivors fired the rest")
