"""The workflows' own floor: a plain client running the same graph of steps with bare pods.

The podfloor creates every pod at once; a workflow cannot: a step's pod is created only once the
pods it depends on have Succeeded, so each level of the graph waits for a pod's whole life (create,
schedule, start, run, end, status seen) before the next begins. This floor pays exactly that wait
and nothing of an engine: `count` copies of the workflows section's graph (bench/workflows.py,
`ten_steps`: a chain of 2, then a fan of 8), each step a bare pod (`busybox`, `true`,
restartPolicy Never). A watch in this process sees each pod Succeeded and at once hands the steps
it unblocks to the same 8 creating threads the podfloor uses. Nothing is recorded anywhere, no
status written, no retry possible: the least any engine running this graph on this control plane
does. The clock runs from the first create to the last pod seen Succeeded; the figure is steps/s.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.cluster import Arrivals, Bench, wait_until
from bench.cpu import CpuUse, snapshot
from bench.reporting import Completion

CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
CREATORS = 8  # threads creating pods, as the podfloor's client has


class Graph:
    """Which steps each step unblocks, and which steps wait for none."""

    def __init__(self, steps: Sequence[dict[str, Any]]) -> None:
        self.waits = {s["id"]: len(s.get("dependsOn") or ()) for s in steps}
        self.unblocks: dict[str, list[str]] = {s["id"]: [] for s in steps}
        for s in steps:
            for before in s.get("dependsOn") or ():
                self.unblocks[before].append(s["id"])
        self.roots = [step for step, waits in self.waits.items() if not waits]


class Runner:
    """Runs `count` copies of a graph: each pod `dag-<copy>-<step>`; `ended(name)` when one Succeeded."""

    def __init__(self, b: Bench, namespace: str, graph: Graph, count: int) -> None:
        self._b, self._ns, self._graph, self._count = b, namespace, graph, count
        self._waiting = {(copy, step): waits for copy in range(count) for step, waits in graph.waits.items()}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=CREATORS, thread_name_prefix="dagfloor")
        self.errors: list[str] = []

    def start(self) -> None:
        for copy in range(self._count):
            for step in self._graph.roots:
                self._pool.submit(self._create, copy, step)

    def ended(self, name: str) -> None:
        """A pod Succeeded (the watch's thread): create each step it was the last to wait for."""
        _, copy, step = name.split("-", 2)
        ready = []
        with self._lock:
            for after in self._graph.unblocks.get(step, ()):
                self._waiting[(int(copy), after)] -= 1
                if self._waiting[(int(copy), after)] == 0:
                    ready.append(after)
        for after in ready:
            self._pool.submit(self._create, int(copy), after)

    def close(self, *, wait: bool = False) -> None:
        """Stop creating; `wait`: after the creates already handed over."""
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def _create(self, copy: int, step: str) -> None:
        body = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name(copy, step)},
            "spec": {"restartPolicy": "Never", "containers": [CONTAINER]},
        }  # fmt: skip
        try:
            self._b.core.create_namespaced_pod(self._ns, body)
        except Exception as error:  # kept for the report: the run is then censored, not wrong
            self.errors.append(f"{pod_name(copy, step)}: {type(error).__name__}: {str(error).splitlines()[0][:200]}")


def pod_name(copy: int, step: str) -> str:
    return f"dag-{copy:04}-{step}"


def run(
    b: Bench, count: int, steps: Sequence[dict[str, Any]], window: float
) -> tuple[Completion, list[str], CpuUse]:
    """`count` copies of the graph of `steps` run by a plain client: steps Succeeded in how long,
    notes, and the CPU the run cost (bench/cpu.py), per step Succeeded."""
    ns = b.namespace("bench-dag")
    graph = Graph(steps)
    runner = Runner(b, ns, graph, count)
    total = count * len(graph.waits)
    pods = Arrivals(b.core.list_namespaced_pod, ns, key=lambda p: str(p["metadata"]["name"]),
                    done=lambda p: (p.get("status") or {}).get("phase") == "Succeeded",
                    on_finished=runner.ended)  # fmt: skip
    wait_until(datetime.now(UTC) + timedelta(seconds=10), lambda: pods.listed, interval=0.1)
    started = datetime.now(UTC)
    before = snapshot(b.state)
    try:
        runner.start()
        done = wait_until(started + timedelta(seconds=window), lambda: len(pods.finished) >= total)
        cpu = snapshot(b.state)
    finally:
        pods.stop()
        runner.close()
    ends = pods.finished_offsets(started)
    notes = [] if done else [f"only {len(ends)}/{total} steps Succeeded within {window:.0f}s"]
    notes += [f"create errors: {len(runner.errors)}, last: {runner.errors[-1]}"] if runner.errors else []
    notes += [f"watch errors: {len(pods.errors)}, last: {pods.errors[-1]}"] if pods.errors else []
    return Completion(len(ends), total, max(ends, default=window)), notes, CpuUse.between(before, cpu, len(ends))
