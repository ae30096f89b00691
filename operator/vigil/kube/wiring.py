"""Factories for the collaborators both roots build: the operator and the kubectl plugin.

`vigil.runtime` (the operator) and `vigil.cli` (`kubectl vigil audit`) both
need the bucket store and the watchdog; built here from the same `Settings`,
the plugin reads the buckets with the operator's shard count and judges with
the operator's grace and suspension limits, instead of constants of its own.
`SystemClock` (from `vigil.kube.kits.clocks`) is the one clock either reads.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from kubernetes import client

from vigil.core.ports import Clock
from vigil.kube.controllers.watchdog import NoGauges, PassGauges, Watchdog
from vigil.kube.controllers.watchfacts import FactGatherer
from vigil.kube.kits.clocks import SystemClock as SystemClock  # the roots import it from here
from vigil.kube.kits.events import EventRecorder
from vigil.kube.kits.informer import Informer
from vigil.kube.stores.buckets import KubeBucketStore
from vigil.kube.stores.executions import ExecutionStore
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.jobstatus import JobStatusWriter
from vigil.kube.stores.progress import LeaseProgress, progress_lease_name
from vigil.model.durations import parse_duration
from vigil.settings import Settings


def bucket_store(api: client.ApiClient, settings: Settings, *, cache: Informer | None = None) -> KubeBucketStore:
    """The ScheduleBuckets in the operator's namespace, sharded as the settings say; on the leader
    read from its cache of the pending ones (`buckets.bucket_cache`)."""
    return KubeBucketStore(
        api,
        namespace=settings.namespace,
        shards=settings.trigger.shards,
        max_per_bucket=settings.trigger.max_occurrences_per_bucket,
        cache=cache,
    )


def trigger_progress(api: client.ApiClient, settings: Settings, *, identity: str = "") -> LeaseProgress:
    """The Lease the trigger reports its progress on, beside its leader Lease; the watchdog reads it."""
    return LeaseProgress(
        api,
        namespace=settings.namespace,
        name=progress_lease_name(settings.leader_election.lease_name),
        identity=identity,
    )


def build_watchdog(
    api: client.ApiClient,
    settings: Settings,
    *,
    executions: ExecutionStore,
    events: EventRecorder,
    clock: Clock,
    store: KubeBucketStore,
    gauges: Callable[[], PassGauges] = NoGauges,
    jobs: Informer | None = None,
    writer: JobStatusWriter | None = None,
) -> Watchdog:
    """The watchdog with the settings' limits; `settings.audit.repair` re-enters broken chains.
    On the leader it reads the jobs from the leader's cache (`jobs`) and writes their conditions
    through the leader's one status writer (`writer`); alone, through a writer of its own, which
    is just as conditional."""
    return Watchdog(
        writer=writer or JobStatusWriter(api, catalogue=KubeCatalogue(api, cache=jobs)),
        gatherer=FactGatherer(
            api, buckets=store, executions=executions,
            progress=trigger_progress(api, settings), jobs=jobs,
        ),
        events=events,
        clock=clock,
        suspended_max_age=parse_duration(settings.watchdog.suspended_max_age),
        chain_grace=timedelta(seconds=settings.audit.chain_grace_seconds),
        store=store,
        repair=settings.audit.repair,
        gauges=gauges,
    )
