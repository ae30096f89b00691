"""Real faults of the control plane under a burst of one-off jobs, each scenario checked by the checker.

Two operator replicas (the chart's identity, the fleet's 3 s Lease; tests/integration/operators.py)
fire a burst of one-off ScheduledJobs due over a window (`SIZES.burst`: 40 over 12 s here, 1,000
over a minute under `make faults`), recorded as tests/faults/controlplane.py says. While the
burst is firing:

* **the API server is restarted** (SIGTERM; started again on the same etcd);
* **etcd is restarted** (the API server stays up, answering errors meanwhile);
* **the API server is stopped, etcd compacted to its head, and the API server started on top**: a watch that resumes
  from its last version then asks for one etcd no longer has and expires (410); the test's own
  watches do, and list again. The leader keeps its Lease through it here (a 60 s Lease), and its
  informers list again (they do after any failed watch, so a 410 never reaches them: they never
  resume from an old version) while jobs keep firing.

A leader that cannot renew its Lease while the API server is away exits on purpose (it must not
act on a Lease it may have lost); a replaced replica takes over, as a Deployment would. Then
every occurrence fired exactly once (0 lost: catch-up All, so none may end Missed; 0 fired twice,
counted by Execution uid and by pod per attempt), every fired Execution is still held, and none
was created before its `runAt`. Time to recover: from the component serving again to the next
Execution created, in real seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.faults.checker import Verdict, check
from tests.faults.controlplane import (
    API_SERVER,
    ETCD,
    Burst,
    Replicas,
    compact_etcd,
    now,
    restart,
    start_again,
    stop,
)
from tests.faults.history import FaultPhase, History
from tests.faults.sizes import LONG, SIZES
from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

SPREAD = timedelta(seconds=60 if LONG else 12)  # the burst's window: "due in the minute" when long
LEAD = timedelta(seconds=15 if LONG else 5)  # from the last job created to the first due
#: Leader elections through an API server that restarts: the fleet's 3 s Lease is for kill tests;
#: here a busy restart must not cost leadership twice a second.
LEASE = {"leaseDurationSeconds": 6, "renewPeriodSeconds": 2}
FIRE_TIMEOUT = 600.0 if LONG else 180.0


@pytest.fixture
def fleet(cluster: KubeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[OperatorFleet]:
    operators = OperatorFleet(cluster, tmp_path, leaderElection=LEASE)
    yield operators
    operators.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(operators.logs())
    cluster.clear_namespace(operators.namespace, timeout=300)


def _restart_api_server() -> None:
    restart(API_SERVER)


def _restart_etcd() -> None:
    restart(ETCD)


def _compact_then_restart_api_server() -> None:
    # Stopped first: while it serves, the burst's writes would move a watch past the compaction.
    stop(API_SERVER)
    print(f"etcd compacted at revision {compact_etcd()}")
    start_again()


#: A Lease the leader keeps through a restart (renew deadline 40 s): its own watches must expire
#: and be listed again, where with LEASE it exits and its successor starts with fresh lists.
RIDING_LEASE = {"leaseDurationSeconds": 60, "renewPeriodSeconds": 2}
COMPACTED = "etcd compacted, every watch expired (410)"
FAULTS: dict[str, tuple[Callable[[], None], dict[str, int]]] = {
    "api server restarted mid-burst": (_restart_api_server, LEASE),
    "etcd restarted mid-burst": (_restart_etcd, LEASE),
    COMPACTED: (_compact_then_restart_api_server, RIDING_LEASE),
}
RELISTED = "informer"  # an informer's warning, "...; listing again in", after its watch failed


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_burst_fires_exactly_once_through_a_control_plane_fault(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, fault: str, verdicts: list[Verdict]
) -> None:
    inject, lease = FAULTS[fault]
    replicas = Replicas(fleet, 2, leaderElection=lease)
    leader = fleet.leader(timeout=90)
    history = History(now, scenario=fault)
    burst = Burst(cluster, namespace, history)
    created = now()
    # created before they come due: the creation of 1,000 takes a while on this machine
    per_job = timedelta(milliseconds=60)
    burst.create(SIZES.burst, first=created + per_job * SIZES.burst + LEAD, spread=SPREAD)
    first = min(burst.due.values())
    wait_for(lambda: now() >= first + SPREAD / 3 and burst.fired() > 0, timeout=120, interval=0.1,
             what="the burst firing")  # fmt: skip
    print(f"{burst.fired()} of {len(burst.due)} fired when the fault began")
    history.fault(fault, FaultPhase.START)
    inject()
    history.fault(fault, FaultPhase.END)
    burst.wait_all_fired(timeout=FIRE_TIMEOUT, tend=replicas)
    burst.record()
    verdict = check(history)
    verdicts.append(verdict)
    print(verdict, f"replicas replaced: {replicas.replaced}", f"relists of the test's own watches: "
          f"{burst.executions.relists + burst.pods.relists}")  # fmt: skip
    assert verdict.ok, verdict.problems()
    assert verdict.due == SIZES.burst
    assert not burst.early(), burst.early()[:5]
    if fault == COMPACTED:
        # The test's own watches resume from their last version and met 410 (tests/stress/recorders.py
        # counts the lists that followed); the leader rode through with its Lease, and its informers
        # listed again (they list again after any failed watch, a cut connection included).
        assert burst.executions.relists + burst.pods.relists > 0, "no watch expired: the compaction missed them"
        assert leader.alive and fleet.holder() == leader.name, "the leader did not keep its Lease"
        relisted = [line for line in leader.log.read_text().splitlines() if RELISTED in line and "listing again" in line]
        print(f"the leader's informers listed again {len(relisted)} times")
        assert relisted, "the leader's informers never listed again"
