"""The elector's renew deadline and a held Lease's expiry, on injected clocks.

Covers: a leader whose renewal hangs (a half-open connection) stops at the renew deadline while
the call is still hanging, before a standby could take the Lease, and a write that comes back
late claims nothing; a renewal's timeout ends at the deadline; a slow renewal counts from when it was sent, not answered; a leader that
steps down is never told it lost; a standby takes a Lease whose holder stopped renewing only
once it has not changed for the lease duration on the standby's monotonic clock, and writes the
injected wall clock's time as acquireTime and renewTime (a renewal moves renewTime only); each
write that takes or renews the Lease hands on the API server's `Date`, timed by the monotonic
clock; and the time bounds derived from the default settings.

The Lease endpoints are an in-memory stand-in (conditional replace by resourceVersion, 404, 409)
because what is tested is timing a real API server cannot hold still;
tests/integration/test_leasing.py runs the same elector against the real one, and
tests/integration/test_sick_network.py a leader behind a connection that stops forwarding.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.waiting import wait_for
from vigil.core.servertime import ServerTimeReading
from vigil.kube.kits.leasing import LeaderElector, LeaseConfig, server_time_of
from vigil.runtime.clients import lease_config
from vigil.settings import Settings

LEASE = LeaseConfig(namespace="ops", name="leader", identity="me", lease_duration=3.0, renew_period=0.2)
DEADLINE = LEASE.renew_deadline  # 2 s on the fake clock
#: Real seconds to wait for the elector's threads to act (they poll every 0.1 s).
ACT_TIMEOUT = 5.0


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class StandInLeases:
    """The three Lease calls the elector makes, in memory; writes can be made to hang."""

    def __init__(self) -> None:
        self._lease: client.V1Lease | None = None
        self._version = 0
        self._gate = threading.Condition()
        self._holding = False
        self._passes = 0
        self.waiting = 0  # writes blocked at the gate now
        self.reads = 0
        self.timeouts: list[float] = []  # the _request_timeout of every write, in order
        self.date = "Sun, 06 Dec 2026 04:00:07 GMT"  # the `Date` header of every write's answer

    def hold(self) -> None:
        """From now on every write hangs (a connection that forwards nothing)."""
        with self._gate:
            self._holding = True

    def let_one_through(self) -> None:
        with self._gate:
            self._passes += 1
            self._gate.notify_all()

    def let_all_through(self) -> None:
        with self._gate:
            self._holding = False
            self._gate.notify_all()

    def _pass_gate(self) -> None:
        with self._gate:
            self.waiting += 1
            while self._holding and not self._passes:
                self._gate.wait()
            if self._holding:
                self._passes -= 1
            self.waiting -= 1

    def _store(self, body: client.V1Lease) -> client.V1Lease:
        self._version += 1
        stored = copy.deepcopy(body)
        stored.metadata.resource_version = str(self._version)
        self._lease = stored
        return copy.deepcopy(stored)

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> client.V1Lease:
        with self._gate:
            self.reads += 1
            if self._lease is None:
                raise ApiException(status=404, reason="Not Found")
            return copy.deepcopy(self._lease)

    def held_by(self, holder: str) -> None:
        """A Lease another replica holds (and, from now on, no longer renews)."""
        with self._gate:
            spec = client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=3, lease_transitions=4)
            self._store(client.V1Lease(metadata=client.V1ObjectMeta(name=LEASE.name, namespace=LEASE.namespace), spec=spec))

    @property
    def lease(self) -> client.V1Lease:
        with self._gate:
            assert self._lease is not None
            return copy.deepcopy(self._lease)

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease, **kwargs: Any) -> client.V1Lease:
        self.timeouts.append(kwargs["_request_timeout"])
        self._pass_gate()
        with self._gate:
            if self._lease is not None:
                raise ApiException(status=409, reason="AlreadyExists")
            return self._store(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease, **kwargs: Any) -> client.V1Lease:
        self.timeouts.append(kwargs["_request_timeout"])
        self._pass_gate()
        with self._gate:
            if self._lease is None or body.metadata.resource_version != self._lease.metadata.resource_version:
                raise ApiException(status=409, reason="Conflict")
            return self._store(body)

    def create_namespaced_lease_with_http_info(
        self, namespace: str, body: client.V1Lease, **kwargs: Any
    ) -> tuple[client.V1Lease, int, dict[str, str]]:
        return self.create_namespaced_lease(namespace, body, **kwargs), 201, {"Date": self.date}

    def replace_namespaced_lease_with_http_info(
        self, name: str, namespace: str, body: client.V1Lease, **kwargs: Any
    ) -> tuple[client.V1Lease, int, dict[str, str]]:
        return self.replace_namespaced_lease(name, namespace, body, **kwargs), 200, {"date": self.date}


class Lost:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        self.event.set()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def leases() -> Iterator[StandInLeases]:
    stand_in = StandInLeases()
    yield stand_in
    stand_in.let_all_through()  # no elector thread stays blocked after its test


def leader(leases: StandInLeases, clock: FakeClock, lost: Lost) -> LeaderElector:
    elector = LeaderElector(leases, LEASE, on_lost=lost, monotonic=clock)
    elector.start()
    assert elector.wait_until_leader(ACT_TIMEOUT)
    return elector


def test_a_leader_whose_renewal_hangs_stops_at_the_deadline_while_the_call_still_hangs(
    leases: StandInLeases, clock: FakeClock
) -> None:
    lost = Lost()
    elector = leader(leases, clock, lost)
    renewed_at = clock()  # the stand-in never moved the clock: the claim was sent now
    leases.hold()
    wait_for(lambda: leases.waiting == 1, timeout=ACT_TIMEOUT, interval=0.02, what="a renewal to hang")

    assert leases.timeouts[-1] == pytest.approx(DEADLINE)  # the renewal may take until the deadline, no longer
    clock.advance(DEADLINE - 0.01)
    elector.check_deadline()
    assert elector.is_leader and not lost.event.is_set()  # within the deadline: still leading

    clock.advance(0.02)
    assert not elector.is_leader  # at once, whatever the threads are doing
    assert lost.event.wait(ACT_TIMEOUT), "the deadline thread did not declare the loss"
    assert leases.waiting == 1, "the loss waited for the hanging renewal"
    assert clock() - renewed_at < LEASE.lease_duration  # before a standby could judge the Lease expired

    leases.let_all_through()  # the hung write reaches the server after all
    wait_for(lambda: leases.waiting == 0, timeout=ACT_TIMEOUT, interval=0.02, what="the write to return")
    assert not elector.is_leader and lost.count == 1  # a late write claims nothing


def test_a_slow_renewal_counts_from_when_it_was_sent(leases: StandInLeases, clock: FakeClock) -> None:
    lost = Lost()
    elector = leader(leases, clock, lost)
    leases.hold()
    wait_for(lambda: leases.waiting == 1, timeout=ACT_TIMEOUT, interval=0.02, what="a renewal in flight")
    clock.advance(1.5)  # the answer takes 1.5 s
    leases.let_one_through()
    # It returns and succeeds; the next renewal is sent (and hangs) without the clock moving.
    wait_for(lambda: leases.waiting == 1 and leases._passes == 0, timeout=ACT_TIMEOUT, interval=0.02,
             what="the next renewal")  # fmt: skip
    assert elector.is_leader

    clock.advance(0.6)  # 2.1 s since the slow renewal was sent, 0.6 s since it was answered
    elector.check_deadline()
    assert lost.event.is_set() and not elector.is_leader


def test_a_leader_that_steps_down_is_never_told_it_lost(leases: StandInLeases, clock: FakeClock) -> None:
    lost = Lost()
    elector = leader(leases, clock, lost)
    elector.stop()
    clock.advance(10 * DEADLINE)
    elector.check_deadline()
    assert not elector.is_leader and not lost.event.is_set()


def test_the_defaults_give_a_ten_second_deadline_and_shorter_requests() -> None:
    lease = lease_config(Settings(), lease_name="vigil-leader", me="me")
    assert (lease.lease_duration, lease.renew_period, lease.renew_deadline) == (15.0, 5.0, 10.0)
    assert lease.request_timeout == 5.0  # every request of the operator but a leader's renewal
    assert lease.election_retry_after_cap == 2.5  # two such waits fit between a renewal's due time and the deadline
    assert lease.renew_period + 2 * lease.election_retry_after_cap == lease.renew_deadline


def test_a_renew_period_that_does_not_fit_the_deadline_is_refused() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        LeaseConfig(namespace="ops", name="leader", identity="me", lease_duration=3.0, renew_period=2.0)


class WallClock:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.at = datetime(2026, 12, 6, 4, 0, 0, 250000, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at


def test_a_standby_takes_a_lease_unrenewed_for_its_duration_and_stamps_it_with_its_wall_clock(
    leases: StandInLeases, clock: FakeClock
) -> None:
    wall, lost = WallClock(), Lost()
    leases.held_by("other")
    standby = LeaderElector(leases, LEASE, on_lost=lost, clock=wall, monotonic=clock)
    standby.start()
    try:
        wait_for(lambda: leases.reads >= 2, timeout=ACT_TIMEOUT, interval=0.02, what="the standby to look")
        clock.advance(LEASE.lease_duration)  # not changed for exactly the duration: not yet expired
        seen = leases.reads
        wait_for(lambda: leases.reads >= seen + 2, timeout=ACT_TIMEOUT, interval=0.02, what="two more looks")
        assert not standby.is_leader and leases.lease.spec.holder_identity == "other"

        clock.advance(0.01)
        assert standby.wait_until_leader(ACT_TIMEOUT), "the expired Lease was not taken"
        taken = leases.lease.spec
        assert (taken.holder_identity, taken.lease_transitions) == ("me", 5)
        assert taken.acquire_time == taken.renew_time == wall.at

        version = leases.lease.metadata.resource_version
        wall.at += timedelta(seconds=7)
        clock.advance(LEASE.renew_period)
        wait_for(lambda: leases.lease.metadata.resource_version != version, timeout=ACT_TIMEOUT, interval=0.02,
                 what="a renewal")  # fmt: skip
        renewed = leases.lease.spec
        assert (renewed.acquire_time, renewed.renew_time) == (taken.acquire_time, wall.at)
    finally:
        standby.stop()
    assert not lost.event.is_set()


def test_each_write_that_takes_or_renews_the_lease_hands_on_the_api_servers_time(
    leases: StandInLeases, clock: FakeClock
) -> None:
    readings: list[ServerTimeReading] = []
    elector = LeaderElector(leases, LEASE, on_lost=Lost(), monotonic=clock, on_server_time=readings.append)
    elector.start()
    try:
        assert elector.wait_until_leader(ACT_TIMEOUT)
        assert readings, "the write that took the Lease handed on no time"
        taken = readings[0]
        assert taken == ServerTimeReading(datetime(2026, 12, 6, 4, 0, 7, tzinfo=UTC), sent=clock(), received=clock())
        leases.date = "Sun, 06 Dec 2026 04:00:09 GMT"
        clock.advance(LEASE.renew_period)
        wait_for(lambda: readings[-1].date.second == 9, timeout=ACT_TIMEOUT, interval=0.02, what="a renewal's time")
        assert readings[-1].sent == readings[-1].received == clock()
    finally:
        elector.stop()


def test_an_answer_without_a_readable_date_gives_no_time() -> None:
    assert server_time_of(None, sent=1.0, received=2.0) is None
    assert server_time_of({"Content-Type": "application/json"}, sent=1.0, received=2.0) is None
    assert server_time_of({"Date": "yesterday"}, sent=1.0, received=2.0) is None
    found = server_time_of({"DATE": "Sun, 06 Dec 2026 04:00:07 GMT"}, sent=1.0, received=2.0)
    assert found == ServerTimeReading(datetime(2026, 12, 6, 4, 0, 7, tzinfo=UTC), sent=1.0, received=2.0)
