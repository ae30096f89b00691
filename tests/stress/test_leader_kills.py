"""A hundred SIGKILLs of the Lease-holding operator while recurring jobs fire: nothing lost, nothing twice.

The long variant of the ten-kill test in tests/integration/test_triggering.py. Three operator
processes (a leader and two standbys; a killed leader is replaced at once) and four
ScheduledJobs `every: 2s` with catch-up All (JOBS says why four). The leader is SIGKILLed VIGIL_STRESS_KILLS times
(100): a fifth of the kills as soon as it holds the Lease, while it catches up on what fell due
during the takeover; the others once it has fired everything due until it took over, at a
random moment of the 2 s firing cycle. (Killing every leader before it has caught up would
measure only how a backlog grows when no leader lives long enough to clear it.) Then every
nominal occurrence from each job's first to the end of the run has exactly one Execution and
that Execution exactly one pod, the operator recorded nothing as Missed, and the figures say
how long takeovers and catching up took and how late occurrences fired across them.
"""

from __future__ import annotations

import random
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import parse_time
from tests.integration.operators import OperatorFleet
from tests.stress.failover import (
    STANDBYS,
    Takeover,
    kill_the_leader,
    report_kills,
    start_with_standbys,
    wait_standbys,
)
from tests.stress.figures import Figures, spread
from tests.stress.occurrences import (
    FINAL,
    account,
    create_recurring_job,
    first_fired,
    lag_trend,
    recorded_missed,
    suspend_jobs,
    wait_fired_through,
    wait_settled,
    watch_executions,
    watch_pods,
)
from tests.stress.sizes import SIZES
from tests.waiting import wait_for

#: Four jobs every 2 s: two executions a second, fired all the time. Below what the pod path
#: sustains across failovers on the project's 2-core machines (about 4/s at first; with ten jobs,
#: 5/s, a backlog built and dispatching fell to 1.5/s), so that this test checks failover
#: correctness and every pod can be waited for; the soak is the test of throughput.
JOBS = [f"tick{i:02}" for i in range(4)]
PERIOD = timedelta(seconds=2)
AT_TAKEOVER = 0.2  # the share of kills that land as soon as a new leader holds the Lease
FIRE_TIMEOUT = 60.0  # a new job fires within this
#: A new leader fires everything that fell due while no leader ran within this (the gap is a
#: few seconds of ten jobs: a dozen occurrences or so).
CATCH_UP_TIMEOUT = 120.0
#: Pods behind when the kills end are waited for: a fixed margin plus the backlog at this many
#: executions a second (the pod path on a 2-core machine shared with other control planes does
#: about three). Correctness is checked here, not speed (the soak checks that).
SETTLE_TIMEOUT, DRAIN_RATE = 180.0, 2.0
START_SLACK = 3 * PERIOD  # a new job's first occurrence is the first lattice point after the operator saw it


@pytest.mark.stress
@pytest.mark.timeout(600 + 60 * SIZES.leader_kills)  # pyproject's 600 s is per ordinary test
def test_leader_sigkills_while_jobs_fire_lose_and_duplicate_no_occurrence(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, figures: Figures, watches: ExitStack
) -> None:
    rng = random.Random(SIZES.seed)
    leader = start_with_standbys(fleet)
    executions = watches.enter_context(watch_executions(cluster, namespace))
    pods = watches.enter_context(watch_pods(cluster, namespace))
    created = datetime.now(UTC)
    for name in JOBS:
        create_recurring_job(cluster, namespace, name, every=PERIOD)
    wait_for(lambda: len(first_fired(executions, JOBS)) == len(JOBS), timeout=FIRE_TIMEOUT, what="every job to fire")
    figures.add("scenario", f"{len(JOBS)} jobs every {PERIOD.seconds}s, 1 leader + 2 standbys, seed {SIZES.seed}")

    takeovers: list[Takeover] = []
    catch_ups: list[float] = []
    on_takeover = 0
    try:
        for _ in range(SIZES.leader_kills):
            if rng.random() < AT_TAKEOVER:  # right away: the new leader still catches up on the takeover's gap
                on_takeover += 1
                needed = 1
            else:  # once it has fired everything due until it took over, at a random moment of its cycle
                needed = STANDBYS
                caught_up = time.monotonic()
                wait_fired_through(executions, JOBS, datetime.now(UTC) - PERIOD, timeout=CATCH_UP_TIMEOUT)
                catch_ups.append(time.monotonic() - caught_up)
                wait_standbys(fleet, needed)
                time.sleep(rng.uniform(0, PERIOD.total_seconds()))  # the scenario: a random moment of its firing cycle
            takeovers.append(kill_the_leader(fleet, leader, standbys_needed=needed))
            leader = takeovers[-1].leader
    except BaseException:
        now = datetime.now(UTC)
        figures.add("execution lag by tenth until then", lag_trend(executions.all(), start=created, end=now))
        raise
    finally:
        report_kills(figures, takeovers, f"{on_takeover} right on a takeover, the rest mid-firing")
        figures.add("caught up after a takeover", spread(catch_ups))
        figures.add("operator processes", f"{len(fleet.processes)} started, {sum(p.alive for p in fleet.processes)} alive")

    horizon = datetime.now(UTC) + 2 * PERIOD
    wait_fired_through(executions, JOBS, horizon, timeout=CATCH_UP_TIMEOUT)
    suspend_jobs(cluster, namespace, JOBS)
    backlog, settling = sum(s.facts["phase"] not in FINAL for s in executions.all()), time.monotonic()
    wait_settled(executions, pods, timeout=SETTLE_TIMEOUT + backlog / DRAIN_RATE)
    figures.add("executions unfinished after the kills", f"{backlog}, all finished {time.monotonic() - settling:.0f} s later")
    executions.stop()
    pods.stop()
    firsts = {job: parse_time(stamp) for job, stamp in first_fired(executions, JOBS).items()}
    windows = {job: (first, horizon) for job, first in firsts.items()}
    tally = account(executions.all(), pods.all(), windows=windows, step=PERIOD)
    missed = recorded_missed(cluster, namespace, JOBS)
    tally.report(figures)
    figures.add("execution lag by tenth", lag_trend(executions.all(), start=min(firsts.values()), end=horizon))
    figures.add("recorded Missed", str(len(missed)))
    figures.add("watch re-lists / errors", f"{executions.relists + pods.relists} / {len(executions.errors + pods.errors)}")

    assert not tally.problems(), tally.problems()
    late = {job: first for job, first in firsts.items() if first > created + START_SLACK}
    assert not late, f"jobs whose first occurrence came late (created {created}): {late}"
    assert not missed, missed
