"""What every replica serves, standbys too: the probes, the metrics, and the HTTP API with its
guard, the volume tier's routes, the console and the approvals' callback (whose publisher's
senders run on every replica as well)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from kubernetes import client
from prometheus_client import start_http_server

from vigil import metrics
from vigil.api import ApiServer, ApprovalCallback, Guard, JobStore, Limits, QueueApi, TlsFiles
from vigil.api.console import ConsoleSources, ConsoleWrites
from vigil.core.access import Access, CachedAuthenticator, CachedAuthorizer, TtlCache
from vigil.core.ports import Clock
from vigil.core.workflow import Record
from vigil.history.migrating import MigratingHistory
from vigil.kube.controllers.approvals import (
    SigningKey,
    TokenPublisher,
    WebhookNotifier,
    approval_outbox,
    approver_review,
)
from vigil.kube.controllers.workflowapi import WorkflowApi
from vigil.kube.controllers.workflows import WorkflowEngine
from vigil.kube.kits.accessreview import AccessReviews, TokenReviews
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.events import EventRecorder
from vigil.kube.kits.leasing import LeaderElector
from vigil.kube.kits.loops import every
from vigil.kube.stores.consolereads import KubeConsoleReads
from vigil.kube.stores.executions import ExecutionStore
from vigil.kube.stores.tenantbindings import TaskQueueTenants
from vigil.model.durations import parse_duration
from vigil.probes import serve_probes
from vigil.runtime import clocks
from vigil.settings import Http, Settings

log = logging.getLogger("vigil")


def serve(
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
                clock=clocks.wall_clock(),
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
