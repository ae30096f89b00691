"""The volume tier's parts, each only when the tier is on (`queue.dsn`): the trigger shards every
replica shares, the store `task:` jobs and task steps submit to, the TaskQueue pass and its
credentials, and the tier's watchdog. psycopg (the `postgres` extra) is imported only then."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from kubernetes import client

from vigil import metrics
from vigil.core.ports import Clock
from vigil.core.queue import QuotaLimits
from vigil.kube.controllers.taskqueues import (
    TaskQueueController,
    TaskQueueStatusWriter,
    taskqueue_cache,
)
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.events import EventRecorder
from vigil.kube.kits.leasing import LeaseConfig
from vigil.kube.kits.shardleases import ShardLeases
from vigil.kube.lifecycle import (
    HANDOVER_JOIN_SECONDS,
    exit_on_lost_leadership,
    retry_until_ready,
)
from vigil.settings import NamespaceQuota, QueueQuota, Settings

if TYPE_CHECKING:
    from vigil.kube.controllers.queuecredentials import QueueCredentials
    from vigil.queue.store import QueueStore
    from vigil.queue.watchdog import QueueWatchdog
from vigil.runtime import clocks
from vigil.runtime.clients import election_client

log = logging.getLogger("vigil")


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
    clock = clocks.wall_clock()

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
    from vigil.kube.controllers.queuecredentials import QueueCredentials
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
