"""The burst: `count` ScheduledJobs due in the same minute, through one Vigil operator.

Two shapes, each on its own fresh cluster:

* **jitter off** (`firelag`) — every occurrence's fire time is the minute itself, so all are due
  at once: the burst the pod floor (bench/podfloor.py) is the reference for.
* **default jitter** (`jitter`) — the jobs keep the cron default (60 s for a daily cron), so the
  operator spreads them over the minute; each occurrence's own fire time is its bucket entry's
  `fireAt` (the nominal minute plus `vigil.core.jitter.jitter_offset` of its job), read from the
  target minute's ScheduleBuckets once they are armed. Lag is measured from that.

The schedules are one fixed minute a day (`M H * * *`, UTC), chosen `lead` seconds ahead, so
the target minute is the first and only firing. The operator is started first; the jobs are
created only once it holds the leader Lease, and the target is measured only once it is idle —
every job's next run is the target and the target minute's buckets hold every occurrence.

For each job the watch in this process records when its Execution, then its pod, was first
seen, and when its Execution was first seen Succeeded. The operator runs as the chart's
ServiceAccount, so its requests are counted apart in the API server's audit log, from the
moment it is idle before the target until every Execution has Succeeded and the operator's
writes have settled: Vigil's writes and reads per execution, and which verbs on which
resources they are; and, to set beside the floor's writes per bare pod, the writes per
execution of every client (the operator's anywhere, and everyone's in the jobs' namespace:
the scheduler's bindings, the node's pod status).
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from bench.audit import Tally
from bench.cluster import (
    GROUP,
    VERSION,
    Arrivals,
    Bench,
    last_error,
    load,
    stop_process,
    wait_until,
)
from bench.podfloor import settle
from vigil.core.buckets import minute_label, minute_of

CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
ARMED_MARGIN_S = 5.0  # the operator must be idle this long before the target minute
JOB_UID = "vigil.dev/job-uid"  # the label every Execution and pod of a job carries
STAMP = "%Y-%m-%dT%H:%M:%SZ"


@dataclasses.dataclass
class Lag:
    trigger: list[float]  # Execution (Vigil) or Job (CronJob) observed - fire time
    pods: list[float]  # pod observed - fire time
    notes: list[str]  # what went wrong or what to keep in mind when reading the figures
    executions: int = 0  # Executions seen Succeeded: what the request counts are divided by
    requests: Tally | None = None  # the window's requests: the operator's, and every client's in the jobs' namespace
    user: str = ""
    chain_broken: int | None = None  # ScheduleChainBroken Events in the jobs' namespace


def next_boundary(after: datetime, margin: timedelta) -> datetime:
    """The first whole minute at least `margin` after `after`."""
    return minute_of(after + margin - timedelta(microseconds=1)) + timedelta(minutes=1)


def daily_cron(target: datetime) -> str:
    """A schedule (UTC) whose only occurrence in the next day is `target`."""
    return f"{target.minute} {target.hour} * * *"


def fire_lag_vigil(b: Bench, count: int, lead: float, window: float, *, jitter: bool = False) -> Lag:
    """Fire lag of `count` ScheduledJobs due in one minute, with an operator that leads and is idle."""
    ns = b.namespace("bench-vigil")
    opns = b.namespace("bench-op")
    settings = (
        f"namespace: {opns}\nleaderElection: {{leaseDurationSeconds: 15, renewPeriodSeconds: 5}}\n"
        f"trigger: {{tickMilliseconds: 250}}\nhttp: {{metricsPort: 0, apiPort: 0, healthPort: 0}}\n"
        f"dispatch: {{maxRunning: {count * 2}, perNamespaceMax: {count * 2}, reservedHigh: 0}}\n"
        f"history: {{dsn: 'sqlite:///{b.state}/bench-lag-history.db'}}\n"
    )
    user = b.operator_user(opns)
    proc, pidfile = b.start_operator("bench-op", settings)
    try:
        started = time.monotonic()
        leader = wait_until(datetime.now(UTC) + timedelta(seconds=120),
                            lambda: proc.poll() is not None or b.lease_holder(opns) == "bench-op")  # fmt: skip
        if proc.poll() is not None or not leader:
            why = f"exited with code {proc.returncode}" if proc.poll() is not None else "not leader after 120 s"
            return Lag([], [], [f"operator {why}: {last_error(b.state / 'logs' / 'bench-op.log')}"])
        print(f"  vigil: operator leads after {time.monotonic() - started:.1f}s")
        target = next_boundary(datetime.now(UTC), timedelta(seconds=lead))
        return _measure(b, proc, ns=ns, opns=opns, user=user, target=target, count=count, window=window, jitter=jitter)
    finally:
        stop_process(proc, pidfile)


def _measure(
    b: Bench, proc: subprocess.Popen[bytes], *, ns: str, opns: str, user: str, target: datetime, count: int,
    window: float, jitter: bool,
) -> Lag:  # fmt: skip
    stamp = target.strftime(STAMP)

    def pod_key(pod: dict[str, Any]) -> str | None:
        env = {e.get("name"): e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
        return (pod["metadata"].get("labels") or {}).get(JOB_UID) if env.get("VIGIL_SCHEDULED_FOR") == stamp else None

    def ex_key(ex: dict[str, Any]) -> str | None:
        return str(ex["spec"]["job"]["uid"]) if ex["spec"].get("scheduledFor") == stamp else None

    def list_executions(namespace: str, **kwargs: Any) -> Any:
        return b.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "executions", **kwargs)

    executions = Arrivals(list_executions, ns, ex_key,
                          done=lambda ex: (ex.get("status") or {}).get("phase") == "Succeeded")  # fmt: skip
    pods = Arrivals(b.core.list_namespaced_pod, ns, pod_key)

    def make(i: int) -> None:
        spec: dict[str, Any] = {"cron": daily_cron(target), "timezone": "UTC",
                                "template": {"spec": {"containers": [CONTAINER]}}}  # fmt: skip
        if not jitter:
            spec["jitter"] = "0s"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": f"j{i:04}"}, "spec": spec}
        b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs", body)

    created_at = time.monotonic()
    b.create_many(count, make)
    shape = "default jitter" if jitter else "jitter off"
    print(f"  vigil: {count} ScheduledJobs ({daily_cron(target)} UTC, {shape}) created in {time.monotonic() - created_at:.1f}s")

    notes: list[str] = []
    armed_by = target - timedelta(seconds=ARMED_MARGIN_S)
    in_buckets = wait_until(armed_by, lambda: len(fire_times(b, opns, target)) >= count, interval=1.0)
    scheduled = in_buckets and wait_until(armed_by, lambda: jobs_scheduled_for(b, ns, target) >= count, interval=3.0)
    fire_at = fire_times(b, opns, target)
    margin = (target - datetime.now(UTC)).total_seconds()
    if scheduled:
        print(f"  vigil: operator idle, all {count} jobs scheduled for {stamp}, {margin:.0f}s before it; {load()}")
    else:
        notes.append(
            f"operator not idle {ARMED_MARGIN_S:.0f}s before the target: {len(fire_at)}/{count} occurrences in "
            f"the target minute's buckets, {jobs_scheduled_for(b, ns, target)}/{count} jobs with nextRun "
            f"{stamp} (raise --lead; lags below include the operator catching up)"
        )
    offset = b.audit.mark()
    wait_until(target, lambda: False, interval=0.2)
    print(f"  vigil: target minute {stamp}: {load()}")
    last_fire = max(fire_at.values(), default=target)
    done = wait_until(last_fire + timedelta(seconds=window), lambda: len(executions.finished) >= count)
    executions.stop()
    pods.stop()
    requests = settle(b, offset, lambda r: r.user == user or r.namespace == ns, time.monotonic() + 30)
    if not done:
        notes.extend(diagnose_vigil(b, proc, ns, opns, target, count, executions, pods, window))

    def lags(arrivals: dict[str, float]) -> list[float]:
        return [seen - fire_at.get(uid, target).timestamp() for uid, seen in arrivals.items()]

    missing_fire = sum(uid not in fire_at for uid in executions.seen)
    if missing_fire:
        notes.append(f"{missing_fire} Executions of jobs not in the target minute's buckets: lag from the minute")
    return Lag(
        lags(executions.seen), lags(pods.seen), notes, executions=len(executions.finished), requests=requests,
        user=user, chain_broken=events_with_reason(b, ns, "ScheduleChainBroken"),
    )  # fmt: skip


def fire_times(b: Bench, opns: str, minute: datetime) -> dict[str, datetime]:
    """Job uid -> fire time (`fireAt`) of every occurrence in the ScheduleBuckets of `minute`."""
    items = b.custom.list_namespaced_custom_object(
        GROUP, VERSION, opns, "schedulebuckets", label_selector=f"vigil.dev/minute={minute_label(minute)}"
    )["items"]
    return {
        entry["uid"]: datetime.fromisoformat(entry["fireAt"])
        for item in items
        for entry in (item.get("spec") or {}).get("occurrences") or []
    }


def fired_markers(b: Bench, opns: str, minute: datetime) -> int:
    items = b.custom.list_namespaced_custom_object(
        GROUP, VERSION, opns, "schedulebuckets", label_selector=f"vigil.dev/minute={minute_label(minute)}"
    )["items"]
    return sum(len((i.get("status") or {}).get("fired") or {}) for i in items)


def jobs_scheduled_for(b: Bench, ns: str, target: datetime) -> int:
    """Jobs the operator has reconciled with a next run in the minute `target` (`nextRun` is the
    jittered fire time)."""
    items = b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs")["items"]
    count = 0
    for item in items:
        next_run = (item.get("status") or {}).get("nextRun")
        if next_run and minute_of(datetime.fromisoformat(next_run)) == target:
            count += 1
    return count


def events_with_reason(b: Bench, ns: str, reason: str) -> int | None:
    try:
        return len(b.core.list_namespaced_event(ns, field_selector=f"reason={reason}").items)
    except client.ApiException:
        return None


def diagnose_vigil(
    b: Bench, proc: subprocess.Popen[bytes], ns: str, opns: str, target: datetime, count: int,
    executions: Arrivals, pods: Arrivals, window: float,
) -> list[str]:  # fmt: skip
    """Why fewer than `count` Executions Succeeded within the window: each stage's count."""
    notes = [f"only {len(executions.finished)}/{count} Executions Succeeded, {len(pods.seen)} pods observed "
             f"within {window:.0f}s of the last fire time"]  # fmt: skip
    if proc.poll() is not None:
        notes.append(f"the operator exited with code {proc.returncode}")
    holder = b.lease_holder(opns)
    if holder != "bench-op":
        notes.append(f"the leader Lease is held by {holder!r}, not the operator")
    try:
        notes.append(f"target minute's buckets: {len(fire_times(b, opns, target))}/{count} occurrences, "
                     f"{fired_markers(b, opns, target)} marked fired")  # fmt: skip
        stamp = target.strftime(STAMP)
        items = b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "executions")["items"]
        mine = [i for i in items if (i.get("spec") or {}).get("scheduledFor") == stamp]
        phases: dict[str, int] = {}
        for i in mine:
            phase = (i.get("status") or {}).get("phase") or "Ready"
            phases[phase] = phases.get(phase, 0) + 1
        notes.append(f"Executions for the target: {len(mine)} exist ({phases}), {len(executions.seen)} observed")
        notes.append(f"pods in the namespace: {len(b.core.list_namespaced_pod(ns).items)}")
    except client.ApiException as err:
        notes.append(f"could not read the cluster: {err.status} {err.reason}")
    for arrivals, what in ((executions, "Execution"), (pods, "pod")):
        if arrivals.errors:
            notes.append(f"{what} watch errors: {len(arrivals.errors)}, last: {arrivals.errors[-1]}")
    notes.append(f"operator log: {last_error(b.state / 'logs' / 'bench-op.log')}")
    return notes
