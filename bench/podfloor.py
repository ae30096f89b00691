"""The API server's own floor: how fast a plain client gets N bare pods created and run.

This is the reference the burst figures are divided by. A client with 8 threads creates `count`
bare pods (the same image and command as the executions' pods: `busybox`, `true`,
restartPolicy Never) in one namespace of the same kind of control plane and node agent the other
sections use, and a watch in this process records when each pod is first seen and when it is
first seen Succeeded. The clock starts when the first create is sent.

Figures: pods/s (pods over the time until the last one was observed), observed p50/p99,
Succeeded p99, and API writes per pod counting every client (this client, the scheduler's
binding, the node agent's status, Events), from the audit log restricted to the pods'
namespace so that the control plane's own background writes (leases, node heartbeats) are left
out.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from bench.audit import Request, Tally
from bench.cluster import Arrivals, Bench, wait_until
from bench.reporting import Completion, censored, percentile

CONTAINER = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
QUIET_S = 2.0  # writes have settled when none came in this long


@dataclasses.dataclass
class Floor:
    count: int
    window: float
    observed: list[float]  # pod first seen on the watch - first create sent, seconds
    succeeded: list[float]  # pod first seen Succeeded - first create sent
    writes: Tally  # every request in the pods' namespace, every client
    notes: list[str]

    def p(self, q: float, values: list[float] | None = None) -> float:
        return percentile(censored(self.observed if values is None else values, self.count), q)

    @property
    def pods_per_s(self) -> Completion:
        return Completion(len(self.observed), self.count, max(self.observed, default=self.window))

    @property
    def succeeded_per_s(self) -> Completion:
        """Pods run to Succeeded per second: what a chain of steps, each waiting for the last
        one's result, can reach at most."""
        return Completion(len(self.succeeded), self.count, max(self.succeeded, default=self.window))

    @property
    def observed_p99(self) -> float | None:
        """The reference for the burst figures; None when censored."""
        value = self.p(0.99)
        return value if math.isfinite(value) else None


def settle(b: Bench, offset: int, keep: Callable[[Request], bool], deadline: float) -> Tally:
    """The requests since `offset` that `keep` selects, once no new one came for QUIET_S (or at `deadline`)."""
    cursor, tally = b.audit.follow(offset), Tally()
    tally.add(cursor.take(), keep)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if tally.add(cursor.take(), keep):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_S:
            break
    return tally


def run(b: Bench, count: int, window: float) -> Floor:
    ns = b.namespace("bench-floor")
    pods = Arrivals(b.core.list_namespaced_pod, ns, key=lambda p: str(p["metadata"]["name"]),
                    done=lambda p: (p.get("status") or {}).get("phase") == "Succeeded")  # fmt: skip
    wait_until(datetime.now(UTC) + timedelta(seconds=10), lambda: pods.listed, interval=0.1)
    offset = b.audit.mark()

    def make(i: int) -> None:
        body = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"floor-{i:05}"},
            "spec": {"restartPolicy": "Never", "containers": [CONTAINER]},
        }  # fmt: skip
        b.core.create_namespaced_pod(ns, body)

    started = datetime.now(UTC)
    b.create_many(count, make)
    notes: list[str] = []
    done = wait_until(started + timedelta(seconds=window), lambda: len(pods.finished) >= count)
    pods.stop()
    if not done:
        notes.append(f"only {len(pods.seen)}/{count} observed, {len(pods.finished)} Succeeded within {window:.0f}s")
    if pods.errors:
        notes.append(f"watch errors: {len(pods.errors)}, last: {pods.errors[-1]}")
    writes = settle(b, offset, lambda r: r.namespace == ns, time.monotonic() + 30)
    return Floor(count, window, pods.offsets(started), pods.finished_offsets(started), writes, notes)
