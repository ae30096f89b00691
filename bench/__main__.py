"""`make bench`: Vigil's trigger measured on the local control plane, beside the native CronJob.

Prints figures; never fails for being slow. Every wait has a deadline; a section that reaches
it says how many of how many finished and prints censored figures (bench/reporting.py), never
a rate or a time as if all had finished. The measurements (each one a section, selectable:
`python -m bench firelag cronjob`):

1. **tick** — tick cost vs catalogue size: one trigger pass that handles 1,000 due occurrences,
   with 1,000 and then 100,000 occurrences catalogued in future buckets: wall time and API
   reads. The ratio should stay near 1 (DESIGN invariant 4: cost follows due work, not the
   catalogue).
2. **firelag** — for 1,000 ScheduledJobs due in the same minute (jitter off, so all are due at
   the boundary), the time from each occurrence's fire time to the moment its Execution, then
   its pod, is observed on a watch, p50/p99/max.
3. **cronjob** — the native CronJob controller on the same control plane with the same 1,000
   schedules: time from the scheduled minute to the Job being observed (CronJob's trigger), and
   to its pod. Printed beside Vigil's figures when both sections run.
4. **executions** — executions per second through the pod path.
5. **workflows** — 10-step workflows completed per second (bench/workflows.py).
6. **resume** — time for a new operator to resume 1,000 in-flight workflows (bench/workflows.py).
7. **history** — history inserts per second (SQLite, PostgreSQL); needs no cluster.

Every measurement gets a fresh local control plane of its own (`.cluster/bench/<name>`, all on
port base 36000, one at a time), stopped when it ends: the Vigil operator is cluster-wide, so an
earlier section's thousands of objects, still being deleted, would otherwise be what it spends
the measured minute on.

The lag schedules are one fixed minute a day (`M H * * *`, UTC), chosen `--lead` seconds ahead,
so the target minute is the first and only firing: nothing fired a minute earlier is still
running when it comes. Vigil's operator is started first; the jobs are created only once it
holds the leader Lease, and the target is measured only once it is idle — every job's next run
is the target and the target minute's buckets hold every occurrence.

Both lag figures use the same clock and method (a watch in this process, receive time minus the
nominal minute), so they compare like with like. The machine is small (2 cores) and also runs
the control plane and one local process per pod, so absolute numbers are pessimistic.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from bench import history as history_bench
from bench import workflows as workflow_bench
from bench.reporting import Completion, censored, duration, percentile, rate, summary
from e2e.cluster import localcluster
from vigil.core.buckets import BucketEntry, entry_key, minute_label, minute_of
from vigil.core.ids import execution_id
from vigil.core.memory import FakeClock
from vigil.core.trigger import Trigger
from vigil.kube.buckets import KubeBucketStore
from vigil.kube.events import EventRecorder
from vigil.kube.executions import ExecutionStore, execution_body
from vigil.kube.jobs import KubeCatalogue
from vigil.kube.launcher import ExecutionLauncher
from vigil.kube.ledger import KubeLedger
from vigil.kube.results import JobResults
from vigil.model.jobspec import schedule_hash

REPO = Path(__file__).resolve().parents[1]
STATE = REPO / ".cluster" / "bench"
PORT_BASE = 36000
GROUP, VERSION = "vigil.dev", "v1alpha1"
CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
SECTIONS = ("tick", "firelag", "cronjob", "executions", "workflows", "resume", "history")
LEADER_LEASE = "vigil-leader"
ARMED_MARGIN_S = 5.0  # the operator must be idle this long before the target minute
EXECUTIONS_DEADLINE_S = 600.0  # the executions section stops waiting this long after creating them


def stop_process(proc: subprocess.Popen[bytes], pidfile: Path | None = None) -> None:
    """SIGTERM, then SIGKILL if it has not gone in 10 s (as a Deployment's grace period would)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    if pidfile is not None:
        pidfile.unlink(missing_ok=True)  # reaped: its pid may be reused, so `down` must not signal it


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


@dataclasses.dataclass
class Bench:
    api: client.ApiClient
    kubectl: Path
    env: dict[str, str]
    state: Path

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.core.read_namespaced_service_account("default", name)
                return name
            except client.ApiException:
                time.sleep(0.2)
        raise RuntimeError(f"namespace {name} never got its default service account")

    def create_many(self, count: int, make: Callable[[int], None]) -> None:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(make, range(count)))

    def start_operator(self, name: str, settings: str) -> tuple[subprocess.Popen[bytes], Path]:
        """A Vigil operator (identity `name`) on this cluster; its pid file lets `down` stop it too."""
        cfg = self.state / f"{name}.yaml"
        cfg.write_text(settings)
        with (self.state / "logs" / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "vigil.cli.main", "operator", "--config", str(cfg)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**self.env, "POD_NAME": name},
            )  # fmt: skip
        pidfile = self.state / "pids" / f"{name}.pid"
        pidfile.write_text(str(proc.pid))
        return proc, pidfile

    def lease_holder(self, namespace: str) -> str | None:
        try:
            lease = client.CoordinationV1Api(self.api).read_namespaced_lease(LEADER_LEASE, namespace)
        except client.ApiException:
            return None
        return lease.spec.holder_identity if lease.spec else None


@contextlib.contextmanager
def fresh_cluster(name: str) -> Iterator[Bench]:
    """A local control plane of its own for one measurement: empty when it starts, stopped after."""
    state = STATE / name
    localcluster.down(state)  # one an interrupted run left behind would otherwise be reused, not fresh
    shutil.rmtree(state / "logs", ignore_errors=True)  # this run's logs only
    for db in state.glob("*.db*"):  # and this run's history
        db.unlink()
    started = time.monotonic()
    try:
        cluster = localcluster.up(state, PORT_BASE)
        subprocess.run(
            [str(cluster.state / "bin" / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "apply",
             "--server-side", "--force-conflicts", "-f", str(REPO / "crds")],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            [str(cluster.state / "bin" / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "wait",
             "--for=condition=Established", "--timeout=60s", "crd", "--all"],
            check=True, capture_output=True,
        )  # fmt: skip
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        print(f"  [fresh cluster {state.relative_to(REPO)} ready in {time.monotonic() - started:.0f}s, {load()}]")
        yield Bench(api=api, kubectl=cluster.state / "bin" / "kubectl", env=env, state=cluster.state)
    finally:
        localcluster.down(state)


def next_boundary(after: datetime, margin: timedelta) -> datetime:
    """The first whole minute at least `margin` after `after`."""
    return minute_of(after + margin - timedelta(microseconds=1)) + timedelta(minutes=1)


def daily_cron(target: datetime) -> str:
    """A schedule (UTC) whose only occurrence in the next day is `target`."""
    return f"{target.minute} {target.hour} * * *"


def wait_until(deadline: datetime, done: Callable[[], bool], interval: float = 0.5) -> bool:
    while datetime.now(UTC) < deadline:
        if done():
            return True
        time.sleep(interval)
    return done()


class Arrivals:
    """Receive times (epoch seconds) of the first ADDED event per key, from a watch in a thread.

    Objects are handled as plain dicts (no model deserialisation: it costs milliseconds a pod,
    which would show up as lag). A watch that ends or breaks is resumed; errors are kept for the
    report.
    """

    def __init__(self, list_fn: Callable[..., Any], namespace: str, key: Callable[[dict[str, Any]], str | None]) -> None:
        self.seen: dict[str, float] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._args = (list_fn, namespace, key)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        list_fn, namespace, key = self._args
        resource_version: str | None = None
        while not self._stop.is_set():
            w = watch.Watch()
            kwargs: dict[str, Any] = {"timeout_seconds": 60, "deserialize": False}
            if resource_version:
                kwargs["resource_version"] = resource_version
            try:
                for event in w.stream(list_fn, namespace, **kwargs):
                    received = time.time()
                    obj = event.get("object") or {}
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    if event.get("type") == "ADDED":
                        k = key(obj)
                        if k is not None:
                            self.seen.setdefault(k, received)
                    if self._stop.is_set():
                        w.stop()
                        return
            except Exception as err:  # resumed below; a 410 starts again from a fresh list
                self.errors.append(f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")
                if isinstance(err, client.ApiException) and err.status == 410:
                    resource_version = None
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()

    def offsets(self, base: datetime) -> list[float]:
        return [t - base.timestamp() for t in self.seen.values()]


@dataclasses.dataclass
class Lag:
    trigger: list[float]  # Execution (Vigil) or Job (CronJob) observed - nominal minute
    pods: list[float]  # pod observed - nominal minute
    notes: list[str]  # what went wrong or what to keep in mind when reading the figures


def fire_lag_vigil(b: Bench, count: int, lead: float, window: float) -> Lag:
    """Fire lag of `count` ScheduledJobs due in one minute, with an operator that leads and is idle."""
    ns = b.namespace("bench-vigil")
    opns = b.namespace("bench-op")
    notes: list[str] = []
    proc, pidfile = b.start_operator("bench-op", (
        f"namespace: {opns}\nleaderElection: {{leaseDurationSeconds: 15, renewPeriodSeconds: 5}}\n"
        f"trigger: {{tickMilliseconds: 250}}\nhttp: {{metricsPort: 0, apiPort: 0}}\n"
        f"dispatch: {{maxRunning: {count * 2}, perNamespaceMax: {count * 2}, reservedHigh: 0}}\n"
        f"history: {{dsn: 'sqlite:///{b.state}/bench-lag-history.db'}}\n"
    ))  # fmt: skip
    try:
        started = time.monotonic()
        leader = wait_until(datetime.now(UTC) + timedelta(seconds=120),
                            lambda: proc.poll() is not None or b.lease_holder(opns) == "bench-op")  # fmt: skip
        if proc.poll() is not None or not leader:
            why = f"exited with code {proc.returncode}" if proc.poll() is not None else "not leader after 120 s"
            return Lag([], [], [f"operator {why}: {last_error(b.state / 'logs' / 'bench-op.log')}"])
        print(f"  vigil: operator leads after {time.monotonic() - started:.1f}s")

        target = next_boundary(datetime.now(UTC), timedelta(seconds=lead))
        stamp = target.strftime("%Y-%m-%dT%H:%M:%SZ")

        def key(pod: dict[str, Any]) -> str | None:
            env = {e.get("name"): e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
            return str(pod["metadata"]["name"]) if env.get("VIGIL_SCHEDULED_FOR") == stamp else None

        def ex_key(ex: dict[str, Any]) -> str | None:
            return str(ex["metadata"]["name"]) if ex["spec"].get("scheduledFor") == stamp else None

        def list_executions(namespace: str, **kwargs: Any) -> Any:
            return b.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "executions", **kwargs)

        executions = Arrivals(list_executions, ns, ex_key)
        pods = Arrivals(b.core.list_namespaced_pod, ns, key)

        def make(i: int) -> None:
            body = {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": f"j{i:04}"},
                "spec": {"cron": daily_cron(target), "timezone": "UTC", "jitter": "0s",
                         "template": {"spec": {"containers": [CONTAINER]}}},
            }  # fmt: skip
            b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs", body)

        created_at = time.monotonic()
        b.create_many(count, make)
        print(f"  vigil: {count} ScheduledJobs ({daily_cron(target)} UTC) created in {time.monotonic() - created_at:.1f}s")

        armed_by = target - timedelta(seconds=ARMED_MARGIN_S)
        in_buckets = wait_until(armed_by, lambda: bucket_counts(b, opns, target)[0] >= count, interval=1.0)
        scheduled = in_buckets and wait_until(armed_by, lambda: jobs_scheduled_for(b, ns, target) >= count, interval=3.0)
        margin = (target - datetime.now(UTC)).total_seconds()
        if scheduled:
            print(f"  vigil: operator idle, all {count} jobs scheduled for {stamp}, {margin:.0f}s before it; {load()}")
        else:
            entries, _ = bucket_counts(b, opns, target)
            notes.append(
                f"operator not idle {ARMED_MARGIN_S:.0f}s before the target: {entries}/{count} occurrences in "
                f"the target minute's buckets, {jobs_scheduled_for(b, ns, target)}/{count} jobs with nextRun "
                f"{stamp} (raise --lead; lags below include the operator catching up)"
            )
        wait_until(target, lambda: False, interval=0.2)
        print(f"  vigil: target minute {stamp}: {load()}")
        done = wait_until(target + timedelta(seconds=window), lambda: len(pods.seen) >= count)
        executions.stop()
        pods.stop()
        if not done:
            notes.extend(diagnose_vigil(b, proc, ns, opns, target, count, executions, pods, window))
        return Lag(executions.offsets(target), pods.offsets(target), notes)
    finally:
        stop_process(proc, pidfile)


def bucket_counts(b: Bench, opns: str, minute: datetime) -> tuple[int, int]:
    """(occurrences, fired markers) in the ScheduleBuckets of `minute`."""
    items = b.custom.list_namespaced_custom_object(
        GROUP, VERSION, opns, "schedulebuckets", label_selector=f"vigil.dev/minute={minute_label(minute)}"
    )["items"]
    entries = sum(len((i.get("spec") or {}).get("occurrences") or []) for i in items)
    fired = sum(len((i.get("status") or {}).get("fired") or {}) for i in items)
    return entries, fired


def jobs_scheduled_for(b: Bench, ns: str, target: datetime) -> int:
    """Jobs the operator has reconciled with `target` as their next run."""
    items = b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs")["items"]
    count = 0
    for item in items:
        next_run = (item.get("status") or {}).get("nextRun")
        if next_run and datetime.fromisoformat(next_run) == target:
            count += 1
    return count


def last_error(log: Path) -> str:
    """The operator log's last ERROR line (or its last line), for a report that says why."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"no log at {log}"
    errors = [line for line in lines if " ERROR " in line or " CRITICAL " in line]
    picked = f"last ERROR: {errors[-1]}" if errors else f"no ERROR; last line: {lines[-1] if lines else '(empty)'}"
    return f"{picked[:300]} (see {log.relative_to(REPO)})"


def diagnose_vigil(
    b: Bench, proc: subprocess.Popen[bytes], ns: str, opns: str, target: datetime, count: int,
    executions: Arrivals, pods: Arrivals, window: float,
) -> list[str]:  # fmt: skip
    """Why fewer than `count` pods were observed within the window: each stage's count."""
    notes = [f"only {len(pods.seen)}/{count} pods observed within {window:.0f}s of the target"]
    if proc.poll() is not None:
        notes.append(f"the operator exited with code {proc.returncode}")
    holder = b.lease_holder(opns)
    if holder != "bench-op":
        notes.append(f"the leader Lease is held by {holder!r}, not the operator")
    try:
        entries, fired = bucket_counts(b, opns, target)
        notes.append(f"target minute's buckets: {entries}/{count} occurrences, {fired} marked fired")
        stamp = target.strftime("%Y-%m-%dT%H:%M:%SZ")
        items = b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "executions")["items"]
        mine = [i for i in items if (i.get("spec") or {}).get("scheduledFor") == stamp]
        phases: dict[str, int] = {}
        for i in mine:
            phase = (i.get("status") or {}).get("phase") or "Ready"
            phases[phase] = phases.get(phase, 0) + 1
        notes.append(f"Executions for the target: {len(mine)} exist ({phases}), {len(executions.seen)} observed")
        pod_count = len(b.core.list_namespaced_pod(ns).items)
        notes.append(f"pods in the namespace: {pod_count}")
    except client.ApiException as err:
        notes.append(f"could not read the cluster: {err.status} {err.reason}")
    for arrivals, what in ((executions, "Execution"), (pods, "pod")):
        if arrivals.errors:
            notes.append(f"{what} watch errors: {len(arrivals.errors)}, last: {arrivals.errors[-1]}")
    notes.append(f"operator log: {last_error(b.state / 'logs' / 'bench-op.log')}")
    return notes


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
    the last Succeeded, or to the deadline with some still unfinished.
    """
    ns = b.namespace("bench-exec")
    opns = b.namespace("bench-execop")
    proc, pidfile = b.start_operator("bench-exec", (
        f"namespace: {opns}\ndispatch: {{maxRunning: 100, perNamespaceMax: 100, reservedHigh: 0}}\n"
        f"http: {{metricsPort: 0, apiPort: 0}}\nhistory: {{dsn: 'sqlite:///{b.state}/bench-history.db'}}\n"
    ))  # fmt: skip
    try:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": "throughput"},
            "spec": {"every": "24h", "template": {"spec": {"containers": [CONTAINER]}}},
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
    trigger = Trigger(
        store=counting,
        catalogue=catalogue,
        launcher=ExecutionLauncher(
            store=ExecutionStore(b.api), catalogue=catalogue, clock=clock,
            results=JobResults(b.api, store=ExecutionStore(b.api), events=events, clock=clock),
            pods=b.core,
        ),
        ledger=KubeLedger(b.api, catalogue=catalogue, events=events),
        clock=clock,
    )
    trigger.rescan()
    counting.reads = 0
    started = time.perf_counter()
    report = trigger.tick()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Vigil's benchmarks on fresh local control planes; prints figures, never fails for being slow.",
    )
    parser.add_argument("sections", nargs="*", metavar="SECTION",
                        help=f"which to run, in this order: {', '.join(SECTIONS)} (default: all)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1000, help="jobs due in the measured minute (default 1000)")
    parser.add_argument("--catalogue", type=int, default=100_000, help="the large catalogue of the tick section")
    parser.add_argument("--skip-cronjob", action="store_true", help="leave out the cronjob section")
    parser.add_argument("--lead", type=float, default=180.0,
                        help="at least this many seconds from creating the jobs to their minute (default 180)")  # fmt: skip
    parser.add_argument("--window", type=float, default=600.0,
                        help="seconds after the minute to wait for every pod (default 600); later counts as longer")  # fmt: skip
    parser.add_argument("--executions", type=int, default=300)
    parser.add_argument("--history-records", type=int, default=20_000)
    parser.add_argument("--workflows", type=int, default=50, help="10-step workflows of the workflows section")
    parser.add_argument("--resume", type=int, default=1000, help="in-flight workflows of the resume section")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    chosen = [s for s in SECTIONS if s in (args.sections or SECTIONS)]
    if args.skip_cronjob and "cronjob" in chosen:
        chosen.remove("cronjob")

    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # progress shows as it happens under `make`
    began = time.monotonic()
    localcluster.down(STATE)  # a cluster of an older bench layout on the same ports
    print(f"# Vigil benchmarks — local control plane, {os.cpu_count()} cores, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M}Z, {load()}; sections: {' '.join(chosen)}")  # fmt: skip

    if "tick" in chosen:
        print(f"\n## tick cost: {args.jobs} due, catalogue {args.jobs} vs {args.catalogue}")
        with fresh_cluster("tick-small") as b:
            small = tick_cost(b, due=args.jobs, catalogued=args.jobs)
        with fresh_cluster("tick-large") as b:
            large = tick_cost(b, due=args.jobs, catalogued=args.catalogue)
        for size, (secs, reads, created) in ((args.jobs, small), (args.catalogue, large)):
            print(f"  catalogue={size:>6}: pass {secs:.2f}s, bucket objects read {reads}, executions created {created}")
        print(f"  ratio large/small: time {large[0] / small[0]:.2f}, reads {large[1] / max(1, small[1]):.2f}")

    vigil: Lag | None = None
    cron: Lag | None = None
    if "firelag" in chosen or "cronjob" in chosen:
        print(f"\n## fire lag: {args.jobs} jobs due in the same minute (jitter off on Vigil's)")
    if "firelag" in chosen:
        with fresh_cluster("firelag") as b:
            vigil = fire_lag_vigil(b, args.jobs, args.lead, args.window)
    if "cronjob" in chosen:
        with fresh_cluster("cronjob") as b:
            cron = fire_lag_cronjob(b, args.jobs, args.lead, args.window)
    if vigil or cron:
        print(f"\n## fire lag, side by side ({args.jobs} jobs; time from the scheduled minute)")
    if vigil:
        print_lag("vigil", "Execution", vigil, args.jobs, args.window)
    if cron:
        print_lag("cronjob", "Job", cron, args.jobs, args.window)
    if vigil and cron and vigil.pods and cron.pods:
        ratios = []
        for q in (0.5, 0.99):
            ours, theirs = (percentile(censored(lag.pods, args.jobs), q) for lag in (vigil, cron))
            ratio = theirs / max(1e-3, ours)
            ratios.append(f"{ratio:.2f}x" if math.isfinite(ours) and math.isfinite(theirs) else "n/a (not all observed)")
        print(f"  ratio cronjob/vigil, pod observed: p50 {ratios[0]}, p99 {ratios[1]} (above 1: Vigil is faster)")

    if "executions" in chosen:
        print(f"\n## executions through the pod path: {args.executions} executions, dispatch cap 100")
        with fresh_cluster("executions") as b:
            done = executions_rate(b, args.executions)
        print(f"  Ready -> Succeeded: {rate(done, 'executions')}")

    if "workflows" in chosen:
        print(f"\n## workflows: {args.workflows} workflows of 10 pod steps, created at once")
        with fresh_cluster("workflows") as b:
            done, notes = workflow_bench.workflows_rate(b, b.state, stop_process, args.workflows)
        steps = Completion(done.finished * 10, done.expected * 10, done.seconds)  # of the finished workflows
        print(f"  {rate(done, 'workflows', digits=2)}")
        print(f"  {rate(steps, 'steps')}")
        print(f"  {notes}")

    if "resume" in chosen:
        print(f"\n## resume: a new operator takes over {args.resume} in-flight workflows")
        with fresh_cluster("resume") as b:
            done, notes = workflow_bench.resume_time(b, b.state, stop_process, args.resume)
        print(f"  all {args.resume} resumed and finished {duration(done)} after the new operator's start")
        print(f"  {notes}")

    if "history" in chosen:
        print()
        history_bench.main(["--records", str(args.history_records)])
    print(f"\n# bench took {time.monotonic() - began:.0f}s; {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
