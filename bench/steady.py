"""A steady rate: what this machine sustains without Vigil (`sustained`), and Vigil held at a
share of it for a long while (`soak`).

**sustained** — the floor. A plain client (8 threads) creates bare pods (the executions' image
and command) at a fixed rate for `seconds`, and deletes each pod once a watch in this process
has seen it Succeeded, as retention would. A rate holds when every pod started within 1 s of
its create (p99: first seen Running or Succeeded, minus the create sent) and nothing piled up
(pods still there at the end within 3 s of in-flight work). Rates are tried in rising order on
one cluster; those that held are run again for the soak's length, highest first, and the
reference is the first that holds that long (the soak and its reference run equally long).

**soak** — Vigil at `share` of that rate (0.8 by default) for `seconds` (10 minutes by
default). Interval jobs (`every`, jitter off, default retention) are created at that pace over
one interval, so their anchors (creation times) spread their occurrences evenly. Each pod's lag
is from its `VIGIL_SCHEDULED_FOR` to when this process first saw it; the operator's VmRSS is
sampled every 5 s. Reported: lag p99 over the last third of the run beside the first third's
(an occurrence due whose pod was never seen counts as endless), RSS over the last third beside
the first, and the Executions and pods left at the end beside
what retention keeps plus 15 s of in-flight work.

Both report the CPU each pod or occurrence cost, summed over the cluster's processes, the
operator and this client (bench/cpu.py): where the cores are the limit, the soak's share of the
floor's rate is bounded by the inverse of the ratio of those costs, whatever the lag shows.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

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
from bench.cpu import CpuUse, snapshot
from bench.reporting import Row, percentile
from bench.reporting import seconds as shown
from bench.rss import rss_mib

CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
START_P99_S = 1.0  # a rate holds when pods start within this (p99)
IN_FLIGHT_S = 3.0  # ... and no more pods are left at the end than this many seconds' worth
SOAK_IN_FLIGHT_S = 15.0  # the soak's allowance for work in flight beside what retention keeps
RETAINED = 3 + 1  # the default retention: 3 Succeeded and 1 Dead or Cancelled Executions per job, and their pods
INTERVAL_S = 30  # the soak's jobs run every this many seconds
RSS_SAMPLE_S = 5.0
STARTED = ("Running", "Succeeded")


@dataclasses.dataclass
class Rate:
    """One rate tried by the floor."""

    rate: float
    created: int
    start_p99: float  # seconds; inf when some never started within the run's drain time
    left: int  # pods still there when the run ended
    cpu: CpuUse | None = None  # what the pods cost, from the first create to the end of the drain

    @property
    def held(self) -> bool:
        return self.start_p99 <= START_P99_S and self.left <= self.rate * IN_FLIGHT_S


def paced(rate: float, seconds: float, act: Callable[[int], None]) -> list[float]:
    """Call `act(i)` at `rate` per second for `seconds`, from 8 threads; the send times (epoch)."""
    count = int(rate * seconds)
    sent = [math.nan] * count
    began = time.monotonic()

    def one(i: int) -> None:
        delay = began + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # pacing a load generator, not synchronising with it
        sent[i] = time.time()
        act(i)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(count)))
    return sent


def sustained_floor(b: Bench, rates: list[float], seconds: float) -> list[Rate]:
    """Try each rate in turn (stopping after the first that does not hold); what each gave."""
    tried: list[Rate] = []
    for rate in rates:
        got = _tried(b, rate, seconds)
        tried.append(got)
        if not got.held:
            break
    return tried


def held_for(b: Bench, tried: list[Rate], seconds: float) -> Rate | None:
    """The rates that held briefly, highest first, each run again for `seconds` (the soak's
    length) until one holds: what this machine sustains for as long as the soak runs. None when
    none does."""
    for rate in confirmations(tried):
        got = _tried(b, rate, seconds)
        if got.held:
            return got
    return None


def confirmations(tried: list[Rate]) -> list[float]:
    """The rates to run for the soak's length, in order: those that held briefly, highest first."""
    return sorted((t.rate for t in tried if t.held), reverse=True)


def _tried(b: Bench, rate: float, seconds: float) -> Rate:
    got = _floor_rate(b, rate, seconds)
    cost = "" if got.cpu is None else f"; CPU per pod {got.cpu.per_item_ms():.0f} ms ({got.cpu.shares()})"
    print(f"  {rate:g} pods/s for {seconds:g}s: {got.created} created, start p99 {got.start_p99:.2f}s, "
          f"{got.left} left at the end -> {'held' if got.held else 'did not hold'}{cost}; {load()}")  # fmt: skip
    return got


def _floor_rate(b: Bench, rate: float, seconds: float) -> Rate:
    ns = b.namespace(f"bench-steady-{int(rate)}")
    pods = Arrivals(b.core.list_namespaced_pod, ns, key=lambda p: str(p["metadata"]["name"]),
                    done=lambda p: (p.get("status") or {}).get("phase") in STARTED)  # fmt: skip
    succeeded = Arrivals(b.core.list_namespaced_pod, ns, key=lambda p: str(p["metadata"]["name"]),
                         done=lambda p: (p.get("status") or {}).get("phase") == "Succeeded")  # fmt: skip
    wait_until(datetime.now(UTC) + timedelta(seconds=10), lambda: pods.listed and succeeded.listed, interval=0.1)
    stop = threading.Event()
    deleter = threading.Thread(target=_delete_succeeded, args=(b, ns, succeeded, stop), daemon=True)
    deleter.start()
    body = {"metadata": {}, "spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}

    def create(i: int) -> None:
        b.core.create_namespaced_pod(ns, {**body, "metadata": {"name": f"p{i:06d}"}})

    try:
        before = snapshot(b.state)
        sent = paced(rate, seconds, create)
        wait_until(datetime.now(UTC) + timedelta(seconds=IN_FLIGHT_S), lambda: len(pods.finished) >= len(sent), 0.2)
        cpu = CpuUse.between(before, snapshot(b.state), len(sent))
        left = len(b.core.list_namespaced_pod(ns).items)
    finally:
        stop.set()
        deleter.join(timeout=10)
        pods.stop()
        succeeded.stop()
    starts = [pods.finished[f"p{i:06d}"] - t for i, t in enumerate(sent) if f"p{i:06d}" in pods.finished]
    p99 = percentile(starts + [math.inf] * (len(sent) - len(starts)), 0.99)
    return Rate(rate, len(sent), p99, left, cpu)


def _delete_succeeded(b: Bench, ns: str, succeeded: Arrivals, stop: threading.Event) -> None:
    deleted: set[str] = set()
    while not stop.wait(0.2):
        for name in [n for n in list(succeeded.finished) if n not in deleted]:
            try:
                b.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
            except client.ApiException as err:
                if err.status != 404:
                    continue
            deleted.add(name)


def floor_rows(tried: list[Rate], seconds: float, long: Rate | None, long_seconds: float) -> tuple[float | None, list[Row]]:
    """The rows of the floor: the highest rate held for `seconds`, and the highest held for
    `long_seconds` (the soak's reference, returned)."""
    held = [t.rate for t in tried if t.held]
    top = "n/a (no rate held)" if not held else f"{max(held):g} pods/s"
    note = "" if not tried or not tried[-1].held else " (every rate tried held: a lower bound)"
    sustained = "n/a (no rate held)" if long is None else f"{long.rate:g} pods/s"
    return (None if long is None else long.rate), [
        Row(f"sustained floor: highest steady pod rate for {seconds:g}s, start p99 <= 1 s, none piling up", top + note,
            target="-"),
        Row(f"sustained floor: the same held for {long_seconds:g}s (the soak's length)", sustained,
            target="the reference"),
    ]  # fmt: skip


@dataclasses.dataclass
class Soak:
    rate: float
    jobs: int
    lags: list[tuple[float, float]]  # (scheduled for, seconds from then to the pod seen), in the measured window
    rss: list[tuple[float, float]]  # (seconds into the run, MiB)
    executions_left: int
    pods_left: int
    notes: list[str]
    cpu: CpuUse | None = None  # what the occurrences due in the run cost, over the run

    def thirds(self, values: list[tuple[float, float]], span: tuple[float, float]) -> tuple[list[float], list[float]]:
        begin, end = span
        third = (end - begin) / 3
        first = [v for at, v in values if begin <= at < begin + third]
        last = [v for at, v in values if end - third <= at <= end]
        return first, last


def soak(b: Bench, rate: float, seconds: float) -> Soak:
    """Interval jobs at `rate` occurrences per second for `seconds`, through one operator."""
    ns = b.namespace("bench-soak")
    opns = b.namespace("bench-soak-op")
    jobs = max(1, round(rate * INTERVAL_S))
    settings = (
        f"namespace: {opns}\nleaderElection: {{leaseDurationSeconds: 15, renewPeriodSeconds: 5}}\n"
        f"http: {{metricsPort: 0, apiPort: 0, healthPort: 0}}\n"
        f"dispatch: {{maxRunning: {jobs * 2}, perNamespaceMax: {jobs * 2}, reservedHigh: 0}}\n"
        f"history: {{dsn: 'sqlite:///{b.state}/bench-soak-history.db'}}\n"
    )
    proc, pidfile = b.start_operator("bench-soak-op", settings)
    notes: list[str] = []
    seen: dict[str, float] = {}

    def pod_key(pod: dict[str, Any]) -> str | None:
        env = {e.get("name"): e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
        for_ = env.get("VIGIL_SCHEDULED_FOR")
        return f"{pod['metadata']['name']}|{for_}" if for_ else None

    pods = Arrivals(b.core.list_namespaced_pod, ns, key=pod_key)
    try:
        if not wait_until(datetime.now(UTC) + timedelta(seconds=120),
                          lambda: proc.poll() is not None or b.lease_holder(opns) == "bench-soak-op"):  # fmt: skip
            return Soak(rate, jobs, [], [], 0, 0, [f"operator never led: {last_error(b.state / 'logs' / 'bench-soak-op.log')}"])
        template = {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}

        def create(i: int) -> None:
            b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "scheduledjobs", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": f"soak-{i:05d}"},
                "spec": {"every": f"{INTERVAL_S}s", "jitter": "0s", "template": template},
            })  # fmt: skip

        paced(jobs / INTERVAL_S, INTERVAL_S, create)  # anchors spread over one interval: a steady rate
        began, before = time.time(), snapshot(b.state)
        rss: list[tuple[float, float]] = []
        while time.time() - began < seconds and proc.poll() is None:
            rss.append((time.time() - began, rss_mib(proc.pid)))
            time.sleep(RSS_SAMPLE_S)  # a sampling period, not synchronisation
        if proc.poll() is not None:
            notes.append(f"operator exited: {last_error(b.state / 'logs' / 'bench-soak-op.log')}")
        ended = time.time()
        cpu = CpuUse.between(before, snapshot(b.state), round(rate * (ended - began)))
        time.sleep(SOAK_IN_FLIGHT_S)  # what was due before the end has its pod by now, or counts as late
        seen.update(pods.seen)
        executions = b.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "executions", limit=0)
        executions_left = len(executions.get("items") or [])
        pods_left = len(b.core.list_namespaced_pod(ns).items)
    finally:
        pods.stop()
        stop_process(proc, pidfile)
    lags = []
    for key, at in seen.items():
        scheduled = datetime.fromisoformat(key.split("|", 1)[1].replace("Z", "+00:00")).timestamp()
        if began <= scheduled <= ended:
            lags.append((scheduled - began, at - scheduled))
    return Soak(rate, jobs, lags, rss, executions_left, pods_left, notes, cpu)


def soak_rows(s: Soak, seconds: float, floor: Rate | None = None) -> list[Row]:
    span = (0.0, seconds)
    due = round(s.rate * seconds / 3)  # occurrences due in each third
    first, last = (censored(v, due) for v in s.thirds(s.lags, span))
    lag_first, lag_last = (percentile(v, 0.99) if v else math.nan for v in (first, last))
    rss_first, rss_last = (statistics.median(v) if v else math.nan for v in s.thirds(s.rss, span))
    expected = int(s.rate * seconds)
    print(f"  {s.jobs} jobs every {INTERVAL_S}s ({s.rate:g}/s): {len(s.lags)} pods seen of about {expected} due; "
          f"lag p99 first third {shown(lag_first, SOAK_IN_FLIGHT_S)}, last third "
          f"{shown(lag_last, SOAK_IN_FLIGHT_S)} (an occurrence whose pod was not seen counts as never); RSS {rss_first:.0f} -> {rss_last:.0f} MiB "
          f"(peak {max((m for _, m in s.rss), default=math.nan):.0f}); left: {s.executions_left} Executions, "
          f"{s.pods_left} pods")  # fmt: skip
    for note in s.notes:
        print(f"  note: {note}")
    cpu = [] if s.cpu is None else [cpu_row(s.cpu, s.rate, floor)]
    in_flight = s.rate * SOAK_IN_FLIGHT_S
    ex_bound = pod_bound = s.jobs * RETAINED + in_flight
    return [
        Row(f"soak {s.rate:g}/s: lag p99, last third", shown(lag_last, SOAK_IN_FLIGHT_S),
            reference=f"{shown(lag_first, SOAK_IN_FLIGHT_S)} (first third)",
            ratio=_ratio(lag_last, lag_first), target="<= 1 s and <= 1.2x"),
        Row(f"soak {s.rate:g}/s: RSS, last third", f"{rss_last:.0f} MiB", reference=f"{rss_first:.0f} MiB (first third)",
            ratio=_ratio(rss_last, rss_first), target="<= 1.1x"),
        Row(f"soak {s.rate:g}/s: Executions left", str(s.executions_left), reference=f"{ex_bound:.0f} (retention + 15 s)",
            ratio=_ratio(s.executions_left, ex_bound), target="<= 1x"),
        Row(f"soak {s.rate:g}/s: pods left", str(s.pods_left), reference=f"{pod_bound:.0f} (retention + 15 s)",
            ratio=_ratio(s.pods_left, pod_bound), target="<= 1x"),
        *cpu,
    ]  # fmt: skip


def cpu_row(cpu: CpuUse, rate: float, floor: Rate | None) -> Row:
    """What an occurrence costs the machine, beside what a pod of the floor costs: on a machine
    whose cores are the limit, the share of the floor's rate that Vigil can sustain is at most
    the inverse of this ratio."""
    mine = cpu.per_item_ms()
    theirs = math.nan if floor is None or floor.cpu is None else floor.cpu.per_item_ms()
    reference = f"{theirs:.0f} ms per pod (the floor at {floor.rate:g}/s)" if floor and math.isfinite(theirs) else "n/a (floor not run)"
    return Row(f"soak {rate:g}/s: CPU per occurrence, all processes", f"{mine:.0f} ms ({cpu.shares()})",
               reference=reference, ratio=_ratio(mine, theirs), target="-")  # fmt: skip


def censored(lags: list[float], due: int) -> list[float]:
    """A third's lags, with an endless one for each occurrence due in it whose pod was never seen
    (by 15 s after the run): a soak that falls behind shows as behind, not as the few it managed."""
    return lags + [math.inf] * max(0, due - len(lags))


def _ratio(measured: float, reference: float) -> str:
    ok = math.isfinite(measured) and math.isfinite(reference) and reference > 0
    return f"{measured / reference:.2f}x" if ok else "n/a"
