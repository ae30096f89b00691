"""The operator's wiring of the volume tier's trigger: replicas share the shards and fire each due job once.

Two replicas (`vigil.runtime.volume.start_trigger_shards`, as `vigil operator` starts it,
in threads here) share 4 shards through real Leases and fire 200 due recurring jobs
from real PostgreSQL with the system clock: every job exactly once. A queue store that
does not answer yet holds back only the shards, which start once it does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from kubernetes.config import kube_config

from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import KubeCluster
from tests.integration.tcpproxy import TcpProxy
from tests.queue.conftest import conninfo
from tests.waiting import wait_for
from vigil.kube.kits.shardleases import ShardLeases
from vigil.queue.catalogue import Catalogue, RecurringJob
from vigil.queue.store import QueueStore
from vigil.runtime.clients import lease_config
from vigil.runtime.volume import start_trigger_shards
from vigil.settings import Settings

__all__ = ["postgres"]

pytestmark = pytest.mark.postgres

SHARDS = 4
JOBS = 200


@pytest.fixture
def queue_dsn(postgres: PostgresServer) -> str:
    dsn = conninfo(postgres, postgres.create_database())
    QueueStore(dsn).migrate()  # the replicas migrate too, in the background: the jobs go in first
    return dsn


def _settings(namespace: str, dsn: str, **queue: float) -> Settings:
    return Settings.model_validate(
        {
            "namespace": namespace,
            "queue": {"dsn": dsn, "shards": SHARDS, **queue},
            "leader_election": {"lease_duration_seconds": 4, "renew_period_seconds": 1},
        }
    )


@pytest.fixture
def replicas(
    cluster: KubeCluster, namespace: str, queue_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[ShardLeases]]:
    # The runtime finds its cluster as `vigil operator` does outside a pod: the kubeconfig.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))
    settings = _settings(namespace, queue_dsn)
    started: list[ShardLeases] = []
    for me in ("replica-a", "replica-b"):
        made = start_trigger_shards(settings, lease_config(settings, lease_name="vigil-leader", me=me), me=me)
        assert made is not None
        started.append(made)
    yield started
    for made in started:
        made.release()


def test_two_replicas_share_the_shards_and_fire_every_due_job_once(queue_dsn: str, replicas: list[ShardLeases]) -> None:
    # A yearly job catalogued before its 1 January: due once by the system clock, next due a year on.
    new_year = datetime(datetime.now(UTC).year, 1, 1, tzinfo=UTC)
    jobs = [RecurringJob("team-a/q", "report", "0 0 1 1 *") for _ in range(JOBS)]
    added = Catalogue(queue_dsn, shards=SHARDS).add_many(jobs, now=new_year - timedelta(hours=1))

    def fired() -> list[tuple[str, int]]:
        with psycopg.connect(queue_dsn) as connection:
            return connection.execute(
                "SELECT job_id, count(*) FROM vigil_queue.executions GROUP BY job_id"
            ).fetchall()

    wait_for(lambda: len(fired()) == JOBS, timeout=60, what=f"{JOBS} jobs fired")
    assert {job_id for job_id, _ in fired()} == {a.job_id for a in added}
    assert {count for _, count in fired()} == {1}
    wait_for(lambda: sorted(len(r.running) for r in replicas) == [2, 2], timeout=30, what="shards shared 2/2")
    assert replicas[0].running.isdisjoint(replicas[1].running)


def test_a_queue_store_not_there_yet_holds_back_only_the_shards_until_it_answers(
    cluster: KubeCluster, namespace: str, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))
    name = f"later_{namespace.replace('-', '_')}"
    settings = _settings(namespace, conninfo(postgres, postgres.database_dsn(name)))
    shards = start_trigger_shards(settings, lease_config(settings, lease_name="vigil-leader", me="early"), me="early")
    assert shards is not None, "start_trigger_shards waited for the store instead of returning"
    try:
        assert shards.running == set()
        postgres.create_database(name)
        wait_for(lambda: len(shards.running) == SHARDS, timeout=60, what="the shards started once the store answered")
    finally:
        shards.release()


def test_a_replica_cut_off_from_the_store_hands_its_shards_over_and_rejoins_when_it_answers(
    cluster: KubeCluster, namespace: str, queue_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A reaches the store through a relay that then stops forwarding (it answers nothing and
    closes nothing, as a wedged proxy); B reaches it directly. Before, A kept its shards' Leases and
    nothing of its shards fired until the path healed. Now A's passes are broken off at their
    deadline, A withdraws after `unreachable_after` (releasing its Leases), and B runs every shard,
    firing A's jobs too, while A stays out (its store still does not answer)."""
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))
    parts = psycopg.conninfo.conninfo_to_dict(queue_dsn)
    relay = TcpProxy(str(parts["host"]), int(parts["port"]))
    # A's transactions cut off mid-way are rolled back by the server in 2 s, not the default 30 s:
    # until then B's passes may wait on their locks (partition upkeep takes table locks)
    through = psycopg.conninfo.make_conninfo(
        queue_dsn, port=str(relay.port), options="-c idle_in_transaction_session_timeout=2000"
    )
    quick = {"pass_deadline_seconds": 1, "unreachable_after_seconds": 2}
    started: list[ShardLeases] = []
    try:
        for me, dsn in (("replica-a", through), ("replica-b", queue_dsn)):
            settings = _settings(namespace, dsn, **quick)
            made = start_trigger_shards(settings, lease_config(settings, lease_name="vigil-leader", me=me), me=me)
            assert made is not None
            started.append(made)
        a, b = started
        wait_for(lambda: sorted(len(r.running) for r in started) == [2, 2], timeout=60, what="shards shared 2/2")
        relay.stop_forwarding()
        cut = time.monotonic()
        wait_for(lambda: a.withdrawn and len(b.running) == SHARDS, timeout=90, what="B running every shard")
        handed_over = time.monotonic() - cut
        # jobs on every shard, due (as in the first test): all fire, through B alone
        new_year = datetime(datetime.now(UTC).year, 1, 1, tzinfo=UTC)
        jobs = [RecurringJob("team-a/q", "report", "0 0 1 1 *") for _ in range(40)]
        added = Catalogue(queue_dsn, shards=SHARDS).add_many(jobs, now=new_year - timedelta(hours=1))
        with psycopg.connect(queue_dsn) as connection:
            shards = connection.execute("SELECT DISTINCT shard FROM vigil_queue.jobs").fetchall()
        assert len(shards) == SHARDS

        def fired() -> set[str]:
            with psycopg.connect(queue_dsn) as connection:
                rows = connection.execute("SELECT DISTINCT job_id FROM vigil_queue.executions").fetchall()
                return {row[0] for row in rows}

        wait_for(lambda: {x.job_id for x in added} <= fired(), timeout=120, what="every shard's jobs fired by B")
        assert a.running == set() and a.withdrawn
    finally:
        for made in started:
            made.release()
        relay.close()
    # the pass deadline (1 s), unreachable_after (2 s), a connect timeout (10 s) and the probe's (5 s),
    # then B's next round and campaign, and B's first passes waiting out A's cut-off locks (2 s):
    # 27 s measured on a loaded 2-core machine
    assert handed_over < 1 + 2 + 10 + 5 + 20, handed_over
