"""Trigger shards shared between replicas through real coordination.k8s.io/v1 Leases.

Three `ShardLeases` (three operator replicas, as threads) share 8 shards: each
shard's trigger runs on exactly one of them, 3/3/2. One replica dies (it stops
without releasing, as a SIGKILL would leave it): its Leases expire and the two
survivors take its shards, 4/4. It comes back: the shards it owns are handed
over to it. Throughout, no shard's trigger ever runs on two replicas at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.integration.conftest import KubeCluster
from tests.waiting import wait_for
from vigil.kube.kits.shardleases import ShardLeases

SHARDS = 8
LEASE_SECONDS = 2.0
RENEW_SECONDS = 0.5
#: A 2-core machine runs the API server, etcd and three replicas' threads in one place.
MARGIN_SECONDS = 5.0
TAKEOVER_TIMEOUT = 2 * LEASE_SECONDS + 2 * RENEW_SECONDS + MARGIN_SECONDS


class Fleet:
    """The replicas, and where each shard's trigger runs now (checked on every change)."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.replicas: dict[str, ShardLeases] = {}
        self.lock = threading.Lock()
        self.where: dict[int, set[str]] = {shard: set() for shard in range(SHARDS)}
        self.doubled: list[tuple[int, set[str]]] = []

    def start(self, identity: str) -> ShardLeases:
        def on_acquired(shard: int) -> Callable[[], None]:
            with self.lock:
                self.where[shard].add(identity)
                if len(self.where[shard]) > 1:
                    self.doubled.append((shard, set(self.where[shard])))

            def stop() -> None:
                with self.lock:
                    self.where[shard].discard(identity)

            return stop

        replica = ShardLeases(
            self.cluster.coordination,
            namespace=self.namespace,
            identity=identity,
            shards=SHARDS,
            on_acquired=on_acquired,
            lease_duration=LEASE_SECONDS,
            renew_period=RENEW_SECONDS,
        )
        replica.start()
        self.replicas[identity] = replica
        return replica

    def counts(self) -> list[int] | None:
        """Shards per replica, sorted, once every shard runs on exactly one replica; else None."""
        with self.lock:
            if any(len(holders) != 1 for holders in self.where.values()):
                return None
            owners = [next(iter(holders)) for holders in self.where.values()]
        return sorted(owners.count(identity) for identity in set(owners))


@pytest.fixture
def fleet(cluster: KubeCluster, namespace: str) -> Iterator[Fleet]:
    made = Fleet(cluster, namespace)
    yield made
    for replica in made.replicas.values():
        replica.release()


def test_three_replicas_share_eight_shards_and_the_survivors_take_a_dead_ones_shards(fleet: Fleet) -> None:
    for identity in ("replica-a", "replica-b", "replica-c"):
        fleet.start(identity)
    wait_for(lambda: fleet.counts() == [2, 3, 3], timeout=TAKEOVER_TIMEOUT * 2, what="8 shards over 3 replicas")

    dead = fleet.replicas.pop("replica-c")
    orphaned = dead.running
    dead.stop()  # no release: its Leases must expire
    started = time.monotonic()
    wait_for(lambda: fleet.counts() == [4, 4], timeout=TAKEOVER_TIMEOUT, what="the survivors holding all 8")
    assert orphaned and time.monotonic() - started >= LEASE_SECONDS  # taken only after the Leases expired

    fleet.start("replica-c")
    wait_for(lambda: fleet.counts() == [2, 3, 3], timeout=TAKEOVER_TIMEOUT, what="shards handed back")
    assert fleet.doubled == []
