"""Trigger shards shared between operator replicas: one Lease per shard, rebalanced when one dies.

The volume tier's trigger runs per shard (vigil.queue.trigger). Every replica
keeps a membership Lease of its own (`vigil-trigger-member-…`, renewed like a
leader's) and lists the others' to learn who is alive, judging a member dead
by its own monotonic clock when its Lease has not changed for a lease duration
(as the elector judges a holder, never by another machine's timestamps). From
the same live set every replica computes the same assignment
(`vigil.core.shards.assignment`) and campaigns — with the existing
`LeaderElector`, one per shard Lease `vigil-trigger-shard-<k>` — only for the
shards assigned to it. A shard it holds but is no longer assigned (a replica
came back or joined) is handed over: its trigger stopped first, then its Lease
released so the new owner takes it at its next poll. A dead replica's Leases
expire and the survivors, who now own its shards, take them.

Leases only share the work. Exactly once does not depend on them: the trigger's
conditional marks and derived execution ids hold even when two replicas run
one shard for a moment (docs/queue.md, "Exactly once").

A replica that cannot reach the queue store is no use as a shard's owner, however well
it renews its Leases (a network path to the database cut, a proxy that stopped
forwarding). When a shard's trigger reports the store unreachable
(`request_withdrawal`, from `vigil.queue.trigger.run`'s `on_unreachable`), the replica
withdraws: its triggers stop, and its shard Leases and its membership Lease are released, so
the others count it gone at their next round and take its shards. It asks `reachable()`
every round meanwhile and rejoins once the store answers; the assignment then gives it its
share back. When the store is down for every replica, all withdraw and all rejoin when it
returns: the shards fire late, under each job's catch-up policy, never twice.

`on_acquired(shard)` starts the shard's trigger and returns the function that
stops it; it is called when this replica starts leading the shard, and the
stopper when it stops (handover, a lost Lease, shutdown). The caller wires it
to `vigil.queue.trigger.run` in a thread (this module imports no queue code).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from vigil.core.ports import Clock
from vigil.core.shards import assigned_shards
from vigil.kube.kits.clocks import SYSTEM_CLOCK
from vigil.kube.kits.leasing import LeaderElector, LeaseApi, LeaseConfig

log = logging.getLogger(__name__)

MEMBER_PREFIX = "vigil-trigger-member-"
SHARD_PREFIX = "vigil-trigger-shard-"

Stopper = Callable[[], None]


class ShardLeaseApi(LeaseApi, Protocol):
    """What shard sharing uses of `CoordinationV1Api`: the elector's calls, and a list."""

    def list_namespaced_lease(self, namespace: str, **kwargs: Any) -> Any: ...


def shard_lease_name(shard: int) -> str:
    return f"{SHARD_PREFIX}{shard}"


def member_lease_name(identity: str) -> str:
    """A DNS-safe name per replica identity (a pod name, or anything the caller chose)."""
    return MEMBER_PREFIX + hashlib.sha256(identity.encode()).hexdigest()[:20]


class ShardLeases:
    """Campaign for this replica's share of the trigger shards and run the ones it holds."""

    def __init__(
        self,
        leases: ShardLeaseApi,
        *,
        namespace: str,
        identity: str,
        shards: int,
        on_acquired: Callable[[int], Stopper],
        lease_duration: float = 15.0,
        renew_period: float = 5.0,
        on_lost: Callable[[], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        monotonic: Callable[[], float] = time.monotonic,
        reachable: Callable[[], bool] = lambda: True,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        self._api = leases
        self._namespace = namespace
        self._identity = identity
        self._shards = shards
        self._on_acquired = on_acquired
        self._on_lost = on_lost or (lambda: None)
        self._clock = clock  # the times the electors write into the Leases
        self._monotonic = monotonic  # every decision's: a member alive, a Lease expired
        self._duration = lease_duration
        self._period = renew_period
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._electors: dict[int, LeaderElector] = {}
        self._lost: set[int] = set()
        self._running: dict[int, Stopper] = {}
        self._seen: dict[str, tuple[str, float]] = {}  # member lease → (version, monotonic() first seen)
        self._started = False
        self._reachable = reachable
        self._withdraw = threading.Event()  # asked for by a trigger thread; done by the loop
        self._withdrawn = False
        self._member = self._new_member()
        self._thread = threading.Thread(target=self._loop, name="trigger-shards", daemon=True)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def wait_stopped(self, seconds: float) -> bool:
        """Wait up to `seconds` for a stop; whether it came."""
        return self._stopped.wait(seconds)

    @property
    def running(self) -> set[int]:
        """The shards whose trigger runs here now."""
        with self._lock:
            return set(self._running)

    def start(self) -> None:
        """Join the members and campaign; a no-op once stopped (a start that lost the race with
        a shutdown, e.g. one waiting for the store to answer)."""
        with self._lock:
            if self._stopped.is_set():
                return
            self._started = True
            self._member.start()
            self._thread.start()

    def stop(self) -> None:
        """Stop at once, as a crash would: triggers stopped, Leases left to expire."""
        self._shutdown(release=False)

    def release(self) -> None:
        """Stop gracefully: triggers stopped, then every Lease released so survivors take over now."""
        self._shutdown(release=True)

    @property
    def withdrawn(self) -> bool:
        """Whether this replica stood back from the shards because it cannot reach the store."""
        return self._withdrawn

    def request_withdrawal(self) -> None:
        """The store is unreachable from here: hand every shard over at the next round (safe to
        call from a shard's own trigger thread, which the withdrawal stops)."""
        self._withdraw.set()

    def _new_member(self) -> LeaderElector:
        return self._elector(member_lease_name(self._identity), on_lost=self._member_lost)

    def _elector(self, name: str, *, on_lost: Callable[[], None]) -> LeaderElector:
        return LeaderElector(
            self._api, self._config(name), on_lost=on_lost, clock=self._clock, monotonic=self._monotonic
        )

    def _round(self) -> None:
        """One round of the loop: withdraw when asked, rejoin once the store answers, else reconcile."""
        if self._withdraw.is_set() and not self._withdrawn:
            self._stand_back()
        if self._withdrawn:
            if not self._reachable():
                return
            log.info("trigger shards: the queue store answers again; rejoining")
            with self._lock:
                self._withdraw.clear()
                self._withdrawn = False
                self._member = self._new_member()
                self._member.start()
        self.reconcile()

    def _stand_back(self) -> None:
        """Release every Lease first, then stop the triggers: a trigger waiting on the silent store
        may take its connect timeout to notice its stop, and the others need not wait for that.
        Should the path heal meanwhile, a shard fires from two replicas for a moment, and its
        conditional marks still fire each occurrence once (docs/queue.md, "Exactly once")."""
        log.warning("trigger shards: the queue store is unreachable from here; handing every shard over")
        with self._lock:
            electors, self._electors = dict(self._electors), {}
            stoppers, self._running = list(self._running.values()), {}
            self._lost.clear()
            self._withdrawn = True
        for elector in [*electors.values(), self._member]:
            elector.release()
        for stopper in stoppers:  # each may wait out its trigger's connect timeout
            stopper()

    def reconcile(self) -> None:
        """One round: learn the live members, campaign for this replica's shards, hand over the rest."""
        wanted = assigned_shards(self._identity, self._live_members(), shards=self._shards)
        for shard in range(self._shards):
            if shard in wanted:
                self._campaign(shard)
            else:
                self._hand_over(shard)
            self._sync_trigger(shard)

    def _config(self, name: str) -> LeaseConfig:
        return LeaseConfig(
            namespace=self._namespace,
            name=name,
            identity=self._identity,
            lease_duration=self._duration,
            renew_period=self._period,
        )

    def _loop(self) -> None:
        while not self._stopped.wait(self._period / 2):
            try:
                self._round()
            except Exception as err:  # an API error: the next round tries again; held Leases renew alone
                log.warning("trigger shards: %s", err)

    def _live_members(self) -> set[str]:
        listed = self._api.list_namespaced_lease(self._namespace, _request_timeout=self._duration / 3)
        now, alive = self._monotonic(), {self._identity}
        for lease in listed.items:
            name, holder = lease.metadata.name, lease.spec.holder_identity
            if not name.startswith(MEMBER_PREFIX) or not holder:
                continue
            version = lease.metadata.resource_version
            seen = self._seen.get(name)
            if seen is None or seen[0] != version:
                self._seen[name] = seen = (version, now)
            if now - seen[1] <= self._duration:
                alive.add(holder)
        return alive

    def _campaign(self, shard: int) -> None:
        with self._lock:
            if shard in self._electors and shard not in self._lost:
                return
            self._lost.discard(shard)
            elector = self._elector(shard_lease_name(shard), on_lost=lambda: self._shard_lost(shard))
            self._electors[shard] = elector
        elector.start()

    def _hand_over(self, shard: int) -> None:
        with self._lock:
            elector = self._electors.pop(shard, None)
            self._lost.discard(shard)
        if elector is None:
            return
        self._stop_trigger(shard)  # stop firing before anyone else may start
        elector.release()
        log.info("handed trigger shard %d over", shard)

    def _sync_trigger(self, shard: int) -> None:
        with self._lock:
            elector = self._electors.get(shard)
            leading = elector is not None and elector.is_leader and shard not in self._lost
            if not leading or shard in self._running or self._stopped.is_set():
                start = False
            else:
                start = True
        if start:
            stopper = self._on_acquired(shard)
            with self._lock:
                self._running[shard] = stopper
            log.info("running trigger shard %d", shard)
        elif not leading:
            self._stop_trigger(shard)

    def _stop_trigger(self, shard: int) -> None:
        with self._lock:
            stopper = self._running.pop(shard, None)
        if stopper is not None:
            stopper()

    def _shard_lost(self, shard: int) -> None:
        with self._lock:
            self._lost.add(shard)
        self._stop_trigger(shard)

    def _member_lost(self) -> None:
        """Not sure we are counted as alive any more: stop everything, and tell the owner."""
        self.stop()
        self._on_lost()

    def _shutdown(self, *, release: bool) -> None:
        with self._lock:
            self._stopped.set()
            if not self._started:
                return  # never started: no Lease held, no thread to join
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self._duration)
        with self._lock:
            electors, self._electors = dict(self._electors), {}
        for shard in list(self.running):
            self._stop_trigger(shard)
        for elector in [*electors.values(), self._member]:
            if release:
                elector.release()
            else:
                elector.stop()
