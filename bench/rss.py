"""The operator's resident memory with a catalogue loaded: K ScheduledJobs, E retained Executions, W Workflows.

DESIGN ("Bounded") budgets 200 MiB at 10,000 ScheduledJobs; issue 10 measures it with 10,000
retained Executions and 1,000 Workflows beside them. The load is created before the operator
starts (so no Execution is dispatched while it is being written):

* `jobs` ScheduledJobs, daily crons spread over one hour about 12 hours away (nothing fires
  during the measurement), with the default jitter;
* `executions` finished Executions, spread evenly over the jobs (within the default retention
  of 3 Succeeded per job when there are no more of them than 3 per job), each created by
  `vigil.kube.stores.executions.execution_body` and then given the status of one attempt that
  Succeeded, built by the core's own state machine (`vigil.core.executions`) as the operator
  would have left it, its history not yet written (the operator writes it);
* `workflows` Workflows whose one step waits 24 h: in flight, as a waiting workflow is.

Then the operator starts, and once every job has its `nextRun` and every workflow is Running,
its VmRSS is sampled from /proc (it is a local process) every 2 s for `settle` seconds: the
steady figure is the median of the last third of the samples, printed beside the peak.
"""

from __future__ import annotations

import dataclasses
import statistics
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.cluster import GROUP, VERSION, Bench, last_error, stop_process, wait_until
from vigil.core import executions as core
from vigil.core.ids import execution_id
from vigil.kube.kits.shardleases import shard_lease_name
from vigil.kube.stores.executions import execution_body

CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
LOADED_DEADLINE_S = 900.0  # for every job to get its nextRun and every workflow to be Running
SAMPLE_S = 2.0


@dataclasses.dataclass
class Rss:
    samples: list[float]  # MiB, after the load was in
    loaded_after: float | None  # seconds from the operator's start until the load was in; None: never
    notes: list[str]

    @property
    def steady(self) -> float:
        return statistics.median(self.samples[-max(1, len(self.samples) // 3) :]) if self.samples else float("nan")


def rss_mib(pid: int) -> float:
    """Resident set size of a live process, in MiB (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}: has it exited?")


def create_load(b: Bench, ns: str, *, jobs: int, executions: int, workflows: int) -> None:
    hour = (datetime.now(UTC) + timedelta(hours=12)).hour
    made: list[dict[str, Any]] = [{}] * jobs

    def job(i: int) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": f"m{i:05}"},
            "spec": {"cron": f"{i % 60} {hour} * * *", "timezone": "UTC",
                     "template": {"spec": {"containers": [CONTAINER]}}},
        }  # fmt: skip
        made[i] = b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs", body)

    b.create_many(jobs, job)
    base = datetime(2026, 1, 1, tzinfo=UTC)

    def execution(i: int) -> None:
        owner = made[i % jobs]
        nominal = base + timedelta(days=i // jobs)
        eid = execution_id(owner["metadata"]["uid"], nominal)
        body = execution_body(job=owner, execution_id=eid, scheduled_for=nominal,
                              period_start=nominal - timedelta(days=1), period_end=nominal, source="Trigger")  # fmt: skip
        body["metadata"]["labels"]["vigil.dev/phase"] = "Succeeded"
        b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "executions", body)
        record = core.new_execution(eid, namespace=ns, job=owner["metadata"]["name"],
                                    scheduled_for=nominal, now=nominal)  # fmt: skip
        record = core.start(record, pod=f"{eid}-1", now=nominal + timedelta(seconds=1))
        result = core.AttemptResult(attempt=1, outcome=core.AttemptOutcome.SUCCEEDED, reason="Completed", exit_code=0)
        record = core.finish(record, result, policy=core.RetryPolicy(), now=nominal + timedelta(seconds=2))
        status = core.execution_to_dict(record)
        b.custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "executions", eid, {"status": status})

    b.create_many(executions, execution)
    wait = [{"id": "hold", "type": "wait", "wait": {"duration": "24h"}}]

    def workflow(i: int) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"name": f"w{i:05}"},
                "spec": {"steps": wait}}  # fmt: skip
        b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "workflows", body)

    b.create_many(workflows, workflow)


def all_in(b: Bench, ns: str, *, jobs: int, workflows: int) -> bool:
    items = b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs")["items"]
    if sum(bool((i.get("status") or {}).get("nextRun")) for i in items) < jobs:
        return False
    items = b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "workflows")["items"]
    return int(sum((i.get("status") or {}).get("phase") == "Running" for i in items)) >= workflows


def run(b: Bench, *, jobs: int, executions: int, workflows: int, settle: float) -> Rss:
    ns, opns = b.namespace("bench-rss"), b.namespace("bench-rssop")
    created = time.monotonic()
    create_load(b, ns, jobs=jobs, executions=executions, workflows=workflows)
    print(f"  rss: {jobs} ScheduledJobs, {executions} Succeeded Executions, {workflows} waiting Workflows "
          f"created in {time.monotonic() - created:.0f}s")  # fmt: skip
    proc, pidfile = b.start_operator("bench-rss", (
        f"namespace: {opns}\nhttp: {{metricsPort: 0, apiPort: 0, healthPort: 0}}\n"
        f"history: {{dsn: 'sqlite:///{b.state}/bench-rss-history.db'}}\n"
    ))  # fmt: skip
    notes: list[str] = []
    try:
        started = time.monotonic()
        deadline = datetime.now(UTC) + timedelta(seconds=LOADED_DEADLINE_S)
        loaded = wait_until(deadline, lambda: proc.poll() is not None or all_in(b, ns, jobs=jobs, workflows=workflows),
                            interval=3.0)  # fmt: skip
        loaded_after = time.monotonic() - started if loaded and proc.poll() is None else None
        if loaded_after is None:
            notes.append(f"the load was not all in within {LOADED_DEADLINE_S:.0f}s: sampled anyway")
        samples = sample(proc, settle)
        if proc.poll() is not None:
            notes.append(f"the operator exited with code {proc.returncode}: {last_error(b.state / 'logs' / 'bench-rss.log')}")
        return Rss(samples, loaded_after, notes)
    finally:
        stop_process(proc, pidfile)


def sample(proc: subprocess.Popen[bytes], settle: float) -> list[float]:
    """VmRSS (MiB) every SAMPLE_S for `settle` seconds, or until the process exits."""
    samples: list[float] = []
    until = time.monotonic() + settle
    while time.monotonic() < until and proc.poll() is None:
        samples.append(rss_mib(proc.pid))
        time.sleep(SAMPLE_S)
    return samples


def run_queue(b: Bench, *, dsn: str, shards: int, settle: float) -> Rss:
    """A whole `vigil operator` with the volume tier on over the catalogue `dsn` holds: its RSS.

    The ScheduledJob side is empty: what shows is the operator itself plus the tier (its trigger
    shards firing what comes due, the TaskQueue pass, the volume watchdog). Loaded is when this
    operator holds every shard's Lease, so each shard's loop runs.
    """
    opns = b.namespace("bench-qrssop")
    proc, pidfile = b.start_operator("bench-qrss", (
        f"namespace: {opns}\nhttp: {{metricsPort: 0, apiPort: 0, healthPort: 0}}\n"
        f"history: {{dsn: 'sqlite:///{b.state}/bench-qrss-history.db'}}\n"
        f"queue: {{dsn: '{dsn}', shards: {shards}}}\n"
    ))  # fmt: skip
    notes: list[str] = []
    try:
        started = time.monotonic()
        deadline = datetime.now(UTC) + timedelta(seconds=LOADED_DEADLINE_S)
        loaded = wait_until(deadline, lambda: proc.poll() is not None or _holds_shards(b, opns, "bench-qrss", shards),
                            interval=1.0)  # fmt: skip
        loaded_after = time.monotonic() - started if loaded and proc.poll() is None else None
        if loaded_after is None:
            notes.append(f"the operator did not hold every shard within {LOADED_DEADLINE_S:.0f}s: sampled anyway")
        samples = sample(proc, settle)
        if proc.poll() is not None:
            notes.append(f"the operator exited with code {proc.returncode}: {last_error(b.state / 'logs' / 'bench-qrss.log')}")
        return Rss(samples, loaded_after, notes)
    finally:
        stop_process(proc, pidfile)


def _holds_shards(b: Bench, namespace: str, identity: str, shards: int) -> bool:
    names = {shard_lease_name(k) for k in range(shards)}
    leases = client.CoordinationV1Api(b.api).list_namespaced_lease(namespace).items
    held = {lease.metadata.name for lease in leases if lease.spec and lease.spec.holder_identity == identity}
    return names <= held
