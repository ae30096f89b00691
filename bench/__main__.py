"""`make bench`: Vigil's trigger measured on the local control plane, beside the native CronJob.

Prints figures; never fails for being slow. Three measurements:

1. **Fire lag** — for 1,000 ScheduledJobs due in the same minute (`cron: "* * * * *"`,
   jitter off so all are due at the boundary), the time from each occurrence's fire time to
   the moment its pod is observed on a watch, p50/p99/max.
2. **The native CronJob controller** on the same control plane with the same 1,000 schedules:
   time from the scheduled minute to the Job being observed (CronJob's trigger), and to its pod.
3. **Tick cost vs catalogue size** — one trigger pass that handles 1,000 due occurrences, with
   1,000 and then 100,000 occurrences catalogued in future buckets: wall time and API reads.
   The ratio should stay near 1 (DESIGN invariant 4: cost follows due work, not the catalogue).

Both lag figures use the same clock and method (a watch in this process, receive time minus the
nominal minute), so they compare like with like. The machine is small (2 cores) and also runs
the control plane and one local process per pod, so absolute numbers are pessimistic.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from bench import history as history_bench
from e2e.cluster import localcluster
from vigil.core.buckets import BucketEntry, entry_key, minute_of
from vigil.core.ids import execution_id
from vigil.core.memory import FakeClock
from vigil.core.trigger import Trigger
from vigil.jobspec import schedule_hash
from vigil.kube.buckets import KubeBucketStore
from vigil.kube.events import EventRecorder
from vigil.kube.executions import ExecutionStore, execution_body
from vigil.kube.jobs import KubeCatalogue
from vigil.kube.launcher import ExecutionLauncher
from vigil.kube.ledger import KubeLedger
from vigil.kube.results import JobResults

REPO = Path(__file__).resolve().parents[1]
STATE = REPO / ".cluster" / "bench"
PORT_BASE = 36000
GROUP, VERSION = "vigil.dev", "v1alpha1"
CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not gone in 10 s (as a Deployment's grace period would)."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"n={len(values)} p50={percentile(values, 0.5):.3f}s p99={percentile(values, 0.99):.3f}s "
        f"max={max(values):.3f}s mean={statistics.fmean(values):.3f}s"
    )


@dataclasses.dataclass
class Bench:
    api: client.ApiClient
    kubectl: Path
    env: dict[str, str]

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


def next_boundary(after: datetime, margin: timedelta) -> datetime:
    target = minute_of(after + margin) + timedelta(minutes=1)
    return target


class Arrivals:
    """Receive times (epoch seconds) of the first ADDED event per key, from a watch in a thread."""

    def __init__(self, list_fn: Callable[..., Any], namespace: str, key: Callable[[Any], str | None]) -> None:
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._args = (list_fn, namespace, key)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        list_fn, namespace, key = self._args
        w = watch.Watch()
        for event in w.stream(list_fn, namespace, timeout_seconds=300):
            if event["type"] == "ADDED":
                k = key(event["raw_object"] if isinstance(event["object"], dict) else event["object"])
                if k is not None:
                    self.seen.setdefault(k, time.time())
            if self._stop.is_set():
                w.stop()
                return

    def stop(self) -> None:
        self._stop.set()

    def offsets(self, base: datetime) -> list[float]:
        return [t - base.timestamp() for t in self.seen.values()]


def fire_lag_vigil(b: Bench, count: int) -> tuple[list[float], list[float]]:
    ns = b.namespace("bench-vigil")
    opns = b.namespace("bench-op")
    log = STATE / "logs" / "bench-operator.log"
    cfg = STATE / "bench-operator.yaml"
    cfg.write_text(
        f"namespace: {opns}\nleaderElection: {{leaseDurationSeconds: 15, renewPeriodSeconds: 5}}\n"
        f"trigger: {{tickMilliseconds: 250}}\nhttp: {{metricsPort: 0, apiPort: 0}}\n"
        f"dispatch: {{maxRunning: {count * 2}, perNamespaceMax: {count * 2}, reservedHigh: 0}}\n"
        f"history: {{dsn: 'sqlite:///{STATE}/bench-lag-history.db'}}\n"
    )
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vigil.cli.main", "operator", "--config", str(cfg)],
            stdout=out, stderr=subprocess.STDOUT, env={**b.env, "POD_NAME": "bench-op"},
        )  # fmt: skip
    try:
        def make(i: int) -> None:
            body = {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": f"j{i:04}"},
                "spec": {"cron": "* * * * *", "jitter": "0s", "template": {"spec": {"containers": [CONTAINER]}}},
            }  # fmt: skip
            b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs", body)

        b.create_many(count, make)
        target = next_boundary(datetime.now(UTC), timedelta(seconds=20))
        stamp = target.strftime("%Y-%m-%dT%H:%M:%SZ")

        def key(pod: Any) -> str | None:
            env = {e.name: e.value for e in pod.spec.containers[0].env or []}
            return str(pod.metadata.name) if env.get("VIGIL_SCHEDULED_FOR") == stamp else None

        def ex_key(ex: Any) -> str | None:
            return str(ex["metadata"]["name"]) if ex["spec"]["scheduledFor"] == stamp else None

        def list_executions(namespace: str, **kwargs: Any) -> Any:
            return b.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "executions", **kwargs)

        executions = Arrivals(list_executions, ns, ex_key)
        pods = Arrivals(b.core.list_namespaced_pod, ns, key)
        wait_until(target + timedelta(seconds=90), lambda: len(pods.seen) >= count)
        executions.stop()
        pods.stop()
        return executions.offsets(target), pods.offsets(target)
    finally:
        stop_process(proc)
        b.core.delete_namespace(ns)


def fire_lag_cronjob(b: Bench, count: int) -> tuple[list[float], list[float]]:
    ns = b.namespace("bench-cron")
    batch = client.BatchV1Api(b.api)

    def make(i: int) -> None:
        body = {
            "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": f"c{i:04}"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"backoffLimit": 0, "template": {
                "spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}}}},
        }  # fmt: skip
        batch.create_namespaced_cron_job(ns, body)

    try:
        b.create_many(count, make)
        target = next_boundary(datetime.now(UTC), timedelta(seconds=20))
        suffix = str(int(target.timestamp() // 60))  # CronJob names its Job <cronjob>-<minutes since epoch>
        jobs = Arrivals(
            batch.list_namespaced_job, ns, lambda j: j.metadata.name if j.metadata.name.endswith(suffix) else None
        )
        pods = Arrivals(
            b.core.list_namespaced_pod, ns, lambda p: p.metadata.name if f"-{suffix}-" in p.metadata.name else None
        )
        wait_until(target + timedelta(seconds=90), lambda: len(pods.seen) >= count)
        jobs.stop()
        pods.stop()
        return jobs.offsets(target), pods.offsets(target)
    finally:
        b.core.delete_namespace(ns)


def executions_rate(b: Bench, count: int) -> tuple[float, float]:
    """Executions per second through the pod path: `count` Ready executions to Succeeded.

    One operator (dispatch cap 100), a job whose pod runs `true`; the executions are
    created at once (as a backfill would) and the clock runs from the first creation to
    the last Succeeded. Returns (executions/s, seconds).
    """
    ns = b.namespace("bench-exec")
    opns = b.namespace("bench-execop")
    cfg = STATE / "bench-exec-operator.yaml"
    cfg.write_text(
        f"namespace: {opns}\ndispatch: {{maxRunning: 100, perNamespaceMax: 100, reservedHigh: 0}}\n"
        f"http: {{metricsPort: 0, apiPort: 0}}\nhistory: {{dsn: 'sqlite:///{STATE}/bench-history.db'}}\n"
    )
    with (STATE / "logs" / "bench-exec-operator.log").open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vigil.cli.main", "operator", "--config", str(cfg)],
            stdout=out, stderr=subprocess.STDOUT, env={**b.env, "POD_NAME": "bench-exec"},
        )  # fmt: skip
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

        deadline = time.monotonic() + 600
        while succeeded() < count and time.monotonic() < deadline:
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        return count / elapsed, elapsed
    finally:
        stop_process(proc)
        b.core.delete_namespace(ns)
        b.core.delete_namespace(opns)


def wait_until(deadline: datetime, done: Callable[[], bool]) -> None:
    while datetime.now(UTC) < deadline and not done():
        time.sleep(0.5)


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
    b.core.delete_namespace(ns)
    b.core.delete_namespace(opns)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--catalogue", type=int, default=100_000)
    parser.add_argument("--skip-cronjob", action="store_true")
    parser.add_argument("--executions", type=int, default=300)
    parser.add_argument("--history-records", type=int, default=20_000)
    args = parser.parse_args(argv)

    cluster = localcluster.up(STATE, PORT_BASE)
    subprocess.run(
        [str(cluster.state / "bin" / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "apply",
         "--server-side", "--force-conflicts", "-f", str(REPO / "crds")],
        check=True, capture_output=True,
    )  # fmt: skip
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    b = Bench(api=api, kubectl=cluster.state / "bin" / "kubectl", env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})
    print(f"# Vigil benchmarks — local control plane, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M}Z")
    try:
        print(f"\n## tick cost: {args.jobs} due, catalogue {args.jobs} vs {args.catalogue}")
        small = tick_cost(b, due=args.jobs, catalogued=args.jobs)
        large = tick_cost(b, due=args.jobs, catalogued=args.catalogue)
        for size, (secs, reads, created) in ((args.jobs, small), (args.catalogue, large)):
            print(f"  catalogue={size:>6}: pass {secs:.2f}s, bucket objects read {reads}, executions created {created}")
        print(f"  ratio large/small: time {large[0] / small[0]:.2f}, reads {large[1] / max(1, small[1]):.2f}")

        print(f"\n## fire lag: {args.jobs} jobs due in the same minute (jitter off)")
        vigil_ex, vigil = fire_lag_vigil(b, args.jobs)
        print(f"  vigil   Execution observed - fire time: {summary(vigil_ex)}")
        print(f"  vigil   pod observed - fire time:       {summary(vigil)}")
        if not args.skip_cronjob:
            jobs, pods = fire_lag_cronjob(b, args.jobs)
            print(f"  cronjob Job observed - schedule:       {summary(jobs)}")
            print(f"  cronjob pod observed - schedule:       {summary(pods)}")
            if vigil and pods:
                print(
                    f"  ratio cronjob/vigil (pod, p50): {percentile(pods, 0.5) / max(1e-3, percentile(vigil, 0.5)):.1f}x,"
                    f" (pod, p99): {percentile(pods, 0.99) / max(1e-3, percentile(vigil, 0.99)):.1f}x"
                )

        print(f"\n## executions through the pod path: {args.executions} executions, dispatch cap 100")
        rate, seconds = executions_rate(b, args.executions)
        print(f"  {rate:.1f} executions/s ({args.executions} Ready -> Succeeded in {seconds:.1f}s)")
    finally:
        localcluster.down(STATE)
    print()
    history_bench.main(["--records", str(args.history_records)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
