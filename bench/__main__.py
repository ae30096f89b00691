"""`make bench`: Vigil on the local control plane, each figure beside its reference from the same run.

Prints figures; never fails for being slow. Every wait has a deadline; a section that reaches
it says how many of how many finished and prints censored figures (bench/reporting.py), never
a rate or a time as if all had finished. The run ends with one table: each figure, its
reference measured in the same run, the ratio, and the target (issue 10). The measurements
(each one a section, selectable: `python -m bench podfloor firelag`):

1. **podfloor** — the API server's own floor (bench/podfloor.py): a plain client (8 threads)
   creates `--pods` bare pods; pods/s, observed and Succeeded p50/p99, API writes per pod
   counting every client. The reference for the burst and throughput figures; it runs first,
   and is added by itself when a section that needs it is chosen (`--no-floor` leaves it out).
2. **tick** — tick cost vs catalogue size: one trigger pass that handles `--jobs` due
   occurrences, with as many and then `--catalogue` occurrences catalogued in future buckets:
   wall time and bucket reads. The ratio should stay near 1 (DESIGN invariant 4).
3. **firelag** — `--jobs` ScheduledJobs due in the same minute, jitter off (bench/burst.py):
   Execution and pod observed p99 from the fire time, each divided by the floor's observed p99;
   Vigil's own API writes and reads per execution from the API server's audit log, by verb and
   resource; ScheduleChainBroken Events raised by the burst.
4. **jitter** — the same jobs with the default jitter: lag from each occurrence's own
   (jittered) fire time, p50/p99.
5. **cronjob** — the native CronJob controller with the same schedules: Job and pod observed.
6. **executions** — executions per second through the pod path, beside the floor's pods/s.
7. **workflows** — 10-step workflows (bench/workflows.py): steps/s beside the floor's pods/s
   (the target's reference), and beside its pods run to Succeeded per second: a step's
   dependents wait for its pod to end, and the floor's pods end more slowly than they are
   created (the node runs them after the API server has them), so the second ratio is the one
   the engine's own costs show in; and beside the same graph run by a plain client with bare
   pods, each created once the pods it depends on Succeeded (bench/dagfloor.py): the least any
   engine running this graph does here, so the third ratio is the engine's cost alone.
   **fan** — a fan-out of `--fan-workflows` x `--fan-width` steps (50 x 200: 10,000), steps/s
   of `task` steps (the volume tier: `vigil worker` processes, a PostgreSQL of its own) beside
   the same fan of `pod` steps (bench/workflows.py).
8. **resume** — a standby resumes `--resume` waiting workflows after the leader is ended
   gracefully (SIGTERM), then after a crash (SIGKILL), each on its own cluster.
9. **rss** — the operator's RSS with `--rss-jobs` ScheduledJobs, `--rss-executions` retained
   Executions and `--rss-workflows` Workflows (bench/rss.py).
10. **history** — history inserts per second (SQLite, PostgreSQL); needs no cluster.
11. **onboarding** — `--onboard` new ScheduledJobs (10,000) until every one has a nextRun:
   jobs/s beside the 200/s target, bucket and API writes per job (bench/onboarding.py); once
   created while the operator runs (bounded by the creating client too), once all waiting when
   it takes the Lease (its own pace).
12. **queue** — the volume tier: `--queue-executions` no-op executions end to end through
   `vigil worker` processes beside pgqueuer's on the same PostgreSQL, over 1, 2 and 4 worker
   processes (bench/queue.py); needs no cluster.
13. **backlog** — the volume tier draining a backlog (bench/backlog.py): N = 10,000, 100,000 and
   1,000,000 no-op executions submitted and analysed before 1 and 4 worker processes start,
   the rate over the first `--backlog-window` (50,000), the median of three windows, beside
   pgqueuer and the SQL floor on the same PostgreSQL, with the lease's plan (cost, JIT, ms per
   execution) at each depth.
14. **queuetrigger** — the volume tier's trigger and recovery (bench/queuetrigger.py): cost per
   due job with 10,000 vs 1,000,000 jobs catalogued, lag from each fire time with 100,000 due in
   one hour, the shard process's RSS over 1,000,000 jobs, and a SIGKILLed worker's execution
   running again; `--queue-trigger "--large 100000 ..."` passes sizes; needs no cluster.
15. **queuerss** — a whole `vigil operator` with the volume tier on (bench/rss.py): its RSS once
   it holds every trigger shard, over `--queue-rss` SMALL,LARGE (10,000 and 1,000,000) daily
   jobs catalogued in a fresh database each, the large beside the small.
16. **hostile** — 50 hostile payload templates of every kind beside a canary job (bench/hostile.py):
   the operator's peak RSS beside the same run without them, and the canary's fire lag p99.
17. **console** — the web console's Jobs page with `--console-jobs` (1,000) jobs in a namespace
   (bench/console.py): first render and median server time, bytes transferred (gzip) with and
   without its static files, beside the 300 ms and 200 KiB targets; needs no cluster.
18. **api** — the HTTP API (bench/api.py, issue 37): `GET` of an execution's timeline, p99 at
   `--api-rate` (200) requests/s over keep-alive connections, beside the history query's own
   p99 (needs no cluster); then the operator's RSS at the `rss` section's sizes with the API
   serving that rate, beside the same load with the API off (bench/apirss.py).

Every measurement gets a fresh local control plane of its own (bench/cluster.py), with an API
server audit log, and runs the operator as the chart's ServiceAccount. The lag figures all use
the same clock and method (a watch in this process, receive time minus the fire time), so they
compare like with like. The machine is small (2 cores) and also runs the control plane and one
local process per pod, so absolute numbers are pessimistic: read the ratios.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import api as api_bench
from bench import apirss as api_rss_bench
from bench import backlog as backlog_bench
from bench import console as console_bench
from bench import dagfloor, podfloor
from bench import history as history_bench
from bench import hostile as hostile_bench
from bench import onboarding as onboarding_bench
from bench import queue as queue_bench
from bench import queuetrigger as queue_trigger_bench
from bench import rss as rss_bench
from bench import steady as steady_bench
from bench import workflows as workflow_bench
from bench.audit import READ_VERBS, short_user
from bench.burst import Lag, daily_cron, fire_lag_vigil, next_boundary
from bench.cluster import (
    GROUP,
    STATE,
    VERSION,
    Arrivals,
    Bench,
    fresh_cluster,
    load,
    stop_process,
    wait_until,
)
from bench.reporting import (
    Completion,
    Row,
    censored,
    duration,
    percentile,
    rate,
    ratio,
    seconds,
    summary,
    table,
)
from e2e.cluster import localcluster
from tests.contract.postgres import DURABLE_SETTINGS, PostgresServer
from vigil.core.buckets import BucketEntry, entry_key, minute_of
from vigil.core.ids import execution_id
from vigil.core.memory import FakeClock
from vigil.core.trigger import Trigger
from vigil.kube.controllers.launcher import ExecutionLauncher
from vigil.kube.kits.events import EventRecorder
from vigil.kube.stores.buckets import KubeBucketStore
from vigil.kube.stores.executions import ExecutionStore, execution_body
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.jobstatus import JobStatusWriter
from vigil.kube.stores.ledger import KubeLedger
from vigil.kube.stores.results import JobResults
from vigil.model.jobspec import schedule_hash

__all__ = ["Arrivals", "Bench", "fresh_cluster", "main", "stop_process"]  # what other sections import from here

CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
SECTIONS = (
    "podfloor", "tick", "firelag", "jitter", "cronjob", "executions", "workflows", "fan", "resume", "rss", "history", "onboarding", "queue",
    "backlog", "queuetrigger", "queuerss", "hostile", "console", "api", "sustained", "soak",
)  # fmt: skip
NEEDS_FLOOR = ("firelag", "jitter", "cronjob", "executions", "workflows")
ARMED_MARGIN_S = 5.0  # the CronJobs must exist this long before the target minute
EXECUTIONS_DEADLINE_S = 600.0  # the executions section stops waiting this long after creating them
WRITES_BUDGET = 3  # Vigil's own API writes per execution (DESIGN, "The controller shape")
JOB_STATUS = frozenset({"scheduledjobs/status"})  # the job's status: its own budget, one per job per s
PER_EXECUTION = frozenset({"executions", "executions/status", "pods"})  # the execution's own objects
RSS_BUDGET_MIB = 200


def fire_lag_cronjob(b: Bench, count: int, lead: float, window: float) -> Lag:
    """The same schedules as native CronJobs: scheduled minute to Job observed, and to pod observed."""
    ns = b.namespace("bench-cron")
    batch = client.BatchV1Api(b.api)
    notes: list[str] = []
    target = next_boundary(datetime.now(UTC), timedelta(seconds=lead))
    suffix = str(int(target.timestamp() // 60))  # CronJob names its Job <cronjob>-<minutes since epoch>
    jobs = Arrivals(batch.list_namespaced_job, ns,
                    lambda j: str(j["metadata"]["name"]) if j["metadata"]["name"].endswith(f"-{suffix}") else None)  # fmt: skip
    pods = Arrivals(b.core.list_namespaced_pod, ns,
                    lambda p: str(p["metadata"]["name"]) if f"-{suffix}-" in p["metadata"]["name"] else None)  # fmt: skip

    def make(i: int) -> None:
        body = {
            "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": f"c{i:04}"},
            "spec": {"schedule": daily_cron(target), "timeZone": "UTC", "jobTemplate": {"spec": {
                "backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}}}},
        }  # fmt: skip
        batch.create_namespaced_cron_job(ns, body)

    created_at = time.monotonic()
    b.create_many(count, make)
    margin = (target - datetime.now(UTC)).total_seconds()
    print(f"  cronjob: {count} CronJobs ({daily_cron(target)} UTC) created in {time.monotonic() - created_at:.1f}s, "
          f"{margin:.0f}s before the target")  # fmt: skip
    if margin < ARMED_MARGIN_S:
        notes.append(f"the CronJobs were created only {margin:.0f}s before the target (raise --lead)")
    wait_until(target, lambda: False, interval=0.2)
    print(f"  cronjob: target minute {target:%Y-%m-%dT%H:%M:%SZ}: {load()}")
    done = wait_until(target + timedelta(seconds=window), lambda: len(pods.seen) >= count)
    jobs.stop()
    pods.stop()
    if not done:
        notes.append(f"only {len(pods.seen)}/{count} pods observed within {window:.0f}s of the target")
        try:
            existing = [j for j in batch.list_namespaced_job(ns).items if j.metadata.name.endswith(f"-{suffix}")]
            notes.append(f"Jobs for the target: {len(existing)} exist, {len(jobs.seen)} observed")
            notes.append(f"pods in the namespace: {len(b.core.list_namespaced_pod(ns).items)}")
        except client.ApiException as err:
            notes.append(f"could not read the cluster: {err.status} {err.reason}")
        for arrivals, what in ((jobs, "Job"), (pods, "pod")):
            if arrivals.errors:
                notes.append(f"{what} watch errors: {len(arrivals.errors)}, last: {arrivals.errors[-1]}")
    return Lag(jobs.offsets(target), pods.offsets(target), notes)


def executions_rate(b: Bench, count: int) -> Completion:
    """Executions through the pod path: `count` Ready executions to Succeeded.

    One operator (dispatch cap 100), a job whose pod runs `true`; the executions are
    created at once (as a backfill would) and the clock runs from the first creation to
    the last Succeeded, or to the deadline with some still unfinished. The job keeps every
    one of them (`retention`): with the default (3) retention deleted the Succeeded ones
    before they were counted, and the section read 3 of 300 finished.
    """
    ns = b.namespace("bench-exec")
    opns = b.namespace("bench-execop")
    proc, pidfile = b.start_operator("bench-exec", (
        f"namespace: {opns}\ndispatch: {{maxRunning: 100, perNamespaceMax: 100, reservedHigh: 0}}\n"
        f"http: {{metricsPort: 0, apiPort: 0, healthPort: 0}}\nhistory: {{dsn: 'sqlite:///{b.state}/bench-history.db'}}\n"
    ))  # fmt: skip
    try:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": "throughput"},
            "spec": {"every": "24h", "template": {"spec": {"containers": [CONTAINER]}},
                     "retention": {"succeeded": min(count, 1000), "failed": min(count, 1000)}},  # the most it takes
        }  # fmt: skip
        job = b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs", body)
        base = datetime(2026, 1, 1, tzinfo=UTC)
        started = time.monotonic()

        def make(i: int) -> None:
            nominal = base + timedelta(minutes=i)
            b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "executions", execution_body(
                job=job, execution_id=execution_id(job["metadata"]["uid"], nominal), scheduled_for=nominal,
                period_start=nominal - timedelta(minutes=1), period_end=nominal, source="Backfill",
            ))  # fmt: skip

        b.create_many(count, make)

        def succeeded() -> int:
            items = b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "executions")["items"]
            return sum((i.get("status") or {}).get("phase") == "Succeeded" for i in items)

        deadline = time.monotonic() + EXECUTIONS_DEADLINE_S
        finished = succeeded()
        while finished < count and time.monotonic() < deadline:
            time.sleep(0.5)
            finished = succeeded()
        return Completion(finished=finished, expected=count, seconds=time.monotonic() - started)
    finally:
        stop_process(proc, pidfile)


def tick_cost(b: Bench, *, due: int, catalogued: int) -> tuple[float, int, int]:
    """One trigger pass over `due` occurrences with `catalogued` more waiting in future buckets."""
    ns = b.namespace("bench-tick")
    opns = b.namespace("bench-tickop")

    def make(i: int) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": f"t{i:04}"},
            "spec": {"every": "1h", "jitter": "0s", "template": {"spec": {"containers": [CONTAINER]}}},
        }  # fmt: skip
        b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs", body)

    b.create_many(due, make)
    jobs = b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs")["items"]
    # The bench plays the create handler: real schedule fingerprints, so nothing is superseded.
    store = KubeBucketStore(b.api, namespace=opns, shards=4, max_per_bucket=2000)
    now = minute_of(datetime.now(UTC)) + timedelta(minutes=1)
    for obj in jobs:  # due entries, as the create handler would have inserted them
        meta = obj["metadata"]
        store.insert(BucketEntry(
            key=entry_key(meta["uid"], now, schedule_hash(obj)), namespace=ns, name=meta["name"],
            uid=meta["uid"], generation=1, schedule_hash=schedule_hash(obj), nominal=now, fire_at=now,
        ))  # fmt: skip
    filler = catalogued - due
    per_bucket = 2000
    for start in range(0, filler, per_bucket):  # the rest of the catalogue: future minutes, written directly
        minute = now + timedelta(minutes=10 + start // per_bucket)
        entries = [
            {"key": f"filler-{start + j}", "namespace": ns, "name": f"filler-{start + j}", "uid": f"u{start + j}",
             "generation": 1, "scheduleHash": "x", "nominal": minute.strftime("%Y-%m-%dT%H:%M:%SZ"),
             "fireAt": minute.strftime("%Y-%m-%dT%H:%M:%SZ")}
            for j in range(min(per_bucket, filler - start))
        ]  # fmt: skip
        b.custom.create_namespaced_custom_object(GROUP, VERSION, opns, "schedulebuckets", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduleBucket",
            "metadata": {"name": f"sb-{minute.strftime('%Y%m%d%H%M')}-0",
                         "labels": {"vigil.dev/minute": minute.strftime("%Y%m%d%H%M"), "vigil.dev/pending": "true"}},
            "spec": {"minute": minute.strftime("%Y-%m-%dT%H:%M:%SZ"), "shard": 0, "occurrences": entries},
        })  # fmt: skip
    counting = CountingStore(store)
    catalogue = KubeCatalogue(b.api)
    clock = FakeClock(now + timedelta(seconds=1))
    events = EventRecorder(b.api, instance="bench")
    writer = JobStatusWriter(b.api, catalogue=catalogue)  # its queue is not run: flushed in the pass
    trigger = Trigger(
        store=counting,
        catalogue=catalogue,
        launcher=ExecutionLauncher(
            store=ExecutionStore(b.api), catalogue=catalogue, clock=clock,
            results=JobResults(store=ExecutionStore(b.api), events=events, clock=clock, writer=writer),
            pods=b.core,
        ),
        ledger=KubeLedger(catalogue=catalogue, events=events, writer=writer),
        clock=clock,
    )
    trigger.rescan()
    counting.reads = 0
    started = time.perf_counter()
    report = trigger.tick()
    writer.flush(time.monotonic() + 600)  # the pass's ledger on the jobs, as each fire's was before
    elapsed = time.perf_counter() - started
    return elapsed, counting.reads, report.created


class CountingStore:
    """Counts the bucket objects a pass reads: the cost that must not grow with the catalogue."""

    def __init__(self, inner: KubeBucketStore) -> None:
        self.inner = inner
        self.reads = 0

    def read_minute(self, minute: datetime) -> Any:
        buckets = self.inner.read_minute(minute)
        self.reads += len(buckets)
        return buckets

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def print_lag(who: str, trigger_what: str, lag: Lag, count: int, window: float) -> None:
    print(f"  {who:7} {trigger_what + ' observed - fire time:':31} {summary(lag.trigger, count, window)}")
    print(f"  {who:7} {'pod observed - fire time:':31} {summary(lag.pods, count, window)}")
    for note in lag.notes:
        print(f"  {who:7}   note: {note}")


def p99(values: list[float], count: int) -> float:
    return percentile(censored(values, count), 0.99) if values else math.inf


@dataclass
class Run:
    """What one `make bench` run has measured so far: the floor, and the table's rows."""

    args: argparse.Namespace
    floor: podfloor.Floor | None = None
    rows: list[Row] = field(default_factory=list)

    @property
    def floor_p99(self) -> float | None:
        return self.floor.observed_p99 if self.floor else None

    @property
    def floor_rate(self) -> float | None:
        return self._rate(self.floor.pods_per_s if self.floor else None)

    @property
    def floor_succeeded_rate(self) -> float | None:
        return self._rate(self.floor.succeeded_per_s if self.floor else None)

    @staticmethod
    def _rate(done: Completion | None) -> float | None:
        return done.rate if done is not None and done.complete else None

    def add(self, figure: str, measured: str, *, reference: str = "-", ratio: str = "-", target: str = "-") -> None:
        self.rows.append(Row(figure, measured, reference, ratio, target))

    def against_floor(self, figure: str, value: float, target: str) -> None:
        """A latency beside the floor's observed p99."""
        ref = self.floor_p99
        self.add(figure, seconds(value, self.args.window), reference=seconds(ref) if ref else "n/a",
                 ratio=ratio(value, ref), target=target)  # fmt: skip

    def rate_against_floor(
        self, figure: str, done: Completion, unit: str, target: str, *, succeeded: bool = False
    ) -> None:
        """A rate beside the floor's pods/s (created and seen), or (`succeeded`) its pods run to
        Succeeded per second."""
        ref = self.floor_succeeded_rate if succeeded else self.floor_rate
        measured = f"{done.rate:.1f} {unit}/s" + ("" if done.complete else " (censored)")
        self.add(figure, measured, reference=f"{ref:.1f} pods/s" if ref else "n/a",
                 ratio=ratio(done.rate, ref) if done.complete else "n/a (censored)", target=target)  # fmt: skip


def run_podfloor(run: Run) -> None:
    n = run.args.pods or run.args.jobs
    print(f"\n## podfloor: a plain client (8 threads) creates {n} bare pods")
    with fresh_cluster("podfloor") as b:
        floor = podfloor.run(b, n, run.args.window)
    run.floor = floor
    print(f"  pods observed - first create:  {summary(floor.observed, n, run.args.window)}")
    print(f"  pods Succeeded - first create: {summary(floor.succeeded, n, run.args.window)}")
    print(f"  {rate(floor.pods_per_s, 'pods')}")
    print(f"  {rate(floor.succeeded_per_s, 'pods')} run to Succeeded")
    writes = floor.writes.writes()
    print(f"  API writes per pod, every client: {writes / n:.2f} ({writes} in the pods' namespace), by verb and resource:")
    for line in floor.writes.breakdown(per=n):
        print(f"    {line}")
    for note in floor.notes:
        print(f"  note: {note}")
    run.add(f"podfloor ({n} pods): pods/s", rate(floor.pods_per_s, "pods").split(" (")[0], target="the reference")
    run.add(f"podfloor ({n} pods): observed p99", seconds(floor.p(0.99), run.args.window), target="the reference")
    run.add(f"podfloor ({n} pods): Succeeded p99", seconds(floor.p(0.99, floor.succeeded), run.args.window),
            target="the reference")  # fmt: skip
    run.add(f"podfloor ({n} pods): API writes/pod, every client", f"{writes / n:.2f}", target="the reference")


def print_requests(run: Run, lag: Lag, count: int) -> None:
    """Vigil's writes and reads per execution, by verb and resource, from the audit log."""
    if lag.requests is None or not lag.executions:
        print("  vigil: no request counts (no Execution Succeeded)")
        return
    n, req = lag.executions, lag.requests
    writes, reads = req.writes(lag.user), req.reads(lag.user)
    print(f"  vigil: API requests of {short_user(lag.user)} per execution (audit log, {n} Executions Succeeded): "
          f"writes {writes / n:.2f}, reads {reads / n:.2f}")  # fmt: skip
    print("    writes per execution, by verb and resource:")
    for line in req.breakdown(per=n, user=lag.user):
        print(f"      {line}")
    print("    reads per execution, by verb and resource:")
    for line in req.breakdown(per=n, user=lag.user, verbs=READ_VERBS)[:8]:
        print(f"      {line}")
    run.add(f"burst ({count}): Vigil writes/execution", f"{writes / n:.2f}", target=f"<= {WRITES_BUDGET}")
    # The split the issue's own example suggests: the execution's objects, then the job's status (each
    # of the burst's jobs fires once, so at most one write per job per second is one per execution),
    # then what the rest is (bucket entries, Leases): so each run shows where the budget goes.
    own, job = req.writes(lag.user, resources=PER_EXECUTION), req.writes(lag.user, resources=JOB_STATUS)
    run.add("  of them: Execution and pod", f"{own / n:.2f}", target="-")
    run.add("  of them: the job's status", f"{job / n:.2f} ({job} for {count} jobs)", target="<= 1/job/s")
    run.add("  of them: the rest (buckets, Leases, Events)", f"{(writes - own - job) / n:.2f}", target="-")
    run.add(f"burst ({count}): Vigil reads/execution", f"{reads / n:.2f}", target="from caches")
    everyone = req.writes() / n
    print(f"  every client's API writes per execution: {everyone:.2f}")
    floor = run.floor.writes.writes() / run.floor.count if run.floor else None
    run.add(f"burst ({count}): API writes/execution, every client", f"{everyone:.2f}",
            reference=f"{floor:.2f}/pod" if floor else "n/a", ratio=ratio(everyone, floor), target="-")  # fmt: skip


def run_firelag(run: Run) -> Lag:
    args = run.args
    with fresh_cluster("firelag") as b:
        lag = fire_lag_vigil(b, args.jobs, args.lead, args.window)
    print_requests(run, lag, args.jobs)
    if lag.chain_broken is not None:
        print(f"  vigil: ScheduleChainBroken Events in the jobs' namespace: {lag.chain_broken}")
        run.add(f"burst ({args.jobs}): ScheduleChainBroken Events", str(lag.chain_broken), target="0")
    run.against_floor(f"burst ({args.jobs}, jitter off): pod observed p99", p99(lag.pods, args.jobs), "<= 2x")
    run.against_floor(f"burst ({args.jobs}, jitter off): Execution observed p99", p99(lag.trigger, args.jobs),
                      "<= 1.5x")  # fmt: skip
    return lag


def run_jitter(run: Run) -> None:
    args = run.args
    print(f"\n## jitter: {args.jobs} jobs on one minute with the default jitter; lag from each one's own fire time")
    with fresh_cluster("jitter") as b:
        lag = fire_lag_vigil(b, args.jobs, args.lead, args.window, jitter=True)
    print_lag("vigil", "Execution", lag, args.jobs, args.window)
    pods = censored(lag.pods, args.jobs)
    for q, target in ((0.5, "-"), (0.99, "<= 1s")):
        value = percentile(pods, q) if lag.pods else math.inf
        run.add(f"burst ({args.jobs}, default jitter): pod lag from own fire time p{round(q * 100)}",
                seconds(value, args.window), target=target)  # fmt: skip


def run_resume(run: Run) -> None:
    args = run.args
    for graceful in (True, False):
        how = "graceful handover (SIGTERM)" if graceful else "crash (SIGKILL)"
        print(f"\n## resume: a standby takes over {args.resume} waiting workflows after a {how}")
        with fresh_cluster("resume-term" if graceful else "resume-kill") as b:
            done, notes = workflow_bench.resume_time(b, b.state, stop_process, args.resume, graceful=graceful)
        print(f"  all {args.resume} finished {duration(done)} after the signal")
        print(f"  {notes}")
        target = "<= 5s" if graceful else "<= lease (15s) + 5s"
        run.add(f"resume {args.resume} workflows after {'SIGTERM' if graceful else 'SIGKILL'}",
                duration(done).split(" (")[0], target=target)  # fmt: skip


def run_steady(run: Run, *, floor: bool, soak: bool) -> None:
    """The sustained floor, then the soak at a share of it (or at --soak-rate)."""
    args = run.args
    rate = args.soak_rate
    long: steady_bench.Rate | None = None
    if floor:
        rates = [float(r) for r in args.sustained_rates.split(",")]
        print("\n## sustained: a plain client creating bare pods at a steady rate, deleting each once it has succeeded")
        with fresh_cluster("sustained") as b:
            tried = steady_bench.sustained_floor(b, rates, args.sustained_seconds)
            print(f"  the rates that held, highest first, for the soak's {args.soak_seconds:g}s until one holds")
            long = steady_bench.held_for(b, tried, args.soak_seconds)
            best, rows = steady_bench.floor_rows(tried, args.sustained_seconds, long, args.soak_seconds)
        run.rows.extend(rows)
        rate = best * args.soak_share if best is not None and rate is None else rate
    if soak:
        if rate is None:
            print("\n## soak: no rate (the sustained floor held none, and no --soak-rate): not run")
            return
        print(f"\n## soak: interval jobs at {rate:g} occurrences/s for {args.soak_seconds:g}s, default retention")
        with fresh_cluster("soak") as b:
            run.rows.extend(steady_bench.soak_rows(steady_bench.soak(b, rate, args.soak_seconds), args.soak_seconds, long))


def run_onboarding(run: Run) -> None:
    """The ConfigMap floor (how fast this client creates objects at all), then new jobs created
    while the operator runs and jobs waiting when it takes the Lease."""
    args = run.args
    print(f"\n## onboarding floor: the same client creating {args.onboard} ConfigMaps of a ScheduledJob's size")
    with fresh_cluster("onboarding-floor") as b:
        floor = onboarding_bench.configmap_floor(b, args.onboard)
    print(f"  {rate(floor, 'ConfigMaps')}")
    run.add(f"onboarding floor: {args.onboard} ConfigMaps created", f"{floor.rate:.0f}/s", target="the reference")
    for waiting in (False, True):
        how = "waiting when the operator takes the Lease" if waiting else "created while it runs"
        print(f"\n## onboarding: {args.onboard} new ScheduledJobs {how}, until every one has a nextRun")
        with fresh_cluster("onboarding-waiting" if waiting else "onboarding") as b:
            onboarded, said, behind = onboarding_bench.onboarding(b, b.api, b.state, stop_process, args.onboard,
                                                                  waiting=waiting)  # fmt: skip
        run.add(f"onboarding: {args.onboard} ScheduledJobs {'waiting' if waiting else 'new'} to nextRun",
                onboarding_bench.report(onboarded, said), reference=f"{floor.rate:.0f} ConfigMaps/s",
                ratio=ratio(onboarded.rate, floor.rate) if onboarded.complete else "n/a (censored)",
                target=f">= {onboarding_bench.TARGET_RATE:.0f} jobs/s")  # fmt: skip
        if behind is not None:
            run.add("onboarding: each job's nextRun behind its own creation, p99", seconds(behind, args.window),
                    target=f"<= {onboarding_bench.TARGET_BEHIND_S:.0f}s, whatever the client's rate")  # fmt: skip


def run_rss(run: Run) -> None:
    args = run.args
    size = f"{args.rss_jobs} jobs / {args.rss_executions} executions / {args.rss_workflows} workflows"
    print(f"\n## rss: the operator's resident memory at {size}")
    with fresh_cluster("rss") as b:
        got = rss_bench.run(b, jobs=args.rss_jobs, executions=args.rss_executions, workflows=args.rss_workflows,
                            settle=args.rss_settle)  # fmt: skip
    if got.loaded_after is not None:
        print(f"  the operator had every job's nextRun and every workflow Running {got.loaded_after:.0f}s after its start")
    if got.samples:
        print(f"  VmRSS over {len(got.samples)} samples: steady {got.steady:.0f} MiB, peak {max(got.samples):.0f} MiB")
    for note in got.notes:
        print(f"  note: {note}")
    run.add(f"operator RSS at {size}", f"{got.steady:.0f} MiB" if got.samples else "n/a",
            target=f"<= {RSS_BUDGET_MIB} MiB at 10000/10000/1000")  # fmt: skip


def run_fan(run: Run) -> None:
    """A fan-out of task steps beside the same fan of pod steps: steps/s, the pod row the reference."""
    workflows, width = run.args.fan_workflows, run.args.fan_width
    print(f"\n## fan: {workflows} workflows of {width} steps ({workflows * width} steps), task steps beside pod steps")
    server = PostgresServer.create(settings=DURABLE_SETTINGS)
    try:
        dsn = queue_trigger_bench.fresh_database(server)
        with fresh_cluster("fan") as b:
            logs = b.state / "logs"

            def spawn_worker(queue: str, log: Path) -> subprocess.Popen[bytes]:
                return queue_bench.spawn_vigil(dsn, log, queue=queue)

            def ready(workers: list[subprocess.Popen[bytes]], paths: list[Path]) -> None:
                queue_bench.wait_ready(workers, paths, "tasks noop")

            found = workflow_bench.fan_rate(b, b.state, stop_process, workflows=workflows, width=width, dsn=dsn,
                                            spawn_worker=spawn_worker, ready=ready, logs=logs)  # fmt: skip
    finally:
        server.drop()
    for kind, (done, notes) in found.items():
        print(f"  {kind} steps: {rate(done, 'steps')}; {notes}")
    pods, tasks = found["pod"][0], found["task"][0]
    run.add(f"fan ({workflows} x {width}): task steps/s", rate(tasks, "steps"), reference=f"pod steps {rate(pods, 'steps')}",
            ratio=f"{tasks.rate / max(pods.rate, 1e-9):.2f}x", target="-")  # fmt: skip


def run_queue_rss(run: Run) -> None:
    """A whole operator with the volume tier on, over SMALL and then LARGE recurring jobs catalogued."""
    small, large = (int(n) for n in run.args.queue_rss.split(","))
    print(f"\n## queuerss: the operator's resident memory with the volume tier on, {small} vs {large} jobs catalogued")
    server = PostgresServer.create(settings=DURABLE_SETTINGS)
    steady: dict[int, float] = {}
    try:
        for jobs in (small, large):
            dsn = queue_trigger_bench.fresh_database(server)
            now = datetime.now(UTC)
            queue_trigger_bench.prepare(dsn, now=now)
            added = time.monotonic()
            queue_trigger_bench.catalogue(dsn, queue_trigger_bench.daily_jobs(jobs), now=now)
            queue_trigger_bench.analyse(dsn)
            print(f"  {jobs} daily jobs catalogued in {time.monotonic() - added:.0f}s")
            with fresh_cluster("queuerss") as b:
                got = rss_bench.run_queue(b, dsn=dsn, shards=queue_trigger_bench.SHARDS, settle=run.args.rss_settle)
            for note in got.notes:
                print(f"  note: {note}")
            if got.samples:
                steady[jobs] = got.steady
                print(f"  {jobs} catalogued: every shard held {got.loaded_after or float('nan'):.0f}s after start; "
                      f"VmRSS steady {got.steady:.0f} MiB, peak {max(got.samples):.0f} MiB")  # fmt: skip
    finally:
        server.drop()
    if small in steady and large in steady:
        run.add(f"operator RSS, volume tier on, {large} jobs catalogued", f"{steady[large]:.0f} MiB",
                reference=f"{steady[small]:.0f} MiB at {small}", ratio=f"{steady[large] / steady[small]:.2f}x",
                target=f"<= {RSS_BUDGET_MIB} MiB")  # fmt: skip
    else:
        run.add(f"operator RSS, volume tier on, {large} jobs catalogued", "n/a (no samples)", target=f"<= {RSS_BUDGET_MIB} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Vigil's benchmarks on fresh local control planes; prints figures, never fails for being slow.",
    )
    parser.add_argument("sections", nargs="*", metavar="SECTION",
                        help=f"which to run, in this order: {', '.join(SECTIONS)} (default: all)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1000, help="jobs due in the measured minute (default 1000)")
    parser.add_argument("--pods", type=int, default=None, help="bare pods of the podfloor (default: --jobs)")
    parser.add_argument("--no-floor", action="store_true", help="do not add the podfloor to sections that need it")
    parser.add_argument("--catalogue", type=int, default=100_000, help="the large catalogue of the tick section")
    parser.add_argument("--skip-cronjob", action="store_true", help="leave out the cronjob section")
    parser.add_argument("--lead", type=float, default=180.0,
                        help="at least this many seconds from creating the jobs to their minute (default 180)")  # fmt: skip
    parser.add_argument("--window", type=float, default=600.0,
                        help="seconds after the fire time to wait for every pod (default 600); later counts as longer")  # fmt: skip
    parser.add_argument("--executions", type=int, default=300)
    parser.add_argument("--history-records", type=int, default=20_000)
    parser.add_argument("--console-jobs", type=int, default=console_bench.DEFAULT_JOBS, help="jobs on the console's Jobs page")
    parser.add_argument("--workflows", type=int, default=50, help="10-step workflows of the workflows section")
    parser.add_argument("--fan-workflows", type=int, default=50, help="workflows of the fan section")
    parser.add_argument("--fan-width", type=int, default=200, help="steps per workflow of the fan section (at most 200)")
    parser.add_argument("--resume", type=int, default=1000, help="waiting workflows of the resume section")
    parser.add_argument("--onboard", type=int, default=10_000, help="new ScheduledJobs of the onboarding section")
    parser.add_argument("--rss-jobs", type=int, default=10_000, help="ScheduledJobs of the rss section")
    parser.add_argument("--rss-executions", type=int, default=10_000, help="retained Executions of the rss section")
    parser.add_argument("--rss-workflows", type=int, default=1000, help="waiting Workflows of the rss section")
    parser.add_argument("--queue-executions", type=int, default=queue_bench.DEFAULT_EXECUTIONS,
                        help="no-op executions per measurement of the queue section")  # fmt: skip
    parser.add_argument("--backlog-window", type=int, default=backlog_bench.DEFAULT_WINDOW,
                        help="executions timed at each depth of the backlog section")  # fmt: skip
    parser.add_argument("--queue-trigger", default="", metavar="ARGS",
                        help="arguments of the queuetrigger section (python -m bench.queuetrigger --help)")  # fmt: skip
    parser.add_argument("--rss-settle", type=float, default=60.0, help="seconds of RSS samples once the load is in")
    parser.add_argument("--queue-rss", default="10000,1000000", metavar="SMALL,LARGE",
                        help="jobs catalogued for the queuerss section's reference and figure")  # fmt: skip
    parser.add_argument("--sustained-rates", default="5,10,20,30,40,60", metavar="R,R,...",
                        help="pod rates the sustained floor tries, rising; it stops after the first that does not hold")  # fmt: skip
    parser.add_argument("--sustained-seconds", type=float, default=60.0, help="how long each rate of the floor runs")
    parser.add_argument("--soak-seconds", type=float, default=600.0, help="how long the soak runs (default 600)")
    parser.add_argument("--soak-share", type=float, default=0.8, help="the soak's rate, as a share of the floor's")
    parser.add_argument("--soak-rate", type=float, default=None,
                        help="the soak's rate in occurrences/s when the sustained floor is not run")  # fmt: skip
    api_bench.add_arguments(parser, rss=False)
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    chosen = [s for s in SECTIONS if s in (args.sections or SECTIONS)]
    if args.skip_cronjob and "cronjob" in chosen:
        chosen.remove("cronjob")
    if not args.no_floor and "podfloor" not in chosen and any(s in NEEDS_FLOOR for s in chosen):
        chosen.insert(0, "podfloor")  # every ratio needs its reference from the same run

    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # progress shows as it happens under `make`
    began = time.monotonic()
    localcluster.down(STATE)  # a cluster of an older bench layout on the same ports
    print(f"# Vigil benchmarks — local control plane, {os.cpu_count()} cores, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M}Z, {load()}; sections: {' '.join(chosen)}")  # fmt: skip
    run = Run(args)

    if "podfloor" in chosen:
        run_podfloor(run)

    if "tick" in chosen:
        print(f"\n## tick cost: {args.jobs} due, catalogue {args.jobs} vs {args.catalogue}")
        with fresh_cluster("tick-small") as b:
            small = tick_cost(b, due=args.jobs, catalogued=args.jobs)
        with fresh_cluster("tick-large") as b:
            large = tick_cost(b, due=args.jobs, catalogued=args.catalogue)
        for size, (secs, reads, created) in ((args.jobs, small), (args.catalogue, large)):
            print(f"  catalogue={size:>6}: pass {secs:.2f}s, bucket objects read {reads}, executions created {created}")
        print(f"  ratio large/small: time {large[0] / small[0]:.2f}, reads {large[1] / max(1, small[1]):.2f}")
        run.add(f"tick: pass time, catalogue {args.catalogue} vs {args.jobs}", f"{large[0]:.2f}s",
                reference=f"{small[0]:.2f}s", ratio=f"{large[0] / small[0]:.2f}x", target="~1x")  # fmt: skip

    vigil: Lag | None = None
    cron: Lag | None = None
    if "firelag" in chosen or "cronjob" in chosen:
        print(f"\n## fire lag: {args.jobs} jobs due in the same minute (jitter off on Vigil's)")
    if "firelag" in chosen:
        vigil = run_firelag(run)
    if "cronjob" in chosen:
        with fresh_cluster("cronjob") as b:
            cron = fire_lag_cronjob(b, args.jobs, args.lead, args.window)
        run.against_floor(f"cronjob ({args.jobs}): pod observed p99", p99(cron.pods, args.jobs), "(peer)")
    if vigil or cron:
        print(f"\n## fire lag, side by side ({args.jobs} jobs; time from the fire time)")
    if run.floor and (vigil or cron):
        print(f"  {'floor':7} {'pod observed - first create:':31} {summary(run.floor.observed, run.floor.count, args.window)}")
    if vigil:
        print_lag("vigil", "Execution", vigil, args.jobs, args.window)
    if cron:
        print_lag("cronjob", "Job", cron, args.jobs, args.window)
    if vigil and cron and vigil.pods and cron.pods:
        ratios = []
        for q in (0.5, 0.99):
            ours, theirs = (percentile(censored(lag.pods, args.jobs), q) for lag in (vigil, cron))
            r = theirs / max(1e-3, ours)
            ratios.append(f"{r:.2f}x" if math.isfinite(ours) and math.isfinite(theirs) else "n/a (not all observed)")
        print(f"  ratio cronjob/vigil, pod observed: p50 {ratios[0]}, p99 {ratios[1]} (above 1: Vigil is faster)")

    if "jitter" in chosen:
        run_jitter(run)

    if "executions" in chosen:
        print(f"\n## executions through the pod path: {args.executions} executions, dispatch cap 100")
        with fresh_cluster("executions") as b:
            done = executions_rate(b, args.executions)
        print(f"  Ready -> Succeeded: {rate(done, 'executions')}")
        run.rate_against_floor(f"executions ({args.executions}): Ready -> Succeeded", done, "executions", "-")

    if "workflows" in chosen:
        print(f"\n## workflows: {args.workflows} workflows of 10 pod steps, created at once")
        with fresh_cluster("dagfloor") as b:
            graph, graph_notes, graph_cpu = dagfloor.run(b, args.workflows, workflow_bench.ten_steps(), args.window)
        print(f"  the same graph run by a plain client with bare pods (bench/dagfloor.py): {rate(graph, 'steps')}; "
              f"CPU per step {graph_cpu.per_item_ms():.0f} ms ({graph_cpu.shares()})")
        for note in graph_notes:
            print(f"  note: {note}")
        with fresh_cluster("workflows") as b:
            done, notes, cpu = workflow_bench.workflows_rate(b, b.state, stop_process, args.workflows)
        steps = Completion(done.finished * 10, done.expected * 10, done.seconds)  # of the finished workflows
        print(f"  {rate(done, 'workflows', digits=2)}")
        print(f"  {rate(steps, 'steps')}; CPU per step {cpu.per_item_ms():.0f} ms ({cpu.shares()})")
        print(f"  {notes}")
        run.rate_against_floor(f"workflows ({args.workflows} x 10 steps): steps/s", steps, "steps", ">= 0.8x")
        run.rate_against_floor("  same, beside the floor's pods Succeeded/s", steps, "steps", "-", succeeded=True)
        run.add("  same, beside a plain client running the same graph", "", reference=rate(graph, "steps").split(" (")[0],
                ratio=ratio(steps.rate, graph.rate) if steps.complete and graph.complete else "n/a (censored)",
                target=">= 0.8x")  # fmt: skip
        run.add("  same, CPU per step (all processes)", f"{cpu.per_item_ms():.0f} ms",
                reference=f"{graph_cpu.per_item_ms():.0f} ms (the plain client's)",
                ratio=ratio(cpu.per_item_ms(), graph_cpu.per_item_ms()))  # fmt: skip

    if "fan" in chosen:
        run_fan(run)

    if "resume" in chosen:
        run_resume(run)

    if "rss" in chosen:
        run_rss(run)

    if "history" in chosen:
        print()
        history_bench.main(["--records", str(args.history_records)])

    if "console" in chosen:
        print()
        console_bench.main(["--jobs", str(args.console_jobs)])

    if "onboarding" in chosen:
        run_onboarding(run)

    if "queue" in chosen:
        print()
        run.rows.extend(queue_bench.run(args.queue_executions, queue_bench.DEFAULT_WORKERS))

    if "backlog" in chosen:
        print()
        run.rows.extend(backlog_bench.run(backlog_bench.DEFAULT_SIZES, backlog_bench.DEFAULT_WORKERS, args.backlog_window,
                                          backlog_bench.DEFAULT_CATALOGUE))  # fmt: skip

    if "queuetrigger" in chosen:
        print()
        run.rows.extend(queue_trigger_bench.section(shlex.split(args.queue_trigger)))

    if "queuerss" in chosen:
        run_queue_rss(run)

    if "hostile" in chosen:
        run.rows.extend(hostile_bench.section())

    if "api" in chosen:
        run.rows.extend(api_bench.timeline(rate=args.api_rate, seconds=args.api_seconds,
                                           connections=args.api_connections, executions=args.api_executions))  # fmt: skip
        run.rows.extend(api_rss_bench.section(rate=args.api_rate, jobs=args.rss_jobs, executions=args.rss_executions,
                                              workflows=args.rss_workflows, settle=args.rss_settle))  # fmt: skip

    if "sustained" in chosen or "soak" in chosen:
        run_steady(run, floor="sustained" in chosen, soak="soak" in chosen)

    print(f"\n## summary: each figure beside its reference from this run ({os.cpu_count()} cores, {load()})")
    for line in table(run.rows):
        print(line)
    print(f"\n# bench took {time.monotonic() - began:.0f}s; {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
