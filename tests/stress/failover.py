"""Killing the leader of an operator fleet the way a node failure would, and timing the takeover.

The fleet has standbys throughout: a SIGKILLed leader is replaced by a fresh process at once
(as a Deployment would replace its pod), and a kill waits until at least one standby
campaigns for the Lease — usually both have, unless the kill is meant to land right on a
takeover, before the last replacement has finished starting.
"""

from __future__ import annotations

import dataclasses
import time

from tests.integration.operators import OperatorFleet, OperatorProcess
from tests.stress.figures import Figures, spread
from tests.waiting import wait_for

STANDBYS = 2
#: A standby sees the Lease unrenewed for its 3 s duration, then takes it; on this small shared
#: machine a takeover beyond this is a failure, not a slow run.
TAKEOVER_TIMEOUT = 45.0
#: Interpreter start, imports and the API client: until a new process campaigns.
START_TIMEOUT = 90.0
CAMPAIGNING = "campaigning for lease"


def campaigning(op: OperatorProcess) -> bool:
    """Whether a live process has started its Lease elector (its log says so)."""
    return op.alive and CAMPAIGNING in op.log.read_text(errors="replace")


def standbys(fleet: OperatorFleet) -> int:
    """Live processes other than the Lease holder that campaign for it."""
    holder = fleet.holder()
    return sum(campaigning(op) for op in fleet.processes if op.name != holder)


def wait_standbys(fleet: OperatorFleet, count: int) -> int:
    """Until at least `count` standbys campaign; how many do."""
    return wait_for(lambda: (n := standbys(fleet)) >= count and n, timeout=START_TIMEOUT,
                    what=f"{count} standbys to campaign")  # fmt: skip


def start_with_standbys(fleet: OperatorFleet) -> OperatorProcess:
    """A leader and STANDBYS campaigning standbys; the leader."""
    for _ in range(1 + STANDBYS):
        fleet.start()
    leader = fleet.leader(timeout=START_TIMEOUT)
    wait_standbys(fleet, STANDBYS)
    return leader


@dataclasses.dataclass(frozen=True)
class Takeover:
    leader: OperatorProcess  # the new one
    seconds: float  # from the SIGKILL to the Lease naming a live process (polled: up to 0.2 s long)
    standbys: int  # standbys campaigning when the leader was killed


def kill_the_leader(fleet: OperatorFleet, victim: OperatorProcess, *, standbys_needed: int = 1) -> Takeover:
    """SIGKILL `victim` (the leader) once enough standbys campaign, start its replacement, time the takeover."""
    ready = wait_standbys(fleet, standbys_needed)
    assert fleet.holder() == victim.name, f"{victim.name} is not the leader: {fleet.holder()}"
    victim.kill()
    killed = time.monotonic()
    fleet.start()
    successor = fleet.leader(timeout=TAKEOVER_TIMEOUT)
    return Takeover(successor, time.monotonic() - killed, ready)


def report_kills(figures: Figures, takeovers: list[Takeover], how: str) -> None:
    """The kills done so far (the test may have stopped half-way), and their takeovers."""
    figures.add("leader kills", f"{len(takeovers)} ({how})")
    figures.add("takeover after SIGKILL", spread([t.seconds for t in takeovers]))
    if takeovers:
        least, most = min(t.standbys for t in takeovers), max(t.standbys for t in takeovers)
        figures.add("standbys campaigning at a kill", f"{least} to {most}")
