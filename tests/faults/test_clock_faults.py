"""A replica's wall clock stepped a minute ahead and back while a burst fires: nothing fires twice.

The machine's clock is never touched: one operator replica runs with its injected wall clock
stepped by the test (tests/faults/stepped_operator.py), one runs on the real one. A burst of
one-off jobs (tests/faults/controlplane.py's `Burst`) comes due; a few have fired when the
stepped replica's clock jumps 60 s ahead, and some seconds later back.

* **The stepped replica is a standby**: the leader fires; nothing the standby does fires
  anything. 0 lost, 0 fired twice, none early (an Execution created before its `runAt`, by the
  API server's clock).
* **The stepped replica is the leader**: its clock is bounded by the API server's time, read from
  the `Date` of each Lease renewal (vigil.core.servertime): a minute ahead, it is not trusted and
  firing follows the API server's time — nothing fires early, what comes due waits about a second
  at most. Stepping back fires nothing twice (the fired markers hold) and loses nothing: minutes
  the trigger closed on a clock that then went back are walked again, so an occurrence entered
  into one meanwhile (at the long size, `make faults`: 500 jobs, some created while the clock is
  ahead) fires at the next pass. 0 early, 0 lost, 0 twice, as for the standby.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.faults.checker import Verdict, check
from tests.faults.controlplane import Burst, now
from tests.faults.history import FaultPhase, History
from tests.faults.sizes import LONG, SIZES
from tests.integration.conftest import REPO, KubeCluster
from tests.integration.operators import OperatorFleet, OperatorProcess
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

STEP = timedelta(seconds=60)
AHEAD_FOR = timedelta(seconds=6)  # real seconds the stepped clock stays ahead
LEASE = {"leaseDurationSeconds": 6, "renewPeriodSeconds": 2}
BURST = SIZES.burst // 2 if LONG else SIZES.burst // 4
SPREAD = timedelta(seconds=60 if LONG else 10)


@pytest.fixture
def fleet(cluster: KubeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[OperatorFleet]:
    operators = OperatorFleet(cluster, tmp_path, leaderElection=LEASE)
    yield operators
    operators.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(operators.logs())
    cluster.clear_namespace(operators.namespace)


def start_stepped(fleet: OperatorFleet, offset: Path) -> OperatorProcess:
    """An operator replica of `fleet` whose wall clock is the real one plus the seconds in `offset`."""
    name = "stepped"
    log = fleet.workdir / f"{name}.log"
    env = {**fleet.cluster.env, "KUBECONFIG": str(fleet.identity.kubeconfig), "POD_NAME": name,
           "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO)])}  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.stepped_operator", str(offset), "operator", "--config", str(fleet.config)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )  # fmt: skip
    op = OperatorProcess(name=name, proc=proc, log=log)
    fleet.processes.append(op)
    return op


@pytest.mark.parametrize("stepped", ["standby", "leader"])
def test_a_replicas_clock_stepped_ahead_and_back_fires_nothing_twice(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, tmp_path: Path, stepped: str, verdicts: list[Verdict]
) -> None:
    offset = tmp_path / "clock-offset"
    offset.write_text("0")
    if stepped == "leader":
        replica = start_stepped(fleet, offset)
        assert fleet.leader(timeout=90) is replica
        fleet.start()
    else:
        fleet.start()
        fleet.leader(timeout=90)
        replica = start_stepped(fleet, offset)
        wait_for(lambda: "campaigning for lease" in replica.log.read_text(), timeout=90, what="the standby up")
    scenario = f"clock of the {stepped} stepped +60 s and back"
    history = History(now, scenario=scenario)
    burst = Burst(cluster, namespace, history)
    burst.create(BURST, first=now() + timedelta(seconds=8), spread=SPREAD)
    wait_for(lambda: burst.fired() > 0, timeout=60, interval=0.1, what="the burst firing")
    history.fault("clock stepped ahead", FaultPhase.START)
    offset.write_text(str(STEP.total_seconds()))
    ahead = now()
    wait_for(lambda: now() >= ahead + AHEAD_FOR, timeout=60, what="the stepped clock's time ahead")
    offset.write_text("0")
    history.fault("clock stepped ahead", FaultPhase.END)
    burst.wait_all_fired(timeout=180)
    burst.record()
    verdict = check(history)
    verdicts.append(verdict)
    print(verdict, burst.early()[:3])
    assert fleet.holder() in {op.name for op in fleet.processes if op.alive}
    assert verdict.ok, verdict.problems()
    if stepped == "leader":  # it saw its clock ahead of the API server's, and said so once
        said = replica.log.read_text().count("ahead of the API server's")
        assert said == 1, f"the stepped leader logged its clock ahead {said} times"
