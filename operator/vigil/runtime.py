"""The composition root: the one place that builds every collaborator and wires them.

Only wiring lives here: which adapter gets which collaborator, which thread runs
which pass, what each report is recorded as. The passes themselves are in
`vigil.kube.loops`, the factories the CLI shares in `vigil.kube.wiring`, the
lazily migrated history database in `vigil.history.migrating`, and what a
report becomes as metrics in `vigil.metrics`.

`run(settings)` starts the health/metrics endpoints, then campaigns for the
leader Lease. Standbys stay warm (imported, connected, serving health) and wait.
The leader builds its parts in named steps (`_firing`: bucket to pod; `_recording`:
history and log tails; `_workflow_engine`; `_leader_threads`: every thread by name),
starts them, and waits for SIGTERM; if it ever loses the Lease it exits at once, and
its Deployment restarts it as a standby. What happens over the process's life — the
wait for the Lease, the handover, the exit on a lost Lease, a store's migration waited
for with backoff — is `vigil.kube.lifecycle`'s.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from kubernetes import client, config
from prometheus_client import start_http_server

from vigil import heap, logs, metrics
from vigil.api import ApiServer, ApprovalCallback, Guard, JobStore, Limits, QueueApi, TlsFiles
from vigil.api.console import ConsoleSources, ConsoleWrites
from vigil.core.access import Access, CachedAuthenticator, CachedAuthorizer, TtlCache
from vigil.core.dispatch import Capacity
from vigil.core.logtail import DEFAULT_LOG_POLICY, LogPolicy
from vigil.core.ports import Clock
from vigil.core.queue import QuotaLimits
from vigil.core.servertime import ServerBoundedClock
from vigil.core.trigger import Trigger
from vigil.core.workflow import Record
from vigil.core.workflowpass import Pass
from vigil.history.migrating import MigratingHistory
from vigil.kube.accessreview import AccessReviews, TokenReviews
from vigil.kube.apiclient import RequestPolicy, build_client
from vigil.kube.approvals import (
    SigningKey,
    TokenPublisher,
    WebhookNotifier,
    approval_outbox,
    approver_review,
)
from vigil.kube.buckets import WRITE_CONCURRENCY, KubeBucketStore, bucket_cache
from vigil.kube.consolereads import KubeConsoleReads
from vigil.kube.coreapi import CoreApi
from vigil.kube.definitions import DefinitionController, definition_cache
from vigil.kube.dispatcher import START_CONCURRENCY, Dispatcher
from vigil.kube.events import EventRecorder
from vigil.kube.executioncontroller import ExecutionCaches, ExecutionController
from vigil.kube.executions import ExecutionStore
from vigil.kube.historyflush import HistoryFlusher
from vigil.kube.informer import Informer
from vigil.kube.jobcontroller import JobController
from vigil.kube.jobs import KubeCatalogue, job_cache
from vigil.kube.jobstatus import JobStatusWriter
from vigil.kube.launcher import ExecutionLauncher, TaskSubmitter
from vigil.kube.leasing import LeaderElector, LeaseConfig
from vigil.kube.ledger import KubeLedger
from vigil.kube.lifecycle import (
    HANDOVER_JOIN_SECONDS,
    Threads,
    exit_on_lost_leadership,
    lead_until_stopped,
    retry_until_ready,
    stand_down,
    start_threads,
    stop_on_sigterm,
    wait_until_leader,
)
from vigil.kube.logcapture import KubePodLogs, LogCapture, OwnerOf, execution_owner, step_owner
from vigil.kube.loops import every, trigger_loop, watch
from vigil.kube.results import JobResults
from vigil.kube.retention import Pruner
from vigil.kube.shardleases import ShardLeases
from vigil.kube.taskqueues import TaskQueueController, TaskQueueStatusWriter, taskqueue_cache
from vigil.kube.tenantbindings import TaskQueueTenants
from vigil.kube.wiring import SystemClock, bucket_store, build_watchdog, trigger_progress
from vigil.kube.workflowapi import WorkflowApi, workflow_cache
from vigil.kube.workflows import WorkflowEngine
from vigil.kube.workflowtasks import WorkflowTasks
from vigil.kube.workflowttl import WorkflowTtl, setting_ttl
from vigil.model.durations import parse_duration
from vigil.model.jobspec import InvalidJob, parse_spec
from vigil.probes import serve_probes
from vigil.settings import Http, NamespaceQuota, QueueQuota, Settings

if TYPE_CHECKING:
    from vigil.kube.queuecredentials import QueueCredentials
    from vigil.queue.store import QueueStore
    from vigil.queue.watchdog import QueueWatchdog

log = logging.getLogger("vigil")

RETENTION_EVERY_SECONDS = 3600.0  # history is kept in whole days; hourly is plenty

#: Makes this process's wall clock: the composition root's clocks come from it, and it hands them to
#: every part. A test's launcher may put another here before `main` runs (tests/faults/stepped_operator.py).
wall_clock: Callable[[], Clock] = SystemClock


#: Requesters that may each hold a connection at once beside the trigger's workers, the pod create
#: workers and the bucket writer's: the controllers' and status writers' workers, the watchdog, the
#: history flusher, and every informer's watch (each holds one for minutes). A request finding the
#: pool full gets a connection of its own, closed after it: a TLS handshake per request, and under
#: a burst there were dozens of them.
OTHER_REQUESTERS = 32
ELECTION_CONNECTIONS = 2  # the elector's own pool: renewals never queue behind other requests


def _kube_configuration() -> client.Configuration:
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    return configuration


def lease_config(settings: Settings, *, lease_name: str, me: str) -> LeaseConfig:
    election = settings.leader_election
    return LeaseConfig(
        namespace=settings.namespace,
        name=lease_name,
        identity=me,
        lease_duration=election.lease_duration_seconds,
        renew_period=election.renew_period_seconds,
    )


def api_connections(settings: Settings) -> int:
    """Connections the operator's pool keeps: one for each requester that may be waiting on the
    API server at the same time."""
    return settings.trigger.workers + START_CONCURRENCY + WRITE_CONCURRENCY + OTHER_REQUESTERS


def api_client(lease: LeaseConfig | None = None, *, connections: int = OTHER_REQUESTERS) -> client.ApiClient:
    """The operator's client: every request bounded by the lease's request timeout (the
    defaults' without one), 429s waited out up to the renew deadline and counted."""
    lease = lease or LeaseConfig(namespace="", name="", identity="")
    configuration = _kube_configuration()
    configuration.connection_pool_maxsize = connections
    policy = RequestPolicy(timeout_seconds=lease.request_timeout, retry_after_cap_seconds=lease.renew_deadline)
    return build_client(configuration, policy, on_throttled=metrics.API_THROTTLED.labels(client="operator").inc)


def election_client(lease: LeaseConfig) -> client.ApiClient:
    """The elector's own client and pool (its requests pass their own timeouts): one 429 waited
    out, for at most half of what is left of the deadline after a renew period."""
    configuration = _kube_configuration()
    configuration.connection_pool_maxsize = ELECTION_CONNECTIONS
    policy = RequestPolicy(
        timeout_seconds=lease.request_timeout,
        retry_after_cap_seconds=lease.election_retry_after_cap,
        throttle_retries=1,
    )
    return build_client(configuration, policy, on_throttled=metrics.API_THROTTLED.labels(client="election").inc)


def identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def _serve(
    api: client.ApiClient,
    settings: Settings,
    elector: LeaderElector,
    executions: ExecutionStore,
    history: MigratingHistory,
    approvals: ApprovalCallback | None,
    *,
    lease_name: str,
    console_writes: ConsoleWrites | None = None,
) -> None:
    if settings.http.health_port:
        serve_probes(settings.http.health_port)
    if settings.http.metrics_port:
        start_http_server(settings.http.metrics_port, registry=metrics.REGISTRY)
    if settings.http.api_port:
        http = settings.http
        guard = build_guard(api, settings, lease_name=lease_name)
        store = queue_store(settings)
        ApiServer(
            leader=lambda: elector.holder,
            find_execution=executions.find,
            get_execution=executions.get,
            execution_namespaces=executions.namespaces_of,
            timeline=lambda execution_id: history.history.timeline(execution_id),
            job_executions=lambda namespace, job, limit, after: history.history.job_executions(
                namespace, job, limit=limit, after=after
            ),
            workflow_history=lambda namespace, workflow, limit, after: history.history.workflow_history(
                namespace, workflow, limit=limit, after=after
            ),
            log_tail=lambda namespace, execution_id, attempt: history.history.log_tail(
                namespace, execution_id, attempt=attempt
            ),
            approvals=approvals,
            guard=guard,
            queue_api=QueueApi(
                store,
                clock=wall_clock(),
                authenticator=guard.authenticator,
                authorizer=guard.authorizer,
                tenants=TaskQueueTenants(
                    api,
                    timeout_seconds=http.request_timeout_seconds / 3,
                    cache=TtlCache(ttl_seconds=http.auth_cache_seconds, entries=AUTH_CACHE_ENTRIES, ticks=time.monotonic),
                ),
                high_priority_namespaces=_namespaces(settings.queue.high_priority_namespaces),
            ),
            console=ConsoleSources(
                reads=KubeConsoleReads(api, executions),
                writes=console_writes,
                job_executions=lambda namespace, job, limit, after: history.history.job_executions(
                    namespace, job, limit=limit, after=after
                ),
                log_tail=lambda namespace, execution_id, attempt: history.history.log_tail(
                    namespace, execution_id, attempt=attempt
                ),
                timeline=lambda execution_id: history.history.timeline(execution_id),
            ),
        ).serve(
            http.api_port,
            api_limits(http),
            tls=TlsFiles(http.tls.cert_file, http.tls.key_file) if http.tls.cert_file else None,
        )


def api_limits(http: Http) -> Limits:
    """The API transport's bounds from the chart's `config.http`."""
    return Limits(
        workers=http.workers,
        queued=4 * http.workers,
        deadline_seconds=http.request_timeout_seconds,
        read_timeout_seconds=http.read_timeout_seconds,
        idle_timeout_seconds=http.idle_timeout_seconds,
        connections_per_peer=http.connections_per_peer,
    )


def _namespaces(names: list[str] | None) -> frozenset[str] | None:
    return None if names is None else frozenset(names)


def queue_store(settings: Settings) -> JobStore | None:
    """The HTTP API's volume tier store (None: `queue.dsn` is empty, the tier is off): acting as each
    namespace's API role (vigil.queue.apistore) when tenant roles are on and the API has its
    password, else the owner's QueueStore. Imported only then: psycopg is the `postgres` extra's. It migrates at its first use, not at start, so
    the operator starts while the database is down and the routes answer 503 meanwhile."""
    if not settings.queue.dsn:
        return None
    queue = settings.queue
    if queue.tenant_roles.enabled and queue.api_password:
        from vigil.queue.apistore import (
            ApiQueueStore,  # its own login role, a namespace's role per request
        )

        return ApiQueueStore(queue.dsn, password=queue.api_password, migrate_first=True, shards=queue.shards)
    from vigil.queue.store import QueueStore

    log.warning(
        "the queue API reaches the store as the queue DSN's owner: give it its own role with "
        "queue.tenantRoles.enabled and VIGIL_QUEUE_API_PASSWORD (the chart does)"
    )
    return QueueStore(queue.dsn, migrate_first=True, shards=queue.shards)


AUTH_CACHE_ENTRIES = 4096  # distinct tokens and decisions remembered; the oldest go first


def build_guard(api: client.ApiClient, settings: Settings, *, lease_name: str) -> Guard:
    """TokenReviews and SubjectAccessReviews through the API server, each cached briefly;
    /leader names the holder of `lease_name`, so reading it needs `get` on that Lease."""
    ttl = settings.http.auth_cache_seconds
    review_timeout = settings.http.request_timeout_seconds / 3
    return Guard(
        authenticator=CachedAuthenticator(
            TokenReviews(api, timeout_seconds=review_timeout, audiences=tuple(settings.http.token_audiences)),
            TtlCache(ttl_seconds=ttl, entries=AUTH_CACHE_ENTRIES, ticks=time.monotonic),
        ),
        authorizer=CachedAuthorizer(
            AccessReviews(api, timeout_seconds=review_timeout),
            TtlCache(ttl_seconds=ttl, entries=AUTH_CACHE_ENTRIES, ticks=time.monotonic),
        ),
        leader_lease=Access(
            verb="get",
            group="coordination.k8s.io",
            resource="leases",
            namespace=settings.namespace,
            name=lease_name,
        ),
    )


def build_approvals(
    api: client.ApiClient, settings: Settings, *, clock: Clock, me: str
) -> tuple[TokenPublisher | None, ApprovalCallback]:
    """The approval tokens' publisher (the leader's engine calls it; None without a notifier:
    tokens go nowhere else) and the HTTP callback.

    The callback decides through an engine of its own that never runs passes: `submit` is
    one conditional status write, which any replica may make, so standbys serve it too.
    """
    approvals = settings.approvals
    workflows = WorkflowApi(api)
    rotation = parse_duration(approvals.key_rotation.period)
    key = SigningKey(
        CoreApi(api),
        namespace=settings.namespace,
        clock=clock,
        name=approvals.key_secret,
        refresh_seconds=approvals.key_refresh_seconds,
        rotation_period=rotation if rotation > timedelta(0) else None,
        overlap=parse_duration(approvals.key_rotation.overlap),
    )
    publisher = None
    if approvals.notifier.url:
        publisher = TokenPublisher(
            key=key,
            notifier=WebhookNotifier(approvals.notifier.url, timeout_seconds=approvals.notifier.timeout_seconds),
            clock=clock,
            find_workflow=workflows.get,
            default_lifetime=parse_duration(approvals.default_token_lifetime),
            base_url=approvals.base_url,
            recheck=timedelta(seconds=approvals.recheck_seconds),
            retry=timedelta(seconds=approvals.notifier.retry_seconds),
        )
    else:
        log.info("approvals.notifier.url is empty: no approval tokens are sent; approvers use kubectl")
    deciding = WorkflowEngine(workflows, clock=clock, events=EventRecorder(api, instance=me, clock=clock))

    def submit(namespace: str, name: str, record: Record) -> list[Record]:
        added = deciding.submit(namespace, name, record)
        if publisher is not None:
            publisher.after_submit(namespace, name, added)  # a decision may start the next approval
        return added

    reviews = AccessReviews(api, timeout_seconds=settings.http.request_timeout_seconds / 3)

    def may_approve(namespace: str, workflow: str, approver: str) -> bool:
        return reviews.allowed(*approver_review(namespace, workflow, approver))

    callback = ApprovalCallback(
        keys=key.keys, clock=clock, find_workflow=workflows.get, submit=submit, may_approve=may_approve
    )
    return publisher, callback


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


def start_approval_senders(publisher: TokenPublisher, settings: Settings, stop: threading.Event) -> None:
    """The approval outbox's sender threads, and the key's rotation check every keyRefreshSeconds,
    until ``stop``: on every replica, since the HTTP callback on a standby offers too."""
    approvals = settings.approvals
    outbox = approval_outbox(
        publisher,
        retry_seconds=approvals.notifier.retry_seconds,
        max_retry_seconds=max(approvals.notifier.retry_seconds, approvals.recheck_seconds),
        on_depth=metrics.APPROVAL_OUTBOX_DEPTH.set,
        on_failed=metrics.APPROVAL_DELIVERY_FAILURES.inc,
        on_refused=metrics.APPROVAL_OUTBOX_REFUSED.inc,
    )
    threading.Thread(target=outbox.run, args=(stop,), name="approval-senders", daemon=True).start()
    threading.Thread(
        target=every, args=(stop, approvals.key_refresh_seconds, "approval key check", publisher.notice_rotation),
        name="approval-key", daemon=True,
    ).start()  # fmt: skip


def _campaign(
    api: client.ApiClient,
    settings: Settings,
    *,
    lease_name: str,
    me: str,
    clock: ServerBoundedClock,
    approvals: ApprovalCallback | None = None,
    console_writes: ConsoleWrites | None = None,
) -> tuple[LeaderElector, ExecutionStore, MigratingHistory]:
    """Serve health, metrics and the API at once (standbys too), then campaign for `lease_name`;
    each Lease write's answer bounds `clock` by the API server's time."""
    lease = lease_config(settings, lease_name=lease_name, me=me)
    elector = LeaderElector(
        client.CoordinationV1Api(election_client(lease)),
        lease,
        on_lost=exit_on_lost_leadership,
        on_transition=lambda holder: metrics.LEADER_TRANSITIONS.inc(),
        clock=clock,
        on_server_time=clock.observe,
    )
    executions = ExecutionStore(api)
    history = MigratingHistory(settings.history.dsn, retention_days=settings.history.retention_days)
    _serve(api, settings, elector, executions, history, approvals, lease_name=lease_name, console_writes=console_writes)
    elector.start()
    return elector, executions, history


def start_trigger_shards(settings: Settings, lease: LeaseConfig, *, me: str) -> ShardLeases | None:
    """The volume tier's trigger: this replica's share of the shards, standbys included (every
    replica runs some); None when the volume tier is off (no `queue.dsn`). The shards start once
    the queue store's schema is migrated, in the background: a store that is down holds back only
    them."""
    if not settings.queue.dsn:
        return None
    from vigil import pgconnect
    from vigil.queue import (
        trigger as queue_trigger,  # psycopg: the `postgres` extra, needed only with a queue
    )
    from vigil.queue.migrating import migrate_apart

    dsn = settings.queue.dsn
    clock = wall_clock()

    def on_acquired(shard: int) -> Callable[[], None]:
        stop = threading.Event()
        thread = threading.Thread(
            target=queue_trigger.run,
            args=(
                queue_trigger.ShardTrigger(
                    dsn, shard=shard, attempts_retention_days=settings.queue.attempts_retention_days
                ),
            ),
            kwargs={"clock": clock.now, "stop": stop, "on_pass": metrics.record_queue_trigger_pass,
                    "on_error": metrics.record_queue_trigger_error,
                    "pass_deadline": timedelta(seconds=settings.queue.pass_deadline_seconds),
                    "on_unreachable": lambda: shards.request_withdrawal(),
                    "unreachable_after": timedelta(seconds=settings.queue.unreachable_after_seconds),
                    "reachable": lambda: pgconnect.answers(dsn)},
            name=f"trigger-shard-{shard}",
            daemon=True,
        )
        thread.start()

        def stopper() -> None:  # the pass in flight finishes; one that outlasts the join is harmless
            stop.set()
            thread.join(timeout=HANDOVER_JOIN_SECONDS)

        return stopper

    shards = ShardLeases(
        client.CoordinationV1Api(election_client(lease)),
        namespace=settings.namespace,
        identity=me,
        shards=settings.queue.shards,
        on_acquired=on_acquired,
        lease_duration=lease.lease_duration,
        renew_period=lease.renew_period,
        on_lost=exit_on_lost_leadership,
        clock=clock,
        reachable=lambda: pgconnect.answers(dsn),
    )

    def migrate_then_start() -> None:
        """The schema first, waiting for the store as long as it takes: a queue store that is
        down stops the volume tier's trigger, never the operator (nor the declarative tier)."""
        migrated = retry_until_ready(
            lambda: migrate_apart(dsn), stopped=lambda: shards.stopped, wait=shards.wait_stopped,
            what="queue store", meanwhile="its trigger shards wait",
        )  # fmt: skip
        if migrated:
            shards.start()
            log.info("%s sharing %d trigger shards of the queue store", me, settings.queue.shards)

    threading.Thread(target=migrate_then_start, name="queue-migrate", daemon=True).start()
    return shards


def bounded_clock() -> ServerBoundedClock:
    """The operator's time: the wall clock, bounded by the API server's as the Lease's writes
    tell it (`vigil.core.servertime`), so a leader whose clock runs ahead fires nothing early."""
    return ServerBoundedClock(wall_clock(), monotonic=time.monotonic, on_skew=metrics.record_clock_ahead)


def run(settings: Settings, *, console_writes: ConsoleWrites | None = None) -> int:
    """The operator (`vigil operator`): serve and campaign at once, standbys too; as the leader,
    start every part's thread and run until SIGTERM, then hand over (`vigil.kube.lifecycle`)."""
    stopping = stop_on_sigterm()
    me = identity()
    lease = lease_config(settings, lease_name=settings.leader_election.lease_name, me=me)
    api = api_client(lease, connections=api_connections(settings))
    clock = bounded_clock()
    sending = threading.Event()  # the approval senders' stop
    publisher, callback = start_approvals(api, settings, clock=clock, me=me, stop=sending)
    elector, executions, history = _campaign(
        api, settings, lease_name=settings.leader_election.lease_name, me=me, clock=clock, approvals=callback,
        console_writes=console_writes,
    )
    log.info("%s campaigning for lease %s/%s", me, settings.namespace, settings.leader_election.lease_name)
    shards = start_trigger_shards(settings, lease, me=me)
    if not wait_until_leader(elector, stopping):
        log.info("%s stopping (SIGTERM) as a standby", me)
        stand_down(elector, senders=sending, shards=shards)
        return 0
    metrics.IS_LEADER.set(1)
    stop = threading.Event()
    parts = _Parts(api=api, settings=settings, me=me, clock=clock, executions=executions, history=history,
                   events=EventRecorder(api, instance=me, clock=clock, background=True))  # fmt: skip
    leader = _leader(parts, publisher=publisher, stop=stop)
    lead_until_stopped(
        stopping, me=me, stop=stop, threads=start_threads(leader.threads), elector=elector, senders=sending,
        shards=shards, flush=leader.flush, wake=leader.wake,
    )  # fmt: skip
    return 0


def start_approvals(
    api: client.ApiClient, settings: Settings, *, clock: Clock, me: str, stop: threading.Event
) -> tuple[TokenPublisher | None, ApprovalCallback | None]:
    """The approvals' publisher and HTTP callback when `approvals.enabled` (else neither), with
    the publisher's senders started until `stop`."""
    if not settings.approvals.enabled:
        return None, None
    publisher, callback = build_approvals(api, settings, clock=clock, me=me)
    if publisher is not None:
        start_approval_senders(publisher, settings, stop)
    return publisher, callback


@dataclass(frozen=True)
class _Parts:
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


def _leader(parts: _Parts, *, publisher: TokenPublisher | None, stop: threading.Event) -> _Leader:
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


def _firing(parts: _Parts) -> _Firing:
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


def _recording(parts: _Parts, firing: _Firing) -> _Recording:
    api, settings, clock, executions, history = parts.api, parts.settings, parts.clock, parts.executions, parts.history
    caches = firing.caches
    flusher = HistoryFlusher(store=executions, sink=history, on_written=lambda *job: pruner.prune(*job))
    logs = log_capture(
        api, settings, owner_of=execution_owner(executions.cached, job_log_policy(firing.catalogue)), history=history,
        clock=clock, synced=caches.pods.synced.is_set, on_settled=lambda *job: pruner.prune(*job),
    )  # fmt: skip
    step_logs = log_capture(  # no gate: a step's pod stays until its workflow's ttlAfterFinished
        api, settings, owner_of=step_owner, history=history, clock=clock, synced=caches.workflow_pods.synced.is_set,
        workers=1,
    )  # fmt: skip
    pruner = Pruner(
        api, store=executions, catalogue=firing.catalogue, pods=caches.pods,
        written=lambda obj: flusher.written(obj) and logs.settled(obj),
    )  # fmt: skip
    return _Recording(flusher=flusher, logs=logs, step_logs=step_logs)


def _workflow_engine(
    parts: _Parts, firing: _Firing, *, cache: Informer, publisher: TokenPublisher | None
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
    parts: _Parts,
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
    """Storing attempts' log tails in the history database as their pods end (vigil.kube.logcapture)."""
    return LogCapture(
        reader=KubePodLogs(CoreApi(api), clock=clock), sink=history, owner_of=owner_of, clock=clock,
        tail_bytes=settings.history.log_tail_bytes, workers=workers,
        settle_within=timedelta(seconds=settings.history.log_settle_seconds), synced=synced, on_settled=on_settled,
        on_lost=metrics.LOG_TAILS_LOST.inc,
    )  # fmt: skip


def task_store(settings: Settings) -> QueueStore | None:
    """Where `task:` jobs' occurrences and workflows' task steps go when the volume tier is on
    (`queue.dsn`); None when off (such jobs and workflows are Invalid). The store migrates at its
    first use, so a database down at start delays those (the trigger and the engine retry them)
    and nothing else."""
    if not settings.queue.dsn:
        return None
    from vigil.queue.store import (
        QueueStore,  # psycopg: the `postgres` extra, needed only with a queue
    )

    return QueueStore(settings.queue.dsn, migrate_first=True, shards=settings.queue.shards)


def task_queue_threads(
    api: client.ApiClient, settings: Settings, *, events: EventRecorder, clock: Clock, stop: threading.Event
) -> list[tuple[str, Callable[[], None]]]:
    """The volume tier's TaskQueue pass and its cache, when the tier is on (`queue.dsn`)."""
    if not settings.queue.dsn:
        return []
    from vigil.queue.store import (
        QueueStore,  # psycopg: the `postgres` extra, needed only with a queue
    )

    cache = taskqueue_cache(api)
    controller = TaskQueueController(
        cache=cache,
        store=QueueStore(settings.queue.dsn),
        writer=TaskQueueStatusWriter(api, cache=cache),
        events=events,
        clock=clock,
        interval_seconds=settings.queue.status_interval_seconds,
        publish=metrics.record_queue_stats,
        quota=_quota(settings.queue.quota),
        granted={namespace: _quota(settings.queue.quota, own) for namespace, own in settings.queue.quota.namespaces.items()},
        finished_retention=timedelta(days=settings.queue.finished_retention_days),
        credentials=_queue_credentials(api, settings, clock),
    )
    return [("taskqueues-cache", lambda: cache.run(stop)), ("taskqueues", lambda: controller.run(stop))]


def _queue_credentials(api: client.ApiClient, settings: Settings, clock: Clock) -> QueueCredentials | None:
    own = settings.queue.tenant_roles
    if not own.enabled:
        return None
    from vigil.kube.queuecredentials import QueueCredentials
    from vigil.queue.roles import RoleLimits, TenantRoles  # psycopg, as above

    limits = RoleLimits(
        connections=own.max_connections,
        statement_timeout=timedelta(seconds=own.statement_timeout_seconds),
        idle_in_transaction_timeout=timedelta(seconds=own.idle_in_transaction_seconds),
    )
    roles = TenantRoles(settings.queue.dsn, limits=limits, host=own.host or None)
    return QueueCredentials(CoreApi(api), roles, now=clock.now)


def _quota(chart: QueueQuota, own: NamespaceQuota | None = None) -> QuotaLimits:
    """The chart's quota (`queue.quota`), or a namespace's own with the chart's for what it leaves unset."""
    executions = own.max_ready_executions if own is not None else None
    payload_bytes = own.max_payload_bytes if own is not None else None
    return QuotaLimits(
        chart.max_ready_executions if executions is None else executions,
        chart.max_payload_bytes if payload_bytes is None else payload_bytes,
    )


def queue_watchdog(settings: Settings, clock: Clock) -> QueueWatchdog | None:
    """The volume tier's watchdog when the tier is on (`queue.dsn`), publishing to the metrics;
    `audit.repair` re-enters its broken chains too."""
    if not settings.queue.dsn:
        return None
    from vigil.queue.watchdog import QueueWatchdog  # psycopg: the `postgres` extra

    return QueueWatchdog(
        settings.queue.dsn, clock=clock, publish=metrics.record_queue_watchdog, repair=settings.audit.repair
    )


def run_watchdog(settings: Settings) -> int:
    """The watchdog alone, as its own Deployment: it shares no process with the trigger. It runs
    until SIGTERM, then releases its Lease."""
    stopping = stop_on_sigterm()
    me = identity()
    api = api_client(lease_config(settings, lease_name=settings.watchdog.lease_name, me=me))
    clock = bounded_clock()
    elector, executions, _ = _campaign(api, settings, lease_name=settings.watchdog.lease_name, me=me, clock=clock)
    log.info("%s: watchdog campaigning for lease %s/%s", me, settings.namespace, settings.watchdog.lease_name)
    if not wait_until_leader(elector, stopping):
        elector.release()
        return 0
    store = bucket_store(api, settings)
    events = EventRecorder(api, instance=me, clock=clock, background=True)
    watchdog = build_watchdog(
        api, settings, executions=executions, events=events, clock=clock, store=store, gauges=metrics.WatchdogGauges
    )
    watch(watchdog, settings, stopping, volume=queue_watchdog(settings, clock))
    elector.release()
    return 0


def main(settings: Settings, *, watchdog_only: bool = False, console_writes: ConsoleWrites | None = None) -> int:
    logs.configure(level=settings.logging.level, format=settings.logging.format)
    heap.limit_arenas()  # before the threads start: each would otherwise get a heap of its own to fragment
    return run_watchdog(settings) if watchdog_only else run(settings, console_writes=console_writes)
