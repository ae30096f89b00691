"""Faults of the local control plane itself, and a burst of occurrences recorded across them.

`restart` stops one component of the running test cluster (the API server or etcd: SIGTERM, then
SIGKILL after a grace) and starts it again the way the cluster started it
(`e2e.cluster.localcluster.up`, which starts only what is not running and keeps etcd's data while
any component still runs). `compact_etcd` asks etcd itself, through its HTTP gateway, to compact
its whole history up to a write of its own (physically), so that no watch can resume from a
version before it: with the API server stopped meanwhile, nothing moves the head past that write,
and once it serves again every client's watch expires (410).

`Burst` records a burst of one-off ScheduledJobs against the checker's history
(tests/faults/history.py): each job's `runAt` is `Due` (catch-up All: it must fire, never end
Missed); each Execution seen, counted by uid through a watch that survives the faults
(tests/stress/recorders.py), is `Fired` at its creation time; each ledger entry recorded Missed is
`Missed`; every Execution still there at the end is `Held`. Two Executions of one occurrence, or
two pods of one attempt, would be two `Fired`.

`Replicas` keeps a number of operator processes running as a Deployment would: one that exits
(a leader that could not renew its Lease while the API server was away exits on purpose) is
replaced.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from e2e.cluster import localcluster
from tests.faults.history import Fired, History
from tests.faults.settling import settle
from tests.integration.conftest import PORT_BASE, STATE, KubeCluster
from tests.integration.jobs import (
    GROUP,
    MANAGED_SELECTOR,
    PLURAL,
    VERSION,
    create_job,
    parse_time,
    rfc3339,
)
from tests.integration.operators import OperatorFleet, OperatorProcess
from tests.stress.recorders import Sightings

API_SERVER, ETCD = "kube-apiserver", "etcd"
STOP_GRACE_SECONDS = 10.0
READY_TIMEOUT = 120.0  # a cold API server on this 2-core machine: ~20 s; margin for load
ONE_OFF = {"catchUpPolicy": "All", "catchUpWindow": "10m"}  # late is fine; Missed is not


def cluster_state() -> localcluster.Cluster:
    return localcluster.Cluster(state=STATE.resolve(), port_base=PORT_BASE)


def stop(component: str) -> None:
    """Stop one component of the test cluster, as a crash or an upgrade would (SIGTERM, then SIGKILL)."""
    localcluster.stop_component(STATE, component, grace_s=STOP_GRACE_SECONDS)


def start_again() -> None:
    """Start whatever of the test cluster is stopped, and wait until it serves and a pod could run."""
    localcluster.up(STATE, PORT_BASE)


def restart(component: str) -> None:
    stop(component)
    start_again()


def compact_etcd() -> int:
    """Write one key of the test's own, then compact etcd's whole history up to that write,
    physically; that revision.

    The write puts the head past every version a client has seen: compacting to a head a watch
    had already reached (its last event, or a bookmark, at the head) would let it resume.
    """
    base = f"http://127.0.0.1:{cluster_state().etcd_port}/v3/kv"
    key, value = (base64.b64encode(text).decode() for text in (b"/vigil-faults/compaction", b"1"))
    head = int(_post(f"{base}/put", {"key": key, "value": value})["header"]["revision"])
    _post(f"{base}/compaction", {"revision": str(head), "physical": True})
    return head


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


class Replicas:
    """`count` operator processes of `fleet`, each one that exits replaced (as a Deployment does)."""

    def __init__(self, fleet: OperatorFleet, count: int, **overrides: Any) -> None:
        self.fleet, self.count, self.overrides = fleet, count, overrides
        self.replaced = 0
        for _ in range(count):
            fleet.start(**overrides)

    def alive(self) -> list[OperatorProcess]:
        return [op for op in self.fleet.processes if op.alive]

    def tend(self) -> bool:
        """Replace exited replicas; whether all `count` were already alive."""
        missing = self.count - len(self.alive())
        for _ in range(missing):
            self.fleet.start(**self.overrides)
            self.replaced += 1
        return missing <= 0


def _facts(obj: dict[str, Any]) -> dict[str, str]:
    labels = obj["metadata"].get("labels") or {}
    return {
        "job": (obj.get("spec") or {}).get("job", {}).get("name", labels.get("vigil.dev/job", "")),
        "scheduledFor": (obj.get("spec") or {}).get("scheduledFor", ""),
        "execution": labels.get("vigil.dev/execution-id", obj["metadata"]["name"]),
        "attempt": labels.get("vigil.dev/attempt", ""),
        "created": obj["metadata"]["creationTimestamp"],
        "phase": (obj.get("status") or {}).get("phase") or "",
    }


class Burst:
    """One-off jobs due over a window, watched: see the module docstring."""

    def __init__(self, cluster: KubeCluster, namespace: str, history: History) -> None:
        self.cluster, self.namespace, self.history = cluster, namespace, history
        self.due: dict[str, datetime] = {}

        def list_executions(**kwargs: Any) -> Any:
            return cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "executions", **kwargs)

        def list_pods(**kwargs: Any) -> Any:
            return cluster.core.list_namespaced_pod(namespace, **kwargs)

        self.executions = Sightings(list_executions, _facts)
        self.pods = Sightings(list_pods, _facts, label_selector=MANAGED_SELECTOR)

    def create(self, count: int, *, first: datetime, spread: timedelta) -> None:
        """`count` one-off jobs, due evenly over [first, first + spread) (whole seconds)."""
        for i in range(count):
            name = f"burst-{i:04}"
            run_at = (first + spread * i / count).replace(microsecond=0)
            create_job(self.cluster, self.namespace, name, runAt=rfc3339(run_at), **ONE_OFF)
            self.due[name] = run_at
            self.history.due(name, run_at)

    def fired(self) -> int:
        return len({s.facts["job"] for s in self.executions.all()} & set(self.due))

    def wait_all_fired(self, *, timeout: float, tend: Replicas | None = None) -> None:
        def done() -> bool:
            if tend is not None:
                tend.tend()
            return self.fired() == len(self.due)

        settle(done, timeout=timeout, what=f"all {len(self.due)} occurrences fired")

    def record(self) -> None:
        """Append what was seen to the history: Fired, Missed, Held (see the module docstring)."""
        self.executions.stop()
        self.pods.stop()
        for seen in self.executions.all():
            facts = seen.facts
            self.history.add(Fired(parse_time(facts["created"]), facts["job"], parse_time(facts["scheduledFor"]),
                                   facts["execution"], by="operator"))  # fmt: skip
        pods: dict[tuple[str, str], int] = defaultdict(int)
        for seen in self.pods.all():
            pods[(seen.facts["execution"], seen.facts["attempt"])] += 1
        for (execution, attempt), count in pods.items():
            if count > 1:  # a second pod of one attempt: the occurrence ran twice
                job, nominal = self._occurrence_of(execution)
                self.history.fired(job, nominal, f"{execution} (pod {attempt} again)")
        for name in self.due:
            job = self.cluster.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
            for entry in (job.get("status") or {}).get("occurrences") or []:
                if entry.get("outcome") == "Missed":
                    self.history.missed(name, parse_time(entry["nominal"]), reason="ledger")
        listed = self.cluster.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "executions")
        for obj in listed["items"]:
            self.history.held(obj["metadata"]["labels"].get("vigil.dev/execution-id", obj["metadata"]["name"]),
                              (obj.get("status") or {}).get("phase") or "Ready")  # fmt: skip

    def _occurrence_of(self, execution: str) -> tuple[str, datetime]:
        for seen in self.executions.all():
            if seen.facts["execution"] == execution:
                return seen.facts["job"], parse_time(seen.facts["scheduledFor"])
        return execution, datetime.min.replace(tzinfo=UTC)

    def early(self) -> list[str]:
        """Executions created before their occurrence's nominal time (jitter is off for one-offs)."""
        return [f"{s.facts['job']}@{s.facts['scheduledFor']} created {s.facts['created']}"
                for s in self.executions.all()
                if parse_time(s.facts["created"]) < parse_time(s.facts["scheduledFor"])]  # fmt: skip


def now() -> datetime:
    return datetime.now(UTC)
