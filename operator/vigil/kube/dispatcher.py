"""The leader's dispatcher: retries that have come due, and attempts started within capacity.

Each pass reads the executions that are Ready, Running or in Backoff (by the
phase label: what is in flight, never the history), moves due retries to
Ready, asks `vigil.core.dispatch.choose` which Ready ones may start — global
cap, reserved high-priority slots, per-namespace caps, round-robin across
namespaces — and starts them: pod first (named from execution id and attempt,
so a repeat is a 409), then the Running transition. Every wait is a stored
`retryAt`, so a restarted leader picks up exactly where the old one stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.dispatch import Capacity, choose, oldest_ready_age
from vigil.core.executions import (
    Execution,
    Phase,
    as_candidate,
    finish,
    is_retry_due,
    retry_due,
    running_counts,
    start,
)
from vigil.core.ids import ExecutionId, pod_name
from vigil.core.podstatus import PodPhase, attempt_result, classify_pod
from vigil.core.ports import Clock, Conflict
from vigil.core.timeparse import parse_rfc3339
from vigil.kube.executions import ExecutionStore, readable
from vigil.kube.jobs import KubeCatalogue
from vigil.kube.launcher import PodFactory
from vigil.kube.pods import LABEL_ATTEMPT, LABEL_EXECUTION
from vigil.kube.results import JobResults
from vigil.model.jobspec import InvalidJob, parse_spec, retry_policy

log = logging.getLogger(__name__)

RECONCILE_EVERY = timedelta(seconds=10)
START_CONCURRENCY = 8  # attempts started at once within a pass
START_WRITE_TRIES = 3  # conflicts on recording a start (metadata changes) before giving up for this pass
MIN_PASS_GAP = 0.2  # seconds between two passes at least
#: The gap after a pass is at least this many times the pass's own duration: a pass lists every
#: in-flight Execution, so with thousands in flight back-to-back passes would spend the API
#: server on lists while the trigger waits for its writes. Keeps the dispatcher under ~1/3 busy.
PASS_COST_FACTOR = 2.0


@dataclasses.dataclass
class DispatchReport:
    retried: int = 0
    started: int = 0
    stuck: int = 0
    duplicates: int = 0  # newly seen: two live pods for one execution
    ready: int = 0
    running: int = 0
    oldest_ready_age: dict[str, float] = dataclasses.field(default_factory=dict)


class Dispatcher:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        store: ExecutionStore,
        catalogue: KubeCatalogue,
        results: JobResults,
        clock: Clock,
        capacity: Capacity,
        pending_limit: timedelta = timedelta(minutes=5),
    ) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._store = store
        self._catalogue = catalogue
        self._results = results
        self._clock = clock
        self._capacity = capacity
        self._pending_limit = pending_limit
        self._pods = PodFactory()
        self._wake = threading.Event()
        self._last_reconcile: datetime | None = None
        self._duplicates_seen: set[tuple[str, str, int]] = set()

    def notify(self) -> None:
        """Something became Ready: run a pass now rather than at the next interval."""
        self._wake.set()

    def run(self, stop: threading.Event, *, interval: float, on_report: Any = None) -> None:
        while not stop.is_set():
            self._wake.clear()
            started = time.monotonic()
            try:
                report = self.dispatch()
                if on_report is not None:
                    on_report(report)
            except Exception:
                log.exception("dispatch pass failed; retrying")
            gap = max(MIN_PASS_GAP, PASS_COST_FACTOR * (time.monotonic() - started))
            stop.wait(gap)  # a burst of wake-ups (pods ending) becomes one pass, not hundreds
            self._wake.wait(max(0.0, interval - gap))

    def dispatch(self) -> DispatchReport:
        now = self._clock.now()
        report = DispatchReport()
        flight = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): (o, ex)
            for o, ex in readable(self._store.in_phase(Phase.READY, Phase.RUNNING, Phase.BACKOFF))
        }
        for obj, ex in list(flight.values()):
            if ex.phase.terminal and self._store.repair_labels(obj):  # a label write that failed
                del flight[(ex.namespace, obj["metadata"]["name"])]
        for key, (obj, ex) in list(flight.items()):
            if is_retry_due(ex, now):
                due = retry_due(ex, now=now)
                try:
                    flight[key] = (self._write(obj, due), due)
                except Conflict:
                    continue  # changed meanwhile (a label, a cancel): the next pass reads it again
                report.retried += 1
        executions = [ex for _, ex in flight.values()]
        ready = [as_candidate(ex) for ex in executions if ex.phase is Phase.READY]
        report.ready, report.oldest_ready_age = len(ready), oldest_ready_age(ready, now)
        running = running_counts(executions)
        report.running = running.total
        chosen = [flight[(c.namespace, c.execution_id)] for c in choose(ready, running, self._capacity)]
        report.started = self._start_all(chosen, now)
        if self._last_reconcile is None or now - self._last_reconcile > RECONCILE_EVERY:
            self._last_reconcile = now
            report.duplicates = self._count_duplicates([v[1] for v in flight.values() if v[1].phase is Phase.RUNNING])
            report.stuck = self._reconcile_running([v for v in flight.values() if v[1].phase is Phase.RUNNING], now)
        return report

    def _write(self, obj: Mapping[str, Any], ex: Execution) -> dict[str, Any]:
        return self._store.write(obj, ex)

    def _start_all(self, chosen: list[tuple[dict[str, Any], Execution]], now: datetime) -> int:
        """Start the chosen executions, several at once; returns how many started.

        Each start is a few API calls; one after the other they capped a pass at a handful of
        starts a second, below the rate at which slots free when attempts are short. Each job
        is read once per pass (a backfill's executions share one).
        """
        names = {(ex.namespace, obj["spec"]["job"]["name"]) for obj, ex in chosen}
        jobs = {key: self._catalogue.fetch(*key) for key in names}

        def start_one(item: tuple[dict[str, Any], Execution]) -> bool:
            obj, ex = item
            return self._start(obj, ex, now, job=jobs[(ex.namespace, obj["spec"]["job"]["name"])])

        if len(chosen) <= 1:
            return sum(map(start_one, chosen))
        with ThreadPoolExecutor(max_workers=min(START_CONCURRENCY, len(chosen))) as pool:
            return sum(pool.map(start_one, chosen))

    def _start(self, obj: Mapping[str, Any], ex: Execution, now: datetime, *, job: dict[str, Any] | None) -> bool:
        spec_obj = obj["spec"]
        if job is None or job["metadata"]["uid"] != spec_obj["job"]["uid"]:
            return False  # the job is gone; garbage collection removes its executions
        try:
            spec = parse_spec(job)
            pod = self._pods.pod_for(
                job=job,
                spec=spec,
                execution_id=ex.execution_id,
                attempt=ex.attempt,
                scheduled_for=ex.scheduled_for,
                period_start=parse_rfc3339(spec_obj["periodStart"]),
                period_end=parse_rfc3339(spec_obj["periodEnd"]),
            )
        except (InvalidJob, ValueError) as err:
            log.warning("execution %s/%s cannot start: %s", ex.namespace, ex.execution_id, err)
            return False
        name = pod["metadata"]["name"]
        try:
            self._core.create_namespaced_pod(ex.namespace, pod)
        except ApiException as err:
            if err.status != 409:
                # Refused (its namespace is being deleted, a quota, a webhook): this one waits for
                # a later pass, and the rest of this pass still starts.
                log.warning("execution %s/%s: pod %s not created: %s %s", ex.namespace, ex.execution_id,
                            name, err.status, err.reason)  # fmt: skip
                return False
        if not self._record_start(obj, ex, pod=name, now=now):
            return False
        log.info("started %s/%s attempt %d as pod %s", ex.namespace, ex.execution_id, ex.attempt, name)
        return True

    def _record_start(self, obj: Mapping[str, Any], ex: Execution, *, pod: str, now: datetime) -> bool:
        """Ready → Running, once the pod exists. A conflict is usually a metadata change (the
        history label, kopf's annotations): read again and retry, or a slot would hold a pod while
        its execution still counts as Ready. If the execution moved on meanwhile without this
        attempt being recorded (cancelled), the pod just created must not run: delete it."""
        attempt = ex.attempt
        for _ in range(START_WRITE_TRIES):
            try:
                self._write(obj, start(ex, pod=pod, now=now))
                return True
            except Conflict:
                fresh = self._store.get(ex.namespace, obj["metadata"]["name"])
                current = readable([fresh]) if fresh is not None else []
                if not current:
                    return False
                obj, ex = current[0]
                if ex.phase is Phase.RUNNING and ex.pod == pod:
                    return True
                if ex.phase is not Phase.READY or ex.attempt != attempt:
                    if not ex.recorded(attempt):
                        self._delete_pod(pod, ex.namespace)
                    return False
        return False

    def _delete_pod(self, name: str, namespace: str) -> None:
        try:
            self._core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as err:
            if err.status != 404:
                raise

    def _count_duplicates(self, running: list[Execution]) -> int:
        """Executions with more than one live pod (an old attempt still running beside a new one)."""
        new = 0
        for ex in running:
            pods = self._core.list_namespaced_pod(
                ex.namespace, label_selector=f"{LABEL_EXECUTION}={ex.execution_id}"
            ).items
            live = [p for p in pods if p.status.phase in ("Pending", "Running") and not p.metadata.deletion_timestamp]
            key = (ex.namespace, ex.execution_id, ex.attempt)
            if len(live) > 1 and key not in self._duplicates_seen:
                self._duplicates_seen.add(key)
                new += 1
        return new

    def _reconcile_running(self, running: list[tuple[dict[str, Any], Execution]], now: datetime) -> int:
        """Look at each running attempt's pod: an end whose event was missed (no leader was
        watching) is recorded now; a pod gone is a failed attempt; a pod pending past the limit
        (image pull errors, unschedulable) fails its attempt. Returns how many were stuck."""
        stuck = 0
        for obj, ex in running:
            name = ex.pod or pod_name(ExecutionId(ex.execution_id), ex.attempt)
            try:
                pod = self._api.sanitize_for_serialization(self._core.read_namespaced_pod(name, ex.namespace))
            except ApiException as err:
                if err.status != 404:
                    raise
                self._results.observe_pod(_vanished(obj, ex, name), deleted=True)
                continue
            verdict = classify_pod(pod, now=now, pending_limit=self._pending_limit)
            if verdict.finished and verdict.reason != "StuckPending":
                self._results.observe_pod(pod)
            elif verdict.phase is PodPhase.FAILED:
                policy = retry_policy(obj["spec"].get("retry") or {})
                result = attempt_result(verdict, attempt=ex.attempt)
                try:
                    self._results.record(obj, finish(ex, result, policy=policy, now=now))
                except Conflict:
                    continue  # changed meanwhile: the next reconciliation looks again
                self._delete_pod(name, ex.namespace)
                stuck += 1
        return stuck


def _vanished(obj: Mapping[str, Any], ex: Execution, name: str) -> dict[str, Any]:
    """A stand-in for a pod that no longer exists, carrying the labels that identify its attempt."""
    return {
        "metadata": {
            "name": name,
            "namespace": ex.namespace,
            "labels": {LABEL_EXECUTION: obj["metadata"]["name"], LABEL_ATTEMPT: str(ex.attempt)},
        },
        "status": {"phase": "Unknown"},
    }
