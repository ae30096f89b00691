"""Hostile payload templates beside a canary: the operator's peak RSS and the canary's fire lag (issue 36).

A payload template once grew past every bound (`{% set a = 'a' * 30000 %}` and fifteen
`{% set a = a ~ a %}`: 1.4 GiB in the leader), so one tenant could OOM-kill the operator and stop
firing for everyone. Now each render is bounded by what it builds (vigil.core.templatelimits);
this section shows what the bounds cost the operator when a tenant tries. Two runs, each on a
fresh cluster, the same but for the hostile namespace:

* **reference**: the operator and a canary ScheduledJob (every 2 s, jitter off, a pod running
  `true`) in a namespace of its own;
* **hostile**: the same, plus `--hostile` (50) ScheduledJobs in another namespace, each holding
  one of the known escapes (tests/hostile_templates.py, cycled through every kind), and every
  one edited every `EDIT_EVERY_S` seconds with a fresh comment in its template, so each edit is a
  new template the operator compiles and renders at admission (a tenant retrying, or a loop).

Each run samples the operator's VmRSS every `SAMPLE_S` for `settle` seconds and reads its VmHWM
(the kernel's own peak, which a sample can miss) at the end; a watch on the canary's Executions
gives each occurrence's lag, received time minus its nominal time (jitter is off). Figures: peak
RSS hostile beside the reference (target <= 1.1x, and under the chart's 512 MiB limit), the
canary's lag p99 beside the hostile jobs (target <= 1 s), and how many hostile jobs were
`Invalid` at the end (all of them).
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.cluster import (
    GROUP,
    VERSION,
    Arrivals,
    Bench,
    fresh_cluster,
    last_error,
    stop_process,
    wait_until,
)
from bench.reporting import Row, percentile
from bench.rss import rss_mib
from tests.hostile_templates import ESCAPES

CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
HOSTILE_JOBS = 50
CANARY_EVERY_S = 2  # the canary's interval: many occurrences per minute for a p99
EDIT_EVERY_S = 10.0  # each hostile job is edited this often: a new template to admit each time
SAMPLE_S = 2.0  # VmRSS samples
SETTLE_S = 120.0  # seconds measured once the canary fires
LEADER_DEADLINE_S = 120.0
CHART_MEMORY_LIMIT_MIB = 512
STAMP = "%Y-%m-%dT%H:%M:%SZ"


@dataclasses.dataclass
class Measured:
    samples: list[float]  # VmRSS, MiB
    peak: float  # VmHWM, MiB
    lags: list[float]  # seconds, one per canary occurrence
    invalid: int  # hostile jobs Invalid at the end
    notes: list[str]


def _job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = {"timezone": "UTC", "template": {"spec": {"containers": [CONTAINER]}}, **spec}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": name}, "spec": body}


def _hostile_template(index: int, edit: int) -> dict[str, str]:
    escape = ESCAPES[index % len(ESCAPES)]
    return {"t": f"{escape.template}{{# edit {edit} #}}"}


def _peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return math.nan


def measure(b: Bench, *, hostile: int, settle: float) -> Measured:
    """One run: the operator, the canary, and `hostile` hostile jobs (0 for the reference)."""
    canaries, tenants, opns = b.namespace("bench-canary"), b.namespace("bench-hostile"), b.namespace("bench-hostileop")
    proc, pidfile = b.start_operator("bench-hostile", (
        f"namespace: {opns}\nhttp: {{metricsPort: 0, apiPort: 0}}\n"
        f"history: {{dsn: 'sqlite:///{b.state}/bench-hostile-history.db'}}\n"
    ))  # fmt: skip
    notes: list[str] = []

    def list_executions(namespace: str, **kwargs: Any) -> Any:
        return b.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "executions", **kwargs)

    arrivals = Arrivals(list_executions, canaries, lambda ex: ex["spec"].get("scheduledFor"))
    try:
        deadline = datetime.now(UTC) + timedelta(seconds=LEADER_DEADLINE_S)
        if not wait_until(deadline, lambda: proc.poll() is not None or b.lease_holder(opns) == "bench-hostile"):
            notes.append("the operator did not lead within the deadline: measured anyway")
        b.custom.create_namespaced_custom_object(GROUP, VERSION, canaries, "scheduledjobs",
                                                 _job("canary", {"every": f"{CANARY_EVERY_S}s", "jitter": "0s"}))  # fmt: skip
        b.create_many(hostile, lambda i: b.custom.create_namespaced_custom_object(
            GROUP, VERSION, tenants, "scheduledjobs",
            _job(f"hostile-{i:03}", {"every": "5s", "payloadTemplate": _hostile_template(i, 0)})))  # fmt: skip
        began = datetime.now(UTC)
        samples = _sample_and_edit(b, proc, tenants, hostile=hostile, settle=settle)
        peak = _peak_mib(proc.pid) if proc.poll() is None else math.nan
        if proc.poll() is not None:
            notes.append(f"the operator exited with code {proc.returncode}: "
                         f"{last_error(b.state / 'logs' / 'bench-hostile.log')}")  # fmt: skip
        lags = [seen - datetime.strptime(nominal, STAMP).replace(tzinfo=UTC).timestamp()
                for nominal, seen in arrivals.seen.items() if nominal >= began.strftime(STAMP)]  # fmt: skip
        return Measured(samples, peak, lags, _invalid(b, tenants), notes)
    finally:
        arrivals.stop()
        stop_process(proc, pidfile)


def _sample_and_edit(b: Bench, proc: subprocess.Popen[bytes], tenants: str, *, hostile: int, settle: float) -> list[float]:
    """VmRSS every SAMPLE_S for `settle` seconds; every EDIT_EVERY_S, each hostile job edited."""
    samples: list[float] = []
    until = time.monotonic() + settle
    next_edit, edit = time.monotonic() + EDIT_EVERY_S, 0
    while time.monotonic() < until and proc.poll() is None:
        samples.append(rss_mib(proc.pid))
        if hostile and time.monotonic() >= next_edit:
            edit += 1
            b.create_many(hostile, _editor(b, tenants, edit))
            next_edit += EDIT_EVERY_S
        time.sleep(SAMPLE_S)
    return samples


def _editor(b: Bench, tenants: str, edit: int) -> Callable[[int], None]:
    def one(index: int) -> None:
        b.custom.patch_namespaced_custom_object(GROUP, VERSION, tenants, "scheduledjobs", f"hostile-{index:03}",
                                                {"spec": {"payloadTemplate": _hostile_template(index, edit)}})  # fmt: skip

    return one


def _invalid(b: Bench, tenants: str) -> int:
    items = b.custom.list_namespaced_custom_object(GROUP, VERSION, tenants, "scheduledjobs")["items"]
    return sum(
        any(c.get("type") == "Invalid" and c.get("status") == "True" for c in (i.get("status") or {}).get("conditions") or [])
        for i in items
    )


def section(*, hostile: int = HOSTILE_JOBS, settle: float = SETTLE_S) -> list[Row]:
    """Both runs, each on a fresh cluster; prints as it goes; returns the summary rows."""
    print(f"\n## hostile: {hostile} hostile payload templates ({len(ESCAPES)} kinds, each edited every "
          f"{EDIT_EVERY_S:.0f}s) beside a canary job every {CANARY_EVERY_S}s, {settle:.0f}s each run")  # fmt: skip
    runs: dict[str, Measured] = {}
    for name, count in (("reference", 0), ("hostile", hostile)):
        with fresh_cluster(f"hostile-{name}") as b:
            runs[name] = got = measure(b, hostile=count, settle=settle)
        lag = f"{percentile(got.lags, 0.99):.2f}s" if got.lags else "n/a"
        print(f"  {name}: VmHWM {got.peak:.0f} MiB, VmRSS steady {_steady(got.samples):.0f} MiB; canary lag p99 {lag} "
              f"over {len(got.lags)} occurrences; {got.invalid}/{count} hostile jobs Invalid")  # fmt: skip
        for note in got.notes:
            print(f"  note ({name}): {note}")
    ref, bad = runs["reference"], runs["hostile"]
    ratio = f"{bad.peak / ref.peak:.2f}x" if ref.peak > 0 and math.isfinite(bad.peak / ref.peak) else "n/a"
    return [
        Row(f"operator peak RSS, {hostile} hostile templates", f"{bad.peak:.0f} MiB", reference=f"{ref.peak:.0f} MiB",
            ratio=ratio, target=f"<= 1.1x, <= {CHART_MEMORY_LIMIT_MIB} MiB"),
        Row(f"canary fire lag p99 beside {hostile} hostile templates",
            f"{percentile(bad.lags, 0.99):.2f}s" if bad.lags else "n/a (no occurrence seen)",
            reference=f"{percentile(ref.lags, 0.99):.2f}s" if ref.lags else "-", target="<= 1s"),
        Row(f"hostile templates Invalid ({hostile})", str(bad.invalid), target=str(hostile)),
    ]  # fmt: skip


def _steady(samples: list[float]) -> float:
    tail = samples[-max(1, len(samples) // 3) :]
    return sorted(tail)[len(tail) // 2] if tail else math.nan
