"""The watchdog's conditions never undo another writer's, against the real API server.

The watchdog judges the copy of a job its cache holds, which may be older than the job: the job
controller may have set `Invalid` since, or the ledger `LaunchFailing`. Its pass once wrote its
whole conditions list back from that copy, unconditionally, and so erased them (CI caught a job
reported Invalid in the log that never showed it). Here the cache holds a stale copy of a job
suspended for two days, another writer sets `Invalid` on the job afterwards, and the watchdog's
pass must add `SuspendedTooLong` beside it: its write goes through the job status writer,
conditional on the version read and folded again on the job as it is.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import condition, create_job, events_about, get_job, make_namespace
from tests.waiting import wait_for
from vigil.core.conditions import set_condition
from vigil.core.memory import FakeClock
from vigil.core.timeparse import parse_rfc3339
from vigil.kube.controllers.watchdog import Watchdog
from vigil.kube.controllers.watchfacts import FactGatherer
from vigil.kube.kits.events import EventRecorder
from vigil.kube.stores.buckets import KubeBucketStore
from vigil.kube.stores.executions import ExecutionStore
from vigil.kube.stores.jobs import KubeCatalogue, job_cache
from vigil.kube.stores.jobstatus import JobStatusWriter
from vigil.kube.wiring import SystemClock
from vigil.model import GROUP, VERSION
from vigil.model.names import SCHEDULED_JOBS


def _write_conditions(cluster: KubeCluster, job: dict[str, Any], conditions: list[dict[str, Any]]) -> dict[str, Any]:
    meta = job["metadata"]
    written: dict[str, Any] = cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, meta["namespace"], SCHEDULED_JOBS, meta["name"], {"status": {"conditions": conditions}}
    )
    return written


def test_a_pass_on_a_stale_copy_keeps_the_conditions_written_since(cluster: KubeCluster, namespace: str) -> None:
    opns = make_namespace(cluster, "watch-stale")
    try:
        clock = FakeClock(SystemClock().now())
        two_days_ago = clock.now() - timedelta(days=2)
        job = create_job(cluster, namespace, "paused", every="1h", suspend=True,
                         suspendReason="maintenance", suspendedBy="ops")  # fmt: skip
        suspended = set_condition([], type_="Suspended", status=True, reason="Suspended", message="maintenance",
                                  generation=1, now=two_days_ago)  # fmt: skip
        stale = _write_conditions(cluster, job, suspended)
        invalid = set_condition(list(suspended), type_="Invalid", status=True, reason="InvalidSpec",
                                message="spec.payloadTemplate: another writer's finding", generation=1,
                                now=clock.now())  # fmt: skip
        _write_conditions(cluster, stale, invalid)  # after the copy the watchdog judges

        jobs = job_cache(cluster.api)  # not running: it holds the stale copy only
        jobs.observe(stale)
        jobs.synced.set()
        watchdog = Watchdog(
            writer=JobStatusWriter(cluster.api, catalogue=KubeCatalogue(cluster.api, cache=jobs)),
            gatherer=FactGatherer(cluster.api, buckets=KubeBucketStore(cluster.api, namespace=opns, shards=1, max_per_bucket=10), executions=ExecutionStore(cluster.api),
                                  jobs=jobs),
            events=EventRecorder(cluster.api, instance="test-watchdog"),
            clock=clock, suspended_max_age=timedelta(days=1),
        )  # fmt: skip
        [kept_of_pass] = watchdog.check(audit=False, keep=lambda a: a.facts.namespace == namespace)
        # What the pass keeps when asked is a reference to the job, not the job.
        assert set(kept_of_pass.job) == {"apiVersion", "kind", "metadata"}
        assert kept_of_pass.job["metadata"]["uid"] == job["metadata"]["uid"]

        now = get_job(cluster, namespace, "paused")
        too_long = condition(now, "SuspendedTooLong")
        assert too_long is not None and too_long["status"] == "True", now["status"]
        kept = condition(now, "Invalid")
        assert kept is not None and kept["status"] == "True", "the watchdog erased another writer's condition"
        since = condition(now, "Suspended")
        assert since is not None and parse_rfc3339(since["lastTransitionTime"]) == two_days_ago.replace(microsecond=0)
        warned = wait_for(
            lambda: events_about(cluster, namespace, "paused", "SuspendedTooLong") or None,
            timeout=10, what="the SuspendedTooLong Event",
        )  # fmt: skip
        assert "longer than" in warned[0].message

        # Nothing changed: no second Warning, the conditions stay; unasked, the pass keeps nothing.
        assert watchdog.check(audit=False) == []
        again = get_job(cluster, namespace, "paused")
        assert again["metadata"]["resourceVersion"] == now["metadata"]["resourceVersion"], "an unchanged pass wrote"
    finally:
        cluster.core.delete_namespace(opns)


def test_the_leaders_first_pass_waits_for_the_job_cache_instead_of_listing(cluster: KubeCluster, namespace: str) -> None:
    """The leader's caches start with its watchdog; a first pass that listed every job whole
    (managedFields and all, unpaged) held them through the pass, and the operator's memory stayed
    at that mark. The pass waits for the cache: it sees the one job only the cache holds."""
    real = create_job(cluster, namespace, "listed", every="1h")
    only_cached = {**real, "metadata": {**real["metadata"], "name": "cached-only", "uid": "cached-only-uid"}}
    jobs = job_cache(cluster.api)  # not running: the test fills it, then marks it synced
    gatherer = FactGatherer(cluster.api, buckets=KubeBucketStore(cluster.api, namespace=namespace, shards=1,
                            max_per_bucket=10), executions=ExecutionStore(cluster.api), jobs=jobs)  # fmt: skip

    def sync_later() -> None:
        jobs.observe(only_cached)
        jobs.synced.set()

    timer = threading.Timer(1.0, sync_later)
    timer.start()
    try:
        names = {job["metadata"]["name"] for job in gatherer.jobs()}
    finally:
        timer.join()
    assert names == {"cached-only"}, names


def test_without_a_cache_the_jobs_are_listed_in_pages_and_slimmed(cluster: KubeCluster, namespace: str) -> None:
    """The standalone watchdog has no cache: it lists, page by page, keeping what a cache keeps."""
    for i in range(3):
        create_job(cluster, namespace, f"paged-{i}", every="1h")
    gatherer = FactGatherer(cluster.api, buckets=KubeBucketStore(cluster.api, namespace=namespace, shards=1,
                            max_per_bucket=10), executions=ExecutionStore(cluster.api))  # fmt: skip
    mine = [job for job in gatherer.jobs() if job["metadata"]["namespace"] == namespace]
    assert sorted(job["metadata"]["name"] for job in mine) == ["paged-0", "paged-1", "paged-2"]
    assert all("managedFields" not in job["metadata"] for job in mine)


def test_a_job_its_controller_has_not_handled_is_written_only_once_it_has(cluster: KubeCluster, namespace: str) -> None:
    """At takeover the watchdog's first pass met thousands of jobs waiting for their first
    occurrence, and wrote each one's "nothing wrong yet" conditions: a write per job, ahead of the
    controller's own. Until the controller has handled a job's spec, only an alarm is written (a
    suspension too long is, above, on a job no controller handled)."""
    create_job(cluster, namespace, "fresh", every="1h")
    store = KubeBucketStore(cluster.api, namespace=namespace, shards=1, max_per_bucket=10)
    watchdog = Watchdog(
        writer=JobStatusWriter(cluster.api, catalogue=KubeCatalogue(cluster.api)),
        gatherer=FactGatherer(cluster.api, buckets=store, executions=ExecutionStore(cluster.api)),
        events=EventRecorder(cluster.api, instance="test-watchdog"),
        clock=SystemClock(), suspended_max_age=timedelta(days=1),
    )  # fmt: skip
    [judged] = watchdog.check(audit=True, keep=lambda a: a.facts.namespace == namespace)
    assert judged.report.chain.reason == "NotYetScheduled"  # judged, and kept for `kubectl vigil audit`
    before = get_job(cluster, namespace, "fresh")
    assert condition(before, "ScheduleChainBroken") is None, "a job no controller handled yet was written"

    meta = before["metadata"]
    cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, SCHEDULED_JOBS, "fresh", {"status": {"observedGeneration": meta["generation"]}}
    )  # as its controller does
    watchdog.check(audit=True)
    chain = condition(get_job(cluster, namespace, "fresh"), "ScheduleChainBroken")
    assert chain is not None and (chain["status"], chain["reason"]) == ("False", "RecentlyEnabled"), chain
