"""Leader election on a real coordination.k8s.io/v1 Lease.

Two `LeaderElector`s on one Lease: exactly one leads; when the leader stops
renewing the other takes over within about a lease duration and the Lease's
transition count goes up; a leader whose Lease is overwritten by another holder
is told (`on_lost`) and never claims again. Then the same with two real
`vigil operator` processes: one holds the Lease, and SIGKILLing it hands the
Lease to the other.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import (
    create_job,
    duplicates,
    executions,
    ledger,
    parse_time,
    wait_for_ledger,
)
from tests.integration.operators import OperatorFleet
from tests.waiting import wait_for
from vigil.kube.kits.leasing import LeaderElector, LeaseConfig
from vigil.kube.lifecycle import HANDOVER_JOIN_SECONDS

LEASE_NAME = "test-leader"
LEASE_SECONDS = 2.0
RENEW_SECONDS = 0.5
#: Added to every bound derived from the election's settings: this 2-core machine runs the API
#: server, etcd and the test in one place, and a starved thread can lose a second or two.
MARGIN_SECONDS = 2.0
# A standby polls every half renew period, so it sees the last Lease version at most that late,
# then waits one whole lease duration unchanged before it claims; the claim is one more request.
TAKEOVER_TIMEOUT = RENEW_SECONDS / 2 + LEASE_SECONDS + RENEW_SECONDS + MARGIN_SECONDS
FIRST_LEADER_TIMEOUT = 10.0
SAMPLE_INTERVAL = 0.05
OPERATOR_LEASE_SECONDS = 3  # tests/integration/operators.py's shortened Lease
OPERATOR_FAILOVER_TIMEOUT = 30.0  # process start-up (imports) plus the Lease expiring


class Candidate:
    """One elector and what it was told."""

    def __init__(self, cluster: KubeCluster, namespace: str, identity: str) -> None:
        self.identity = identity
        self.lost = threading.Event()
        self.losses = 0
        config = LeaseConfig(
            namespace=namespace,
            name=LEASE_NAME,
            identity=identity,
            lease_duration=LEASE_SECONDS,
            renew_period=RENEW_SECONDS,
        )
        self.elector = LeaderElector(cluster.coordination, config, on_lost=self._on_lost)

    def _on_lost(self) -> None:
        self.losses += 1
        self.lost.set()

    @property
    def leads(self) -> bool:
        return self.elector.is_leader


@pytest.fixture
def candidates(cluster: KubeCluster, namespace: str) -> Iterator[Callable[[str], Candidate]]:
    started: list[Candidate] = []

    def start(identity: str) -> Candidate:
        candidate = Candidate(cluster, namespace, identity)
        candidate.elector.start()
        started.append(candidate)
        return candidate

    yield start
    for candidate in started:
        candidate.elector.stop()


def read_lease(cluster: KubeCluster, namespace: str) -> client.V1Lease:
    return cluster.coordination.read_namespaced_lease(LEASE_NAME, namespace)


def the_leader(*candidates: Candidate) -> Candidate | None:
    leading = [c for c in candidates if c.leads]
    assert len(leading) <= 1, f"two leaders at once: {[c.identity for c in leading]}"
    return leading[0] if leading else None


def sample_invariant(check: Callable[[], None], *, seconds: float) -> None:
    """Run `check` repeatedly for `seconds`: an invariant observed over a window, not a wait."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(SAMPLE_INTERVAL)


def test_exactly_one_of_two_candidates_leads_and_holds_the_lease(
    cluster: KubeCluster, namespace: str, candidates: Callable[[str], Candidate]
) -> None:
    a, b = candidates("a"), candidates("b")

    leader = wait_for(lambda: the_leader(a, b), timeout=FIRST_LEADER_TIMEOUT, what="a leader")

    def still_the_same_leader() -> None:
        assert the_leader(a, b) is leader
        assert read_lease(cluster, namespace).spec.holder_identity == leader.identity

    # Sampled over two lease durations: the standby keeps standing by while the leader renews.
    sample_invariant(still_the_same_leader, seconds=2 * LEASE_SECONDS)
    assert leader.losses == 0


def test_the_standby_takes_over_when_the_leader_stops_renewing(
    cluster: KubeCluster, namespace: str, candidates: Callable[[str], Candidate]
) -> None:
    a, b = candidates("a"), candidates("b")
    leader = wait_for(lambda: the_leader(a, b), timeout=FIRST_LEADER_TIMEOUT, what="a leader")
    standby = b if leader is a else a
    before = read_lease(cluster, namespace).spec
    assert before.holder_identity == leader.identity

    leader.elector.stop()
    stopped_at = time.monotonic()

    assert not leader.leads  # a stopped elector no longer counts itself leader
    wait_for(lambda: standby.leads, timeout=TAKEOVER_TIMEOUT, interval=0.05, what=f"{standby.identity} to take over")
    took = time.monotonic() - stopped_at
    assert took >= LEASE_SECONDS - RENEW_SECONDS, f"took over after {took:.2f}s, before the Lease could expire"
    after = read_lease(cluster, namespace).spec
    assert after.holder_identity == standby.identity
    assert after.lease_transitions == (before.lease_transitions or 0) + 1
    assert leader.losses == 0  # stepping down on purpose is not a loss


def test_a_leader_whose_lease_is_taken_is_told_and_stops_claiming(
    cluster: KubeCluster, namespace: str, candidates: Callable[[str], Candidate]
) -> None:
    a = candidates("a")
    wait_for(lambda: a.leads, timeout=FIRST_LEADER_TIMEOUT, what="a to lead")

    # Someone else's write: the holder replaced behind a's back (conditional on what we read).
    lease = read_lease(cluster, namespace)
    lease.spec.holder_identity = "intruder"
    cluster.coordination.replace_namespaced_lease(LEASE_NAME, namespace, lease)

    assert a.lost.wait(TAKEOVER_TIMEOUT), "on_lost was not called"
    assert not a.leads
    # The intruder never renews. `a` saw its write first, so were `a` still campaigning it would
    # be first to find the Lease expired and take it back; a newcomer taking it shows it did not.
    witness = candidates("witness")
    wait_for(lambda: witness.leads, timeout=TAKEOVER_TIMEOUT, interval=0.05, what="the witness to take the Lease")
    assert read_lease(cluster, namespace).spec.holder_identity == "witness"
    assert not a.leads
    assert a.losses == 1


def test_of_two_operator_processes_one_holds_the_lease_and_the_other_takes_over_after_sigkill(
    fleet: OperatorFleet,
) -> None:
    first, second = fleet.start(), fleet.start()

    holder = fleet.leader(timeout=OPERATOR_FAILOVER_TIMEOUT)

    assert holder.name in {first.name, second.name}
    survivor = second if holder is first else first
    assert survivor.alive
    holder.kill()  # SIGKILL: no chance to release anything

    successor = fleet.leader(timeout=OPERATOR_FAILOVER_TIMEOUT + OPERATOR_LEASE_SECONDS)
    assert successor is survivor
    assert fleet.holder() == survivor.name


OPERATOR_RENEW_SECONDS = 1  # tests/integration/operators.py's renew period: a standby polls at half
#: Smaller than MARGIN_SECONDS: it must stay below the 2 s an unreleased Lease takes at the least.
HANDOVER_MARGIN_SECONDS = 1.0
#: From SIGTERM to the standby holding the Lease: the main thread's next look at the stop flag, the
#: passes in flight ending (the dispatcher's wait is cut short), the release and the standby's next
#: poll (half a renew period), with room for a loaded 2-core machine.
HANDOVER_SECONDS = 4.0


def test_a_leader_stopped_gracefully_releases_the_lease_and_the_standby_fires_the_next_occurrence(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    """SIGTERM (a rolling update): the leader finishes its pass, clears the Lease's holder and
    exits; the standby takes it at its next poll — not a whole lease later — and the job's
    occurrences go on with no gap and no duplicate."""
    first, second = fleet.start(), fleet.start()
    holder = fleet.leader(timeout=OPERATOR_FAILOVER_TIMEOUT)
    standby = second if holder is first else first
    create_job(cluster, namespace, "steady", every="1s", jitter="0s")
    wait_for(lambda: len(ledger(cluster, namespace, "steady")) >= 3, timeout=60, what="the job firing")

    signalled = time.monotonic()
    holder.kill(signal.SIGTERM)  # returns once the process has exited
    exited = time.monotonic()
    assert holder.proc.returncode == 0, f"the leader did not stop cleanly:\n{fleet.logs()}"
    # The passes in flight get HANDOVER_JOIN_SECONDS between them (they end in about a second),
    # and the caches are not waited for (each once held the exit for 5 s: 15 s to the release).
    stopping = exited - signalled
    assert stopping <= HANDOVER_JOIN_SECONDS, f"{stopping:.1f}s from SIGTERM to exit"
    wait_for(lambda: fleet.holder() == standby.name, timeout=OPERATOR_LEASE_SECONDS, interval=0.05,
             what="the standby to take the released Lease")  # fmt: skip
    took = time.monotonic() - exited
    handed = time.monotonic() - signalled
    assert handed <= HANDOVER_SECONDS, f"{handed:.1f}s from SIGTERM to the standby leading"
    assert "released lease" in holder.log.read_text(), "the leader exited without releasing the Lease"
    # An unreleased Lease is taken only once it has not changed for a whole duration (3 s) after
    # the last renewal, which came at most a renew period before the exit.
    assert took <= OPERATOR_RENEW_SECONDS / 2 + HANDOVER_MARGIN_SECONDS, f"took {took:.1f}s: not released"

    after = datetime.now(UTC)
    entries = wait_for_ledger(cluster, namespace, "steady", through=after + timedelta(seconds=3), timeout=30)
    fired = sorted(e["nominal"] for e in entries if e["outcome"] == "Fired")
    assert len(fired) == len(set(fired)), "an occurrence fired twice"
    stamps = [parse_time(n) for n in fired]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert max(gaps) == timedelta(seconds=1), f"an occurrence is missing around the handover: {fired}"
    assert not duplicates([e["spec"]["scheduledFor"] for e in executions(cluster, namespace)])
