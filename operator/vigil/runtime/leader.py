"""The leader's parts, built in named steps (`_firing`: bucket to pod; `_recording`: history and
log tails; `_workflow_engine`; `_leader_threads`: every thread by name) from what every part is
built with (`Parts`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from kubernetes import client

from vigil import heap, metrics
from vigil.core.dispatch import Capacity
from vigil.core.logtail import DEFAULT_LOG_POLICY, LogPolicy
from vigil.core.ports import Clock
from vigil.core.servertime import ServerBoundedClock
from vigil.core.trigger import Trigger
from vigil.core.workflowpass import Pass
from vigil.history.migrating import MigratingHistory
from vigil.kube.controllers.approvals import (
    TokenPublisher,
)
from vigil.kube.controllers.definitions import DefinitionController, definition_cache
from vigil.kube.controllers.dispatcher import Dispatcher
from vigil.kube.controllers.executioncontroller import ExecutionCaches, ExecutionController
from vigil.kube.controllers.historyflush import HistoryFlusher
from vigil.kube.controllers.jobcontroller import JobController
from vigil.kube.controllers.launcher import ExecutionLauncher, TaskSubmitter
from vigil.kube.controllers.logcapture import (
    KubePodLogs,
    LogCapture,
    OwnerOf,
    execution_owner,
    step_owner,
)
from vigil.kube.controllers.retention import Pruner
from vigil.kube.controllers.workflowapi import WorkflowApi, workflow_cache
from vigil.kube.controllers.workflows import WorkflowEngine
from vigil.kube.controllers.workflowtasks import WorkflowTasks
from vigil.kube.controllers.workflowttl import WorkflowTtl, setting_ttl
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.events import EventRecorder
from vigil.kube.kits.informer import Informer
from vigil.kube.kits.loops import every, trigger_loop, watch
from vigil.kube.lifecycle import (
    Threads,
)
from vigil.kube.stores.buckets import KubeBucketStore, bucket_cache
from vigil.kube.stores.executions import ExecutionStore
from vigil.kube.stores.jobs import KubeCatalogue, job_cache
from vigil.kube.stores.jobstatus import JobStatusWriter
from vigil.kube.stores.ledger import KubeLedger
from vigil.kube.stores.results import JobResults
from vigil.kube.wiring import bucket_store, build_watchdog, trigger_progress
from vigil.model.jobspec import InvalidJob, parse_spec
from vigil.settings import Settings

if TYPE_CHECKING:
    from vigil.queue.store import QueueStore
from vigil.runtime.volume import queue_watchdog, task_queue_threads, task_store

RETENTION_EVERY_SECONDS = 3600.0  # history is kept in whole days; hourly is plenty


def _flush_history(flusher: HistoryFlusher, *logs: LogCapture) -> None:
    flusher.flush()
    metrics.HISTORY_BUFFER.set(flusher.pending)
    metrics.LOG_TAILS_PENDING.set(sum(capture.pending() for capture in logs))


def _record_workflow_pass(done: Pass) -> None:
    metrics.record_workflow_pass(
        namespace=done.namespace,
        workflow=done.name,
        events=[str(record.event) for record in done.records],
        stuck=len(done.stuck),
    )


def _after_workflow_pass(publisher: TokenPublisher | None) -> Callable[[Pass], None]:
    def after(done: Pass) -> None:
        _record_workflow_pass(done)
        if publisher is not None:
            publisher.on_pass(done)

    return after


@dataclass(frozen=True)
class Parts:
    """What every part of the leader is built with."""

    api: client.ApiClient
    settings: Settings
    me: str
    clock: ServerBoundedClock
    executions: ExecutionStore
    history: MigratingHistory
    events: EventRecorder


@dataclass(frozen=True)
class _Leader:
    """The leader's threads by name, and what its handover flushes (the job statuses) and wakes
    (the dispatcher, which may be waiting for work)."""

    threads: Threads
    flush: Callable[[float], None]
    wake: Callable[[], None]


@dataclass(frozen=True)
class _Firing:
    """The declarative tier's path from a bucket entry to a pod: the caches it reads, the
    trigger, the dispatcher, the Execution controller and the jobs' status writer; and the
    volume tier's store that `task:` jobs and workflows' task steps submit to (None: off)."""

    buckets: Informer
    store: KubeBucketStore
    jobs: Informer
    catalogue: KubeCatalogue
    caches: ExecutionCaches
    dispatcher: Dispatcher
    writer: JobStatusWriter
    controller: ExecutionController
    trigger: Trigger
    tasks: QueueStore | None


@dataclass(frozen=True)
class _Recording:
    """What is kept of the executions: the history flusher, the log tails of executions and of
    workflow steps, and the retention that prunes what both have written."""

    flusher: HistoryFlusher
    logs: LogCapture
    step_logs: LogCapture
    pruner: Pruner


def build_leader(parts: Parts, *, publisher: TokenPublisher | None, stop: threading.Event) -> _Leader:
    """Build the leader's parts, connect them to the caches, and name the threads that run them."""
    firing = _firing(parts)
    recording = _recording(parts, firing)
    caches, controller = firing.caches, firing.controller
    caches.executions.add_handler(controller.execution_changed)
    caches.executions.add_handler(recording.flusher.changed)
    caches.pods.add_handler(recording.logs.pod_changed)  # first: an ended pod is owed its tail before it is recorded
    caches.pods.add_handler(controller.pod_changed)
    workflow_watch = workflow_cache(parts.api)
    engine = _workflow_engine(parts, firing, cache=workflow_watch, publisher=publisher)
    caches.workflow_pods.add_handler(recording.step_logs.pod_changed)
    caches.workflow_pods.add_handler(firing.dispatcher.workflow_pod_changed)
    caches.workflow_pods.add_handler(engine.pod_changed)
    threads = _leader_threads(parts, firing, recording, engine=engine, workflow_watch=workflow_watch, stop=stop)
    return _Leader(threads=threads, flush=firing.writer.flush, wake=firing.dispatcher.notify)


def _firing(parts: Parts) -> _Firing:
    api, settings, clock, executions, events = parts.api, parts.settings, parts.clock, parts.executions, parts.events
    buckets = bucket_cache(api, namespace=settings.namespace)
    store = bucket_store(api, settings, cache=buckets)
    jobs = job_cache(api)
    catalogue = KubeCatalogue(api, cache=jobs, queue_enabled=bool(settings.queue.dsn))
    caches = ExecutionCaches.build(api, executions)
    dispatcher = Dispatcher(
        api,
        store=executions,
        pods=caches.pods,
        started=caches.started,
        catalogue=catalogue,
        clock=clock,
        capacity=Capacity(
            max_running=settings.dispatch.max_running,
            reserved_high=settings.dispatch.reserved_high,
            per_namespace_max=settings.dispatch.per_namespace_max,
        ),
        workflow_pods=caches.workflow_pods,
    )
    writer = JobStatusWriter(api, catalogue=catalogue, hold=dispatcher.starting)
    results = JobResults(
        store=executions, events=events, clock=clock, on_transition=metrics.record_transition, writer=writer,
    )  # fmt: skip
    controller = ExecutionController(
        store=executions,
        pods=caches.pods,
        started=caches.started,
        results=results,
        core=CoreApi(api),
        clock=clock,
        wake_dispatcher=dispatcher.notify,
        running_after=timedelta(seconds=settings.dispatch.running_after_seconds),
        pending_limit=timedelta(seconds=settings.dispatch.pending_limit_seconds),
        image_pull_limit=timedelta(seconds=settings.dispatch.image_pull_limit_seconds),
    )
    tasks_store = task_store(settings)
    trigger = Trigger(
        store=store,
        catalogue=catalogue,
        launcher=ExecutionLauncher(
            store=executions,
            catalogue=catalogue,
            clock=clock,
            results=results,
            pods=CoreApi(api),
            on_ready=dispatcher.notify,
            as_started=dispatcher.as_started,
            tasks=None if tasks_store is None else TaskSubmitter(tasks_store, clock=clock),
        ),
        ledger=KubeLedger(catalogue=catalogue, events=events, writer=writer),
        clock=clock,
        workers=settings.trigger.workers,
        on_progress=trigger_progress(api, settings, identity=parts.me).publish,
    )
    return _Firing(
        buckets=buckets, store=store, jobs=jobs, catalogue=catalogue, caches=caches, dispatcher=dispatcher,
        writer=writer, controller=controller, trigger=trigger, tasks=tasks_store,
    )  # fmt: skip


def _recording(parts: Parts, firing: _Firing) -> _Recording:
    api, settings, clock, executions, history = parts.api, parts.settings, parts.clock, parts.executions, parts.history
    caches = firing.caches
    flusher = HistoryFlusher(store=executions, sink=history, on_written=lambda *job: pruner.want(*job))
    logs = log_capture(
        api, settings, owner_of=execution_owner(executions.cached, job_log_policy(firing.catalogue)), history=history,
        clock=clock, synced=caches.pods.synced.is_set, on_settled=lambda *job: pruner.want(*job),
    )  # fmt: skip
    step_logs = log_capture(  # no gate: a step's pod stays until its workflow's ttlAfterFinished
        api, settings, owner_of=step_owner, history=history, clock=clock, synced=caches.workflow_pods.synced.is_set,
        workers=1,
    )  # fmt: skip
    pruner = Pruner(
        api, store=executions, catalogue=firing.catalogue, pods=caches.pods,
        written=lambda obj: flusher.written(obj) and logs.settled(obj),
    )  # fmt: skip
    return _Recording(flusher=flusher, logs=logs, step_logs=step_logs, pruner=pruner)


def _workflow_engine(
    parts: Parts, firing: _Firing, *, cache: Informer, publisher: TokenPublisher | None
) -> WorkflowEngine:
    settings = parts.settings
    return WorkflowEngine(
        WorkflowApi(parts.api, pod_cache=firing.caches.workflow_pods),
        clock=parts.clock,
        events=parts.events,
        cache=cache,
        history=parts.history,
        mirror_in_background=True,
        workers=settings.workflows.workers,
        on_pass=_after_workflow_pass(publisher),
        ttl=WorkflowTtl(client.CustomObjectsApi(parts.api), default=setting_ttl(settings.workflows.ttl_after_finished)),
        admit=firing.dispatcher.want,
        job_status=firing.writer,
        tasks=None if firing.tasks is None else WorkflowTasks(firing.tasks, clock=parts.clock),
    )


def _leader_threads(
    parts: Parts,
    firing: _Firing,
    recording: _Recording,
    *,
    engine: WorkflowEngine,
    workflow_watch: Informer,
    stop: threading.Event,
) -> Threads:
    """Every thread the leader runs, by name: the caches (named `-cache`: a handover need not wait
    for them), the controllers' queues, and the periodic passes. The job and definition
    controllers, which no other part calls, are built here."""
    api, settings, clock, events, history = parts.api, parts.settings, parts.clock, parts.events, parts.history
    jobs, buckets, caches, writer = firing.jobs, firing.buckets, firing.caches, firing.writer
    dispatcher, trigger, controller = firing.dispatcher, firing.trigger, firing.controller
    flusher, logs, step_logs = recording.flusher, recording.logs, recording.step_logs
    job_controller = JobController(
        jobs=jobs, writer=writer, store=firing.store, events=events, clock=clock,
        queue_enabled=bool(settings.queue.dsn),
    )  # fmt: skip
    definitions = definition_cache(api)
    definition_controller = DefinitionController(api, definitions=definitions, events=events, clock=clock)
    threads: list[tuple[str, Callable[[], None]]] = [
        ("jobs-cache", lambda: jobs.run(stop)),
        ("buckets-cache", lambda: buckets.run(stop)),
        ("job-controller", lambda: job_controller.queue.run(stop)),
        ("executions-cache", lambda: caches.executions.run(stop)),
        ("pods-cache", lambda: caches.pods.run(stop)),
        ("workflow-pods-cache", lambda: caches.workflow_pods.run(stop)),
        ("execution-controller", lambda: controller.queue.run(stop)),
        ("job-status", lambda: writer.queue.run(stop)),
        ("trigger", lambda: trigger_loop(trigger, settings, stop, on_tick=metrics.record_tick)),
        ("dispatcher", lambda: caches.when_synced(
            stop, lambda: dispatcher.run(stop, interval=1.0, on_report=metrics.record_dispatch))),
        ("history", lambda: every(stop, 2.0, "history flush", lambda: _flush_history(flusher, logs, step_logs))),
        ("pruner", lambda: recording.pruner.queue.run(stop)),
        ("log-capture", lambda: logs.run(stop)),
        ("step-log-capture", lambda: step_logs.run(stop)),
        ("workflows-cache", lambda: workflow_watch.run(stop)),
        ("definitions-cache", lambda: definitions.run(stop)),
        ("definitions", lambda: definition_controller.queue.run(stop)),
        ("workflows", lambda: caches.when_synced(stop, lambda: engine.queue.run(stop))),
        ("workflow-history", lambda: engine.history.run(stop)),
        ("workflow-resync", lambda: every(stop, settings.workflows.rescan_seconds, "workflow resync", workflow_watch.resync)),
        ("retention", lambda: every(stop, RETENTION_EVERY_SECONDS, "history retention", lambda: history.expire(clock))),
        ("heap", lambda: caches.when_synced(stop, lambda: every(stop, heap.TRIM_EVERY_SECONDS, "heap trim", heap.trim))),
    ]
    threads += task_queue_threads(api, settings, events=events, clock=clock, stop=stop)
    if settings.watchdog.enabled and settings.watchdog.mode == "operator":
        watchdog = build_watchdog(
            api, settings, executions=parts.executions, events=events, clock=clock, store=firing.store,
            gauges=metrics.WatchdogGauges, jobs=jobs, writer=writer,
        )  # fmt: skip
        volume = queue_watchdog(settings, clock)
        threads.append(("watchdog", lambda: watch(watchdog, settings, stop, volume=volume)))
    return threads


def job_log_policy(catalogue: KubeCatalogue) -> Callable[[str, str], LogPolicy | None]:
    """A job's `spec.logs`, from the caches only: this runs on the pods cache's thread, which must
    never wait on a request. A job not cached yet (a new leader's cache still filling) gets the
    default."""

    def policy_of(namespace: str, job: str) -> LogPolicy | None:
        spec = catalogue.cached_spec(namespace, job)
        if spec is not None:
            return spec.logs
        obj = catalogue.cached(namespace, job)
        try:
            return parse_spec(obj).logs if obj is not None else DEFAULT_LOG_POLICY
        except InvalidJob:
            return DEFAULT_LOG_POLICY

    return policy_of


def log_capture(
    api: client.ApiClient,
    settings: Settings,
    *,
    owner_of: OwnerOf,
    history: MigratingHistory,
    clock: Clock,
    synced: Callable[[], bool],
    on_settled: Callable[[str, str, str], object] | None = None,
    workers: int = 2,
) -> LogCapture:
    """Storing attempts' log tails in the history database as their pods end (vigil.kube.controllers.logcapture)."""
    return LogCapture(
        reader=KubePodLogs(CoreApi(api), clock=clock), sink=history, owner_of=owner_of, clock=clock,
        tail_bytes=settings.history.log_tail_bytes, workers=workers,
        settle_within=timedelta(seconds=settings.history.log_settle_seconds), synced=synced, on_settled=on_settled,
        on_lost=metrics.LOG_TAILS_LOST.inc,
    )  # fmt: skip
