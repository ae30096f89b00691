"""The operator's clients of the API server: its pool sized for every requester that may wait at
once, the elector's own, and the Lease configuration both are bounded by."""

from __future__ import annotations

import os
import socket

from kubernetes import client

from vigil import metrics
from vigil.kube.controllers.dispatcher import START_CONCURRENCY
from vigil.kube.controllers.retention import WORKERS as PRUNE_WORKERS
from vigil.kube.kits.apiclient import RequestPolicy, build_client, operator_configuration
from vigil.kube.kits.leasing import LeaseConfig
from vigil.kube.stores.buckets import WRITE_CONCURRENCY
from vigil.settings import Settings

#: Requesters that may each hold a connection at once beside the trigger's workers, the pod create
#: workers, the bucket writer's and retention's: the controllers' and status writers' workers, the watchdog, the
#: history flusher, and every informer's watch (each holds one for minutes). A request finding the
#: pool full gets a connection of its own, closed after it: a TLS handshake per request, and under
#: a burst there were dozens of them.
OTHER_REQUESTERS = 32
ELECTION_CONNECTIONS = 2  # the elector's own pool: renewals never queue behind other requests


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
    return settings.trigger.workers + START_CONCURRENCY + WRITE_CONCURRENCY + PRUNE_WORKERS + OTHER_REQUESTERS


def api_client(lease: LeaseConfig | None = None, *, connections: int = OTHER_REQUESTERS) -> client.ApiClient:
    """The operator's client: every request bounded by the lease's request timeout (the
    defaults' without one), 429s waited out up to the renew deadline and counted."""
    lease = lease or LeaseConfig(namespace="", name="", identity="")
    configuration = operator_configuration()
    configuration.connection_pool_maxsize = connections
    policy = RequestPolicy(timeout_seconds=lease.request_timeout, retry_after_cap_seconds=lease.renew_deadline)
    return build_client(configuration, policy, on_throttled=metrics.API_THROTTLED.labels(client="operator").inc)


def election_client(lease: LeaseConfig) -> client.ApiClient:
    """The elector's own client and pool (its requests pass their own timeouts): one 429 waited
    out, for at most half of what is left of the deadline after a renew period."""
    configuration = operator_configuration()
    configuration.connection_pool_maxsize = ELECTION_CONNECTIONS
    policy = RequestPolicy(
        timeout_seconds=lease.request_timeout,
        retry_after_cap_seconds=lease.election_retry_after_cap,
        throttle_retries=1,
    )
    return build_client(configuration, policy, on_throttled=metrics.API_THROTTLED.labels(client="election").inc)


def identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
