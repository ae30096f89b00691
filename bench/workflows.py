"""Workflow figures for `make bench`: completed 10-step workflows per second, resume time, and a
fan-out's steps per second as `task` steps beside `pod` steps.

* **rate** — `count` workflows of 10 pod steps (a chain of 2 then a fan of 8 — wide enough for
  the engine's workers to overlap, deep enough that each step waits for a result), each pod
  running `true`, created at once; the clock runs from the first creation to the last
  Succeeded. Each step is one pod on the local node agent, so this is bounded by how fast
  the control plane schedules and runs pods on 2 cores as much as by the engine. The dispatch
  caps are raised above what can run at once (as the firelag section does): the figure is the
  engine's, beside a floor that has no cap; the chart's caps are a fairness policy, not a cost.
* **resume** — `count` workflows whose one step waits until a fixed time are started by a
  leader, with a standby operator running beside it. Just before that time whichever of the
  two holds the Lease then is frozen (SIGSTOP; under load the Lease can move earlier, which the
  notes say), so the due timers are left to the handover; once they are all due, the
  leader is ended: gracefully (SIGTERM, then SIGCONT so it can act on it, as a rolling update
  does) or not (SIGKILL, as a crash). The clock runs from that signal to the last workflow
  Succeeded: the standby taking the Lease (at once if it was released, after the Lease's
  duration if not), then finding every in-flight workflow, rebuilding each one's state from
  its history and recording its timer.

* **fan** — `workflows` workflows of `width` steps each (the first, then a fan of the rest after
  it: 50 x 200 is a 10,000-step fan-out, 200 being a workflow's most steps), created at once;
  steps/s from the first creation to the last Succeeded, once with `pod` steps (each runs
  `true` on the local node agent) and once with `task` steps (the no-op task of
  bench/queue.py, run by `vigil worker` processes on a PostgreSQL of the run's own), by one
  operator with the volume tier on. The task figure is the volume tier's path: a submit per
  step, the worker's lease and acknowledgement, and the engine's poll of a workflow's running
  tasks (`TASK_POLL`, 1 s) — beside the pod path's pod per step.

All print figures only; none fails for being slow. Each wait has a deadline: a run that
reaches it returns what had finished by then (`bench.reporting.Completion`), printed as a
censored figure, never as if all had finished; an operator that never took the Lease, or
workflows not all in flight at the kill, are said in the notes.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from kubernetes import watch

from bench.cpu import CpuUse, snapshot
from bench.reporting import Completion

GROUP, VERSION = "vigil.dev", "v1alpha1"
CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
RESUME_WAIT_S = 30  # the timers come due this long after the workflows are created, at least
RESUME_WAIT_PER_WORKFLOW_S = 0.06  # and at least this per workflow (1,000: 60 s), so all are Running first
FREEZE_BEFORE_DUE_S = 1.5  # the leader is frozen this long before the timers come due
DUE_MARGIN_S = 0.5  # and ended this long after
POLL_S = 0.5
WATCH_TIMEOUT_S = 30  # a phase watch is restarted from its last version this often
LEAD_DEADLINE_S = 120.0  # an operator that has not taken the Lease by then is reported, not waited for
FINISH_DEADLINE_S = 900.0  # for all workflows to succeed (both sections)
IN_FLIGHT_DEADLINE_S = 600.0  # for the resume section's workflows all to be Running before the kill


class BenchCluster(Protocol):
    """What these measurements need of bench.__main__.Bench."""

    @property
    def custom(self) -> Any: ...

    def namespace(self, prefix: str) -> str: ...

    def create_many(self, count: int, make: Callable[[int], None]) -> None: ...

    def start_operator(self, name: str, settings: str) -> tuple[Any, Any]: ...

    def lease_holder(self, namespace: str) -> str | None: ...


def ten_steps() -> list[dict[str, Any]]:
    template = {"spec": {"containers": [CONTAINER]}}
    steps: list[dict[str, Any]] = [{"id": "s0", "type": "pod", "template": template}]
    steps.append({"id": "s1", "type": "pod", "dependsOn": ["s0"], "template": template})
    steps += [{"id": f"f{i}", "type": "pod", "dependsOn": ["s1"], "template": template} for i in range(8)]
    return steps


def _settings(opns: str, state: Any, name: str, *, pods: int = 0) -> str:
    """The operator's settings; with `pods`, dispatch caps above that many step pods running at once
    (the chart's defaults, 50 per namespace and 90 for normal priority, would make the rate section
    measure the cap: 50 running pods that each live about 5 s here is 10 steps/s, whatever the
    engine does — the podfloor it is set beside has no cap either)."""
    caps = f"dispatch: {{maxRunning: {pods}, perNamespaceMax: {pods}, reservedHigh: 0}}\n" if pods else ""
    return caps + (
        f"namespace: {opns}\nleaderElection: {{leaseDurationSeconds: 15, renewPeriodSeconds: 5}}\n"
        f"http: {{metricsPort: 0, apiPort: 0, healthPort: 0}}\nworkflows: {{workers: 4, rescanSeconds: 30}}\n"
        f"history: {{dsn: 'sqlite:///{state}/{name}-history.db'}}\n"
    )


class Phases:
    """Each workflow's phase in a namespace, kept from a watch. Polling a LIST instead would have
    the API server encode a thousand workflows with their histories twice a second, on the same
    two cores as the operator whose figure it is. The time a workflow is first seen Succeeded is
    kept too, so a figure ends when the last one was seen, as the podfloor's does, not at the
    next look of a poll."""

    def __init__(self, b: BenchCluster, ns: str) -> None:
        self._b, self._ns = b, ns
        self._phases: dict[str, str] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._last_success: float | None = None  # monotonic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"phases-{ns}", daemon=True)
        self._thread.start()

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(Counter(self._phases.values()))

    def wait_for(self, phase: str, count: int, timeout: float) -> float | None:
        """Wait until ``count`` workflows are in ``phase``; for Succeeded, when the last of them
        was seen so (monotonic), else when the wait ended. None: the timeout came first."""
        with self._changed:
            reached = self._changed.wait_for(lambda: Counter(self._phases.values())[phase] >= count, timeout)
            if not reached:
                return None
            return self._last_success if phase == "Succeeded" and self._last_success else time.monotonic()

    def _set(self, name: str, phase: str | None) -> None:
        """Under the lock: a workflow's phase (None: deleted)."""
        if phase is None:
            self._phases.pop(name, None)
        else:
            if phase == "Succeeded" and self._phases.get(name) != phase:
                self._last_success = time.monotonic()
            self._phases[name] = phase
        self._changed.notify_all()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=WATCH_TIMEOUT_S + 5)

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:  # (re)start from a list: the watch's own start, or after it expired
                    listed = self._b.custom.list_namespaced_custom_object(GROUP, VERSION, self._ns, "workflows")
                    with self._lock:
                        for gone in set(self._phases) - {item["metadata"]["name"] for item in listed["items"]}:
                            self._set(gone, None)
                        for item in listed["items"]:
                            self._set(item["metadata"]["name"], _phase(item))
                    version = listed["metadata"]["resourceVersion"]
                stream = watch.Watch().stream(
                    self._b.custom.list_namespaced_custom_object, GROUP, VERSION, self._ns, "workflows",
                    resource_version=version, timeout_seconds=WATCH_TIMEOUT_S,
                )  # fmt: skip
                for event in stream:
                    obj = event["object"]
                    if event["type"] == "ERROR":  # 410 Gone: the version is too old
                        version = None
                        break
                    version = obj["metadata"]["resourceVersion"]
                    with self._lock:
                        self._set(obj["metadata"]["name"], None if event["type"] == "DELETED" else _phase(obj))
                    if self._stop.is_set():
                        return
            except Exception:  # a dropped watch: list again
                version = None
                self._stop.wait(POLL_S)


def _phase(obj: dict[str, Any]) -> str:
    return (obj.get("status") or {}).get("phase") or "New"


def _wait(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(POLL_S)
    return False


def _lead(b: BenchCluster, opns: str, name: str, proc: Any) -> float | None:
    """Seconds until operator `name` held the leader Lease; None if it exited or the deadline came first."""
    started = time.monotonic()
    _wait(lambda: proc.poll() is not None or b.lease_holder(opns) == name, LEAD_DEADLINE_S)
    if proc.poll() is not None or b.lease_holder(opns) != name:
        return None
    return time.monotonic() - started


def _finished(phases: Phases, count: int, started: float) -> tuple[Completion, dict[str, int]]:
    """Wait up to FINISH_DEADLINE_S for `count` workflows to succeed: what finished (until the
    last was seen Succeeded), and every phase."""
    last = phases.wait_for("Succeeded", count, FINISH_DEADLINE_S)
    end = phases.counts()
    return Completion(end.get("Succeeded", 0), count, (last or time.monotonic()) - started), end


def _create(b: BenchCluster, ns: str, count: int, prefix: str, steps: list[dict[str, Any]]) -> None:
    def make(i: int) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Workflow",
            "metadata": {"name": f"{prefix}{i:04}"},
            "spec": {"steps": steps},
        }
        b.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "workflows", body)

    b.create_many(count, make)


def workflows_rate(
    b: BenchCluster, state: Any, stop: Callable[..., None], count: int
) -> tuple[Completion, str, CpuUse]:
    """How many of `count` 10-step workflows succeeded in how long, notes (phases at the end),
    and the CPU the run cost (bench/cpu.py: the operator's included) until the last Succeeded,
    per step of the workflows that did."""
    ns, opns = b.namespace("bench-wf"), b.namespace("bench-wfop")
    proc, pidfile = b.start_operator("bench-wf", _settings(opns, state, "bench-wf", pods=count * 10))
    phases = Phases(b, ns)
    try:
        lead = _lead(b, opns, "bench-wf", proc)
        started = time.monotonic()
        before = snapshot(state)
        _create(b, ns, count, "w", ten_steps())
        done, end = _finished(phases, count, started)
        cpu = CpuUse.between(before, snapshot(state), done.finished * len(ten_steps()))
        notes = f"end {end}"
        if lead is None:
            notes += f"; the operator did not hold the Lease within {LEAD_DEADLINE_S:.0f}s of starting"
        return done, notes, cpu
    finally:
        phases.close()
        stop(proc, pidfile)


FAN_QUEUE = "work"  # the TaskQueue the fan's task steps name, in the workflows' namespace
FAN_WORKERS = 2  # `vigil worker` processes for the task row


def fan_steps(width: int, kind: str) -> list[dict[str, Any]]:
    """``s0``, then ``width - 1`` steps after it, all of ``kind``: a pod running `true`, or the
    no-op task of bench/queue.py."""
    if kind == "task":
        block: dict[str, Any] = {"task": {"queue": FAN_QUEUE, "name": "noop"}}
    else:
        block = {"template": {"spec": {"containers": [CONTAINER]}}}
    steps: list[dict[str, Any]] = [{"id": "s0", "type": kind, **block}]
    steps += [{"id": f"f{i}", "type": kind, "dependsOn": ["s0"], **block} for i in range(width - 1)]
    return steps


def fan_rate(
    b: BenchCluster,
    state: Any,
    stop: Callable[..., None],
    *,
    workflows: int,
    width: int,
    dsn: str,
    spawn_worker: Callable[[str, Any], Any],
    ready: Callable[[list[Any], list[Any]], None],
    logs: Any,
) -> dict[str, tuple[Completion, str]]:
    """Steps of `workflows` fans of `width` steps run to Succeeded, per kind (pod, task): what
    finished in how long (counted in steps), and notes. One operator with `queue.dsn` runs both;
    `spawn_worker(queue, log)` starts one `vigil worker` on the task row's queue; `ready` waits
    until the workers say they are (the clock starts after)."""
    opns = b.namespace("bench-fanop")
    steps = workflows * width
    settings = _settings(opns, state, "bench-fan", pods=steps) + f"queue: {{dsn: '{dsn}'}}\n"
    proc, pidfile = b.start_operator("bench-fan", settings)
    found: dict[str, tuple[Completion, str]] = {}
    try:
        lead = _lead(b, opns, "bench-fan", proc)
        for kind in ("pod", "task"):
            ns = b.namespace(f"bench-fan-{kind}")
            paths = [logs / f"fan-worker-{i}.log" for i in range(FAN_WORKERS if kind == "task" else 0)]
            workers = [spawn_worker(f"{ns}/{FAN_QUEUE}", path) for path in paths]
            phases = Phases(b, ns)
            try:
                ready(workers, paths)
                started = time.monotonic()
                _create(b, ns, workflows, kind[0], fan_steps(width, kind))
                done, end = _finished(phases, workflows, started)
            finally:
                phases.close()
                for worker in workers:
                    stop(worker)
            notes = f"end {end}" + ("" if lead is not None else "; the operator did not hold the Lease in time")
            found[kind] = (Completion(done.finished * width, steps, done.seconds), notes)
        return found
    finally:
        stop(proc, pidfile)


def resume_time(
    b: BenchCluster, state: Any, stop: Callable[..., None], count: int, *, graceful: bool
) -> tuple[Completion, str]:
    """How many of `count` waiting workflows the standby finished, how long after the leader was ended
    (SIGTERM when `graceful`, else SIGKILL), and notes."""
    ns, opns = b.namespace("bench-resume"), b.namespace("bench-resumeop")
    settings = _settings(opns, state, "bench-resume")
    first, first_pid = b.start_operator("bench-resume-1", settings)
    _lead(b, opns, "bench-resume-1", first)
    second, second_pid = b.start_operator("bench-resume-2", settings)  # the standby
    phases = Phases(b, ns)
    try:
        due = math.ceil(time.time() + max(RESUME_WAIT_S, count * RESUME_WAIT_PER_WORKFLOW_S))
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(due))
        _create(b, ns, count, "r", [{"id": "hold", "type": "wait", "wait": {"until": until}}])
        phases.wait_for("Running", count, due - FREEZE_BEFORE_DUE_S - time.time())
        running = phases.counts().get("Running", 0)
        time.sleep(max(0.0, due - FREEZE_BEFORE_DUE_S - time.time()))  # frozen any earlier, the Lease would expire
        operators = {"bench-resume-1": first, "bench-resume-2": second}
        holder = b.lease_holder(opns)
        moved = "" if holder == "bench-resume-1" else f"; the Lease had moved to {holder!r} before the freeze"
        leader_name = holder if holder in operators else "bench-resume-1"
        leader = operators[leader_name]
        standby_name = next(name for name in operators if name != leader_name)
        leader.send_signal(signal.SIGSTOP)  # frozen: it leaves the due timers to the handover
        time.sleep(max(0.0, due + DUE_MARGIN_S - time.time()))  # until every timer is due: a time, not a condition
        started = time.monotonic()
        if graceful:
            leader.send_signal(signal.SIGTERM)
            leader.send_signal(signal.SIGCONT)
        else:
            leader.send_signal(signal.SIGKILL)
        lead = _lead(b, opns, standby_name, operators[standby_name])
        done, end = _finished(phases, count, started)
        how = "SIGTERM" if graceful else "SIGKILL"
        if lead is None:
            leadership = f"the standby did not hold the Lease within {LEAD_DEADLINE_S:.0f}s of the {how}"
        else:
            leadership = f"the standby held the Lease {lead:.1f}s after the {how}"
        in_flight = f"{running}/{count} Running when the leader was frozen"
        if running < count:
            in_flight += " (the rest were started by the standby too)"
        return done, f"{leadership}; {in_flight}{moved}; end {end}"
    finally:
        phases.close()
        for proc in (first, second):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a frozen one must be able to act on the SIGTERM
        stop(first, first_pid)
        stop(second, second_pid)
