"""An hour at ten executions a second: the operator keeps up, its memory stays in budget, nothing fires twice.

One operator process (no standby: the figures are its own) and 2 x VIGIL_STRESS_SOAK_RATE
ScheduledJobs `every: 2s` in one namespace, so VIGIL_STRESS_SOAK_RATE (10) executions a
second, each a pod that runs `true`, for VIGIL_STRESS_SOAK_SECONDS (3600), with the operator's
default settings. Throughout, the operator's resident memory (VmRSS) and CPU time are sampled
from /proc, and the samples go to `.cluster/stress-soak-rss.csv` as they are taken (`tail -f`
it to watch a run).

The figures: RSS at the start (every job has fired once), its peak and at the end, the growth
in all and per hour over the second half (past warm-up); the CPU used; the executions fired
against the occurrences due, the executions still unfinished and the pods started when the
soak ends; the fire lag overall and by tenth of the soak (flat means the operator keeps up,
rising means a backlog builds). The test fails when the operator exits, when an occurrence is
missed or doubled, when the executions unfinished at the end exceed KEEP_UP_SECONDS of the
rate (the pod path did not keep up: it is then not waited for, only reported), when an
execution has no pod or more than one, and when the RSS exceeds VIGIL_STRESS_SOAK_RSS_MIB (200).

The jobs keep the operator's default retention, so finished Executions and their pods are
deleted as they go, as in production: the soak measures a steady state, not a pile. What is
checked is counted from watches, by uid, as objects are created, so deletions change nothing.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.jobs import parse_time
from tests.integration.operators import OperatorFleet, OperatorProcess
from tests.stress.figures import Figures
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
from tests.stress.recorders import Sightings, cpu_seconds, rss_mib
from tests.stress.sizes import SIZES
from tests.waiting import wait_for

PERIOD = timedelta(seconds=2)
SAMPLES = 360  # RSS samples over the soak: every 10 s in an hour
SAMPLE_SECONDS = (1.0, 10.0)  # the sampling interval's bounds
SAMPLES_FILE = REPO / ".cluster" / "stress-soak-rss.csv"
#: Executions unfinished when the soak ends may be at most this many seconds of the rate. A pod
#: path that keeps up holds a few seconds' worth (one pod's turnaround); more means a backlog.
KEEP_UP_SECONDS = 30


@pytest.mark.stress
@pytest.mark.timeout(1200 + SIZES.soak_seconds)  # the soak, then settling and counting
def test_a_steady_soak_keeps_up_keeps_memory_in_budget_and_fires_every_occurrence_once(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, figures: Figures, watches: ExitStack
) -> None:
    jobs = [f"soak{i:03}" for i in range(SIZES.soak_rate * int(PERIOD.total_seconds()))]
    operator = fleet.start()
    fleet.leader()
    executions = watches.enter_context(watch_executions(cluster, namespace))
    pods = watches.enter_context(watch_pods(cluster, namespace))
    for name in jobs:
        create_recurring_job(cluster, namespace, name, every=PERIOD)
    wait_for(lambda: len(first_fired(executions, jobs)) == len(jobs), timeout=120, what="every job to fire")
    figures.add("scenario", f"{len(jobs)} jobs every {PERIOD.seconds}s = {SIZES.soak_rate} executions/s "
                            f"for {SIZES.soak_seconds:.0f} s, one operator")  # fmt: skip

    begun = datetime.now(UTC)
    peak = soak(fleet, operator, executions, pods, figures)
    end = datetime.now(UTC)
    backlog = sum(s.facts["phase"] not in FINAL for s in executions.all())
    figures.add("when the soak ended", f"{executions.count()} executions seen, {backlog} unfinished; "
                                       f"{pods.count()} pods seen")  # fmt: skip
    wait_fired_through(executions, jobs, end, timeout=120)
    suspend_jobs(cluster, namespace, jobs)
    keeping_up = backlog <= KEEP_UP_SECONDS * SIZES.soak_rate
    if keeping_up:
        wait_settled(executions, pods, timeout=300)
    executions.stop()
    pods.stop()

    windows = {job: (parse_time(stamp), end) for job, stamp in first_fired(executions, jobs).items()}
    tally = account(executions.all(), pods.all(), windows=windows, step=PERIOD)
    missed = recorded_missed(cluster, namespace, jobs)
    tally.report(figures)
    figures.add("execution lag by tenth", lag_trend(executions.all(), start=begun, end=end))
    figures.add("pod lag by tenth", lag_trend(pods.all(), start=begun, end=end))
    figures.add("recorded Missed", str(len(missed)))
    figures.add("watch re-lists / errors", f"{executions.relists + pods.relists} / {len(executions.errors + pods.errors)}")

    assert not missed, missed
    assert not tally.missing and not tally.duplicate_executions and not tally.duplicate_pods, tally.problems()
    assert keeping_up, (
        f"{backlog} executions unfinished when the soak ended, more than {KEEP_UP_SECONDS} s of "
        f"{SIZES.soak_rate}/s: the pod path fell behind (pod lag by tenth: {lag_trend(pods.all(), start=begun, end=end)})"
    )
    assert not tally.problems(), tally.problems()
    assert peak <= SIZES.soak_rss_budget_mib, f"operator RSS peaked at {peak:.0f} MiB (budget {SIZES.soak_rss_budget_mib:.0f})"


def soak(fleet: OperatorFleet, operator: OperatorProcess, executions: Sightings, pods: Sightings, figures: Figures) -> float:
    """Let the soak's time pass, sampling the operator; add its memory and CPU figures; the peak RSS in MiB."""
    interval = min(max(SIZES.soak_seconds / SAMPLES, SAMPLE_SECONDS[0]), SAMPLE_SECONDS[1])
    samples: list[tuple[float, float]] = []  # (seconds into the soak, RSS MiB)
    cpu_start, started = cpu_seconds(operator.proc.pid), time.monotonic()
    harness_start = cpu_seconds(os.getpid())
    SAMPLES_FILE.parent.mkdir(parents=True, exist_ok=True)
    with SAMPLES_FILE.open("w") as out:
        out.write("seconds,rss_mib,executions_seen,unfinished,pods_seen\n")
        while (elapsed := time.monotonic() - started) < SIZES.soak_seconds:
            assert operator.alive, f"the operator exited during the soak:\n{fleet.logs()[-4000:]}"
            samples.append((elapsed, rss_mib(operator.proc.pid)))
            unfinished = sum(s.facts["phase"] not in FINAL for s in executions.all())
            out.write(f"{elapsed:.1f},{samples[-1][1]:.1f},{executions.count()},{unfinished},{pods.count()}\n")
            out.flush()
            time.sleep(interval)  # the scenario: wall time passing under a steady load
        samples.append((elapsed, rss_mib(operator.proc.pid)))
    cpu = cpu_seconds(operator.proc.pid) - cpu_start
    harness = cpu_seconds(os.getpid()) - harness_start

    (t0, first), (t1, last) = samples[0], samples[-1]
    peak_at, peak = max(samples, key=lambda s: s[1])
    mid_at, mid = min(samples, key=lambda s: abs(s[0] - (t0 + t1) / 2))
    per_hour = (last - mid) / max(t1 - mid_at, 1) * 3600
    figures.add("operator RSS", f"start {first:.1f} MiB, peak {peak:.1f} MiB (at {peak_at:.0f} s), end {last:.1f} MiB")
    figures.add("RSS growth", f"{last - first:+.1f} MiB in {t1 - t0:.0f} s; second half {last - mid:+.1f} MiB "
                              f"= {per_hour:+.1f} MiB/h ({len(samples)} samples in {SAMPLES_FILE.name})")  # fmt: skip
    figures.add("operator CPU", f"{cpu:.0f} s = {100 * cpu / max(t1 - t0, 1):.0f}% of one core "
                                f"(this test's own watches: {100 * harness / max(t1 - t0, 1):.0f}%); "
                                f"load average {' '.join(f'{n:.1f}' for n in os.getloadavg())}")  # fmt: skip
    return peak
