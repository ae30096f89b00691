"""The leader's dispatcher: Ready executions started within capacity, as pods.

Each pass reads what is in flight from the watch-fed caches (never a list from
the API server), asks `vigil.core.dispatch.choose` which Ready ones may start —
global cap, reserved high-priority slots, per-namespace caps, round-robin across
namespaces — and hands their pods to a few create workers (named from execution id and
attempt, so a repeat is a 409), without waiting for them: what becomes Ready meanwhile is
chosen by the next pass and waits only for a free worker. Creating the pod is the start: no
status is written for it; until its create ends an execution holds its slot.
An execution whose current attempt has a pod (in the cache, or just created by
this process) occupies a slot; the execution controller records what becomes of
the pod, and records Running only for a pod still running after a while.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.dispatch import Candidate, Capacity, Priority, Running, choose, oldest_ready_age
from vigil.core.executions import Execution, Phase, as_candidate, running_counts
from vigil.core.ids import ExecutionId
from vigil.core.ports import Clock
from vigil.core.timeparse import parse_rfc3339
from vigil.kube.controllers.executionpods import PodFactory
from vigil.kube.controllers.workflowpods import LIVE
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.informer import Informer
from vigil.kube.kits.loops import woken_every
from vigil.kube.stores.executions import ExecutionStore, Readings, execution_from_object, phase_of
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.pods import BY_EXECUTION, live
from vigil.kube.stores.started import Key, Mark, Started, as_started, attempt_pod
from vigil.model.jobspec import InvalidJob
from vigil.model.names import LABEL_PRIORITY

log = logging.getLogger(__name__)

#: Pod creates under way at once (the create workers). An API server under load answers a pod
#: create in 0.15-0.4 s, so in a 1,000-job burst 8 made about 30 pods/s (pod observed p99 25-39 s
#: over four runs) and 24 more (19.5 and 33.5 s over two); the trigger's own workers
#: (`trigger.workers`, 32) create the Executions beside them.
START_CONCURRENCY = 24
MIN_PASS_GAP = 0.05  # seconds between two passes at least: a burst of wake-ups becomes one pass
PASS_COST_SPACING = 3.0  # and at least this many times the last pass's own duration

@dataclasses.dataclass(frozen=True)
class PodRequest:
    """A workflow step's pod waiting for a slot."""

    body: dict[str, Any]
    priority: Priority
    since: datetime


@dataclasses.dataclass
class DispatchReport:
    started: int = 0
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
        pods: Informer,
        started: Started,
        catalogue: KubeCatalogue,
        clock: Clock,
        capacity: Capacity,
        workflow_pods: Informer | None = None,
    ) -> None:
        self._core = CoreApi(api)
        self._workflow_pods = workflow_pods
        self._requests_lock = threading.Lock()
        self._requests: dict[Key, dict[Key, PodRequest]] = {}  # workflow -> pod -> request
        self._store = store
        self._pods = pods
        self._started = started
        self._catalogue = catalogue
        self._clock = clock
        self._capacity = capacity
        self._factory = PodFactory()
        self._wake = threading.Event()
        #: Pod creates go out on these workers while the passes go on: a pass hands what it chose
        #: to them and returns, so what becomes Ready meanwhile waits for a free worker, not for
        #: the slowest create of the pass before (`_creating` holds what is handed and not done).
        self._pool = ThreadPoolExecutor(max_workers=START_CONCURRENCY, thread_name_prefix="dispatch-start")
        self._creating_lock = threading.Lock()
        self._creating: dict[Key, Priority] = {}
        self._duplicates_seen: set[tuple[str, str, int]] = set()
        self._readings = Readings()  # the passes' reading of the executions in flight

    def notify(self) -> None:
        """Something became Ready or a slot freed: run a pass now rather than at the next interval."""
        self._wake.set()

    def starting(self) -> bool:
        """Whether pods chosen to start are still being created (what the job status writer
        gives way to)."""
        with self._creating_lock:
            return bool(self._creating)

    def run(self, stop: threading.Event, *, interval: float, on_report: Any = None) -> None:
        """A pass every `interval` seconds, or soon after a `notify` (`vigil.kube.kits.loops.woken_every`),
        until `stop`; then the creates under way end and no new one starts."""

        def dispatch_pass() -> None:
            report = self.dispatch()
            if on_report is not None:
                on_report(report)

        woken_every(stop, interval, "dispatch pass", dispatch_pass, wake=self._wake, spacing=_pass_gap)
        self._pool.shutdown(wait=True, cancel_futures=True)  # the creates under way end; no new one starts

    def want(self, workflow: Key, bodies: list[dict[str, Any]], priority: str) -> None:
        """The step pods `workflow` wants started now (replacing what it wanted before)."""
        now = self._clock.now()
        with self._requests_lock:
            before = self._requests.get(workflow, {})
            wanted = {}
            for body in bodies:
                key = (body["metadata"]["namespace"], body["metadata"]["name"])
                old = before.get(key)
                wanted[key] = PodRequest(body=body, priority=Priority(priority), since=old.since if old else now)
            if wanted:
                self._requests[workflow] = wanted
            else:
                self._requests.pop(workflow, None)
        if bodies:
            self.notify()

    def workflow_pod_changed(self, key: Key, pod: dict[str, Any], deleted: bool) -> None:
        """The workflow pod cache's handler: a pod seen needs no mark; an ended one frees a slot."""
        self._started.drop(key)
        if deleted or not live(pod):
            self.notify()

    def as_started(self, ex: Execution) -> Execution:
        return as_started(ex, pods=self._pods, started=self._started)

    def occupies(self, ex: Execution) -> bool:
        """Running, or Ready with its attempt's pod already made: it holds a slot."""
        if ex.phase is Phase.RUNNING:
            return True
        if ex.phase is not Phase.READY:
            return False
        mark = self._started.get((ex.namespace, ex.execution_id))
        return (mark is not None and mark.attempt == ex.attempt) or attempt_pod(self._pods, ex) is not None

    def dispatch(self) -> DispatchReport:
        now = self._clock.now()
        report = DispatchReport()
        flight = {
            (ex.namespace, o["metadata"]["name"]): (o, ex)
            for o, ex in self._readings.read(self._store.in_phase(Phase.READY, Phase.RUNNING))
        }
        creating = self._creating_now()
        busy: list[Execution] = []
        ready = []
        for key, (_, ex) in flight.items():
            if key in creating or self.occupies(ex):
                busy.append(dataclasses.replace(ex, phase=Phase.RUNNING) if ex.phase is Phase.READY else ex)
            else:
                ready.append(as_candidate(ex))
        requests = self._waiting_requests()
        ready += [
            Candidate(execution_id=ExecutionId(key[1]), namespace=key[0], priority=r.priority, ready_since=r.since)
            for key, r in requests.items()
        ]
        report.ready, report.oldest_ready_age = len(ready), oldest_ready_age(ready, now)
        running = _plus(running_counts(busy), self._workflow_running())
        report.running = running.total
        chosen = choose(ready, running, self._capacity)
        executions = [flight[(c.namespace, c.execution_id)] for c in chosen if (c.namespace, c.execution_id) in flight]
        pods = [requests[(c.namespace, c.execution_id)] for c in chosen if (c.namespace, c.execution_id) in requests]
        report.started = self._hand_out(executions, pods, now)
        report.duplicates = self._count_duplicates(busy)
        return report

    def _waiting_requests(self) -> dict[Key, PodRequest]:
        """Requested step pods not made yet (neither in the cache nor just created here)."""
        with self._requests_lock:
            every = {key: r for wanted in self._requests.values() for key, r in wanted.items()}
        creating = self._creating_now()
        return {
            key: r
            for key, r in every.items()
            if self._started.get(key) is None
            and key not in creating
            and (self._workflow_pods is None or self._workflow_pods.get(*key) is None)
        }

    def _workflow_running(self) -> list[tuple[str, Priority]]:
        """The step pods holding slots: live in the cache, or being or just created here and not
        seen yet."""
        if self._workflow_pods is None:
            return []
        held = {
            (p["metadata"]["namespace"], p["metadata"]["name"]): Priority(
                (p["metadata"].get("labels") or {}).get(LABEL_PRIORITY) or "normal"
            )
            for p in self._workflow_pods.by_index(LIVE, LIVE)  # the finished ones are never read
        }
        creating = self._creating_now()
        with self._requests_lock:
            for wanted in self._requests.values():
                for key, r in wanted.items():
                    made = key in creating or self._started.get(key) is not None
                    if key not in held and made and self._workflow_pods.get(*key) is None:
                        held[key] = r.priority
        return [(key[0], priority) for key, priority in held.items()]

    def _creating_now(self) -> dict[Key, Priority]:
        with self._creating_lock:
            return dict(self._creating)

    def _hand_out(
        self, executions: list[tuple[dict[str, Any], Execution]], requests: list[PodRequest], now: datetime
    ) -> int:
        """Hand the chosen pods, executions' and workflow steps' alike, to the create workers;
        how many. Until its create ends each holds its slot (`_creating`), and its end wakes the
        next pass (a refused one leaves its slot to another).

        A first attempt uses the job as the trigger read it when it fired; a retry reads it
        again (its template may have been fixed since). Each job is read at most once a pass.
        """
        fresh = {(ex.namespace, obj["spec"]["job"]["name"]) for obj, ex in executions if ex.attempt > 1}
        names = {(ex.namespace, obj["spec"]["job"]["name"]) for obj, ex in executions}
        jobs = {
            key: (None if key in fresh else self._catalogue.cached(*key)) or self._catalogue.fetch(*key)
            for key in names
        }
        starts: list[tuple[Key, Priority, Callable[[], bool]]] = [
            (
                (ex.namespace, obj["metadata"]["name"]),
                ex.priority,
                functools.partial(self._start, obj, ex, now, job=jobs[(ex.namespace, obj["spec"]["job"]["name"])]),
            )
            for obj, ex in executions
        ]
        starts += [
            ((r.body["metadata"]["namespace"], r.body["metadata"]["name"]), r.priority,
             functools.partial(self._start_request, r, now))
            for r in requests
        ]  # fmt: skip
        with self._creating_lock:
            self._creating.update((key, priority) for key, priority, _ in starts)
        for key, _, start_one in starts:
            self._pool.submit(self._create, key, start_one)
        return len(starts)

    def _create(self, key: Key, start_one: Callable[[], bool]) -> None:
        try:
            start_one()
        except Exception:
            log.exception("pod create for %s/%s failed; a later pass tries again", *key)
        finally:
            with self._creating_lock:
                self._creating.pop(key, None)
            self.notify()

    def _still_ready(self, obj: Mapping[str, Any], ex: Execution) -> bool:
        """Whether the execution is still Ready at the attempt it was chosen at, as the cache has it now."""
        current = self._store.cached(ex.namespace, obj["metadata"]["name"])
        if current is None or phase_of(current) != str(Phase.READY):
            return False
        return execution_from_object(current).attempt == ex.attempt

    def _start_request(self, request: PodRequest, now: datetime) -> bool:
        """Create a workflow step's pod (one that exists already is adopted: its name is its
        step's execution id and attempt), unless its workflow stopped wanting it meanwhile."""
        body = request.body
        body["metadata"].setdefault("labels", {})[LABEL_PRIORITY] = str(request.priority)
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        with self._requests_lock:
            if not any((namespace, name) in wanted for wanted in self._requests.values()):
                return False
        try:
            self._core.create_pod(namespace, body)
        except ApiException as err:
            if err.status != 409:
                log.warning("workflow pod %s/%s not created: %s %s", namespace, name, err.status, err.reason)
                return False
        self._started.mark((namespace, name), Mark(attempt=0, pod=name, at=now))
        return True

    def _start(self, obj: Mapping[str, Any], ex: Execution, now: datetime, *, job: dict[str, Any] | None) -> bool:
        if not self._still_ready(obj, ex):
            return False  # cancelled, replaced or gone while it waited for a create worker
        spec_obj = obj["spec"]
        if job is None or job["metadata"]["uid"] != spec_obj["job"]["uid"]:
            return False  # the job is gone; garbage collection removes its executions
        try:
            spec = self._catalogue.spec_of(job)  # parsed once, by the trigger, unless the job changed since
            pod = self._factory.pod_for(
                job=job,
                spec=spec,
                execution_id=ex.execution_id,
                attempt=ex.attempt,
                scheduled_for=ex.scheduled_for,
                period_start=parse_rfc3339(spec_obj["periodStart"]),
                period_end=parse_rfc3339(spec_obj["periodEnd"]),
                execution=obj,
            )
        except (InvalidJob, ValueError) as err:
            log.warning("execution %s/%s cannot start: %s", ex.namespace, ex.execution_id, err)
            return False
        name = pod["metadata"]["name"]
        try:
            self._core.create_pod(ex.namespace, pod)
        except ApiException as err:
            if err.status != 409:
                # Refused (its namespace is being deleted, a quota, a webhook): this one waits for
                # a later pass, and the rest of this pass still starts.
                log.warning("execution %s/%s: pod %s not created: %s %s", ex.namespace, ex.execution_id,
                            name, err.status, err.reason)  # fmt: skip
                return False
        self._started.mark((ex.namespace, obj["metadata"]["name"]), Mark(attempt=ex.attempt, pod=name, at=now))
        log.info("started %s/%s attempt %d as pod %s", ex.namespace, ex.execution_id, ex.attempt, name)
        return True

    def _count_duplicates(self, busy: list[Execution]) -> int:
        """Executions with more than one live pod (an old attempt still running beside a new one)."""
        new = 0
        for ex in busy:
            pods = self._pods.by_index(BY_EXECUTION, f"{ex.namespace}/{ex.execution_id}")
            key = (ex.namespace, ex.execution_id, ex.attempt)
            if len([p for p in pods if live(p)]) > 1 and key not in self._duplicates_seen:
                self._duplicates_seen.add(key)
                new += 1
        return new



def _pass_gap(took: float) -> float:
    """Every create's end wakes a pass: while thousands are in flight, passes (which read them
    all) are spaced by their own cost, so they take at most a quarter of the time."""
    return max(MIN_PASS_GAP, PASS_COST_SPACING * took)


def _plus(running: Running, pods: list[tuple[str, Priority]]) -> Running:
    """Executions' slots plus step pods' slots."""
    by_namespace = dict(running.by_namespace)
    for namespace, _ in pods:
        by_namespace[namespace] = by_namespace.get(namespace, 0) + 1
    return Running(
        total=running.total + len(pods),
        high=running.high + sum(priority is Priority.HIGH for _, priority in pods),
        by_namespace=by_namespace,
    )
