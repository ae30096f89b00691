"""The watchdog against the real API server: a trigger behind is not a broken chain; LaunchFailing is reported.

The trigger, its bucket store, launcher and ledger, the progress Lease and the watchdog are the
real adapters on a real API server; only the clock is a fake one, moved by the launcher: every
launch takes five seconds of it, so 40 jobs due in the same minute keep the trigger busy for more
than three minutes of the clock, well past the chain grace (2 minutes). No operator process runs
(nothing else writes the jobs), so the test plays the create handler and inserts each job's first
occurrence itself. Midway through that pass — from inside the launcher, so exactly there — the
watchdog audits: no job may be ScheduleChainBroken, although every unmarked head is minutes late,
which the rule before the trigger published its progress reported as broken. Then two chains are
broken by hand — one job's next occurrence deleted from its bucket, another's occurrence written
into a minute the trigger has walked past — and both are reported, while the rest are not — nor a job the operator has not handled yet
(onboarding behind: no first occurrence yet, `NotYetScheduled`).

A job in a namespace whose ResourceQuota allows no Executions is refused at launch: the ledger
sets its LaunchFailing condition, and the watchdog reports it as its own finding, a Warning Event
and `vigil_job_launch_failing{reason="LaunchRefused"}`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import condition, create_job, events_about, get_job, make_namespace
from tests.integration.jobstatuses import FlushedLedger
from tests.waiting import wait_for
from vigil import metrics
from vigil.core.buckets import minute_of
from vigil.core.chain import Fire, first_entry
from vigil.core.memory import FakeClock
from vigil.core.ports import Launch
from vigil.core.trigger import Trigger
from vigil.core.watchdog import FindingKind, WatchdogReason
from vigil.kube.controllers.launcher import ExecutionLauncher
from vigil.kube.controllers.watchdog import Assessed, Watchdog
from vigil.kube.controllers.watchfacts import FactGatherer
from vigil.kube.kits.events import EventRecorder
from vigil.kube.stores.buckets import KubeBucketStore
from vigil.kube.stores.executions import ExecutionStore
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.jobstatus import JobStatusWriter
from vigil.kube.stores.progress import LeaseProgress
from vigil.kube.stores.results import JobResults
from vigil.model.jobspec import job_view

JOBS = 40
LAUNCH_TAKES = timedelta(seconds=5)
AUDIT_AT_LAUNCH = 30  # 150 s of the clock after the minute: past the 2-minute grace


class SlowLauncher:
    """The real launcher, each launch taking LAUNCH_TAKES of the clock; `at_launch` runs at launch N."""

    def __init__(self, inner: ExecutionLauncher, clock: FakeClock, at_launch: dict[int, Callable[[], None]]) -> None:
        self.inner, self.clock, self.at_launch, self.count = inner, clock, at_launch, 0

    def launch(self, fire: Fire) -> Launch:
        self.clock.advance(LAUNCH_TAKES)
        self.count += 1
        if self.count in self.at_launch:
            self.at_launch[self.count]()
        return self.inner.launch(fire)


def everything(item: Assessed) -> bool:
    return True


def broken(assessed: list[Assessed], namespaces: tuple[str, ...]) -> dict[str, str]:
    """The broken chains among this test's jobs (the watchdog sees every namespace's)."""
    return {
        a.facts.name: str(a.report.chain.reason)
        for a in assessed
        if a.report.chain.status and a.facts.namespace in namespaces
    }


def test_a_trigger_behind_is_not_a_broken_chain_and_a_broken_one_still_is(
    cluster: KubeCluster, namespace: str
) -> None:
    opns = make_namespace(cluster, "watch-op")
    refused_ns = make_namespace(cluster, "watch-quota")
    try:
        cluster.core.create_namespaced_resource_quota(refused_ns, client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name="no-executions"),
            spec=client.V1ResourceQuotaSpec(hard={"count/executions.vigil.dev": "0"}),
        ))  # fmt: skip
        wait_for(
            lambda: cluster.core.read_namespaced_resource_quota("no-executions", refused_ns).status.hard,
            timeout=60, what="the quota to be counted",
        )  # fmt: skip
        _scenario(cluster, namespace, opns, refused_ns)
    finally:
        for ns in (opns, refused_ns):
            cluster.core.delete_namespace(ns)


def _scenario(cluster: KubeCluster, namespace: str, opns: str, refused_ns: str) -> None:
    start = datetime.now(UTC).replace(microsecond=0)
    target = minute_of(start) + timedelta(minutes=2)  # daily at this minute: every job due at once
    cron = f"{target.minute} {target.hour} * * *"
    objs = [create_job(cluster, namespace, f"j{i:02}", cron=cron, timezone="UTC", jitter="0s") for i in range(JOBS)]
    objs.append(create_job(cluster, refused_ns, "refused", cron=cron, timezone="UTC", jitter="0s"))

    clock = FakeClock(start)
    store = KubeBucketStore(cluster.api, namespace=opns, shards=4, max_per_bucket=2000)
    for obj in objs:  # as the create handler would: the first occurrence, then the status
        head = first_entry(job_view(obj)[0], now=start)
        assert head is not None and head.fire_at == target
        store.insert(head)
        meta = obj["metadata"]
        cluster.custom.patch_namespaced_custom_object_status(
            "vigil.dev", "v1alpha1", meta["namespace"], "scheduledjobs", meta["name"],
            {"status": {"observedGeneration": meta["generation"]}},
        )  # fmt: skip
    create_job(cluster, namespace, "unhandled", cron=cron, timezone="UTC", jitter="0s")  # no handler ran for it

    catalogue = KubeCatalogue(cluster.api)
    events = EventRecorder(cluster.api, instance="test-watchdog")
    executions = ExecutionStore(cluster.api)
    progress = LeaseProgress(cluster.api, namespace=opns, name="vigil-leader-progress", identity="test")
    watchdog = Watchdog(
        writer=JobStatusWriter(cluster.api, catalogue=catalogue),
        gatherer=FactGatherer(cluster.api, buckets=store, executions=executions, progress=progress),
        events=events, clock=clock, suspended_max_age=timedelta(days=7), store=store,
        gauges=metrics.WatchdogGauges,
    )  # fmt: skip
    mid_pass: list[list[Assessed]] = []
    ledger = FlushedLedger(cluster.api, catalogue=catalogue, events=events)
    launcher = SlowLauncher(
        ExecutionLauncher(
            store=executions, catalogue=catalogue, clock=clock, pods=cluster.core,
            results=JobResults(store=executions, events=events, clock=clock, writer=ledger.writer),
        ),
        clock,
        {AUDIT_AT_LAUNCH: lambda: mid_pass.append(watchdog.check(audit=True, keep=everything))},
    )  # fmt: skip
    trigger = Trigger(
        store=store, catalogue=catalogue, launcher=launcher, ledger=ledger,
        clock=clock, on_progress=progress.publish,
    )  # fmt: skip

    clock.set(target - timedelta(seconds=30))
    trigger.tick()  # a complete pass before the burst: nothing due yet
    clock.set(target)
    trigger.tick()  # the burst: each launch takes five seconds of the clock

    ours = (namespace, refused_ns)
    [audit] = mid_pass
    late = [a for a in audit if a.facts.namespace == namespace and a.report.chain.age is not None and a.report.chain.age > timedelta(minutes=2)]
    behind = [a.facts.name for a in audit if a.report.chain.reason is WatchdogReason.TRIGGER_BEHIND]
    assert broken(audit, ours) == {}, "a trigger working through a burst is not a broken chain"
    unhandled = next(a for a in audit if (a.facts.namespace, a.facts.name) == (namespace, "unhandled"))
    assert unhandled.report.chain.reason is WatchdogReason.NOT_YET_SCHEDULED, "onboarding behind is not broken"
    assert late and behind, "the audit ran while heads were past the grace and the trigger was still on them"
    for i in range(JOBS):  # nor was it written as a condition
        cond = condition(get_job(cluster, namespace, f"j{i:02}"), "ScheduleChainBroken")
        assert cond is None or cond["status"] == "False", cond

    # Two chains broken by hand: j00's next occurrence deleted; j01's written into a closed minute.
    j00 = _entries_of(cluster, opns, "j00")
    assert j00, "the trigger inserted j00's next occurrence"
    for bucket, key in j00:
        store.remove(bucket, key)
    head = first_entry(job_view(objs[1])[0], now=start)
    assert head is not None
    closed = target - timedelta(minutes=5)  # behind the trigger's cursor: it walks on from where it is
    # written behind the trigger's back (another writer: a replica gone since, a hand edit); an insert
    # through the trigger's own store would have its minute walked again at the next pass
    elsewhere = KubeBucketStore(cluster.api, namespace=opns, shards=4, max_per_bucket=2000)
    elsewhere.insert(dataclasses.replace(head, key=f"{head.key}-stray", nominal=closed, fire_at=closed))
    clock.advance(timedelta(minutes=3))
    trigger.tick()  # the trigger goes on; its cursor is past the stray's minute
    assessed = watchdog.check(audit=True, keep=everything)
    assert broken(assessed, ours) == {
        "j00": WatchdogReason.NO_FUTURE_OCCURRENCE,
        "j01": WatchdogReason.STALE_NEXT_OCCURRENCE,
    }
    j01 = next(a for a in assessed if (a.facts.namespace, a.facts.name) == (namespace, "j01"))
    assert "already closed" in j01.report.chain.message
    cond = condition(get_job(cluster, namespace, "j00"), "ScheduleChainBroken")
    assert cond and cond["status"] == "True" and cond["reason"] == "NoFutureOccurrence", cond

    # The refused job: the ledger's LaunchFailing condition, reported by the watchdog.
    refused = next(a for a in assessed if (a.facts.namespace, a.facts.name) == (refused_ns, "refused"))
    assert (refused.report.launch.status, refused.report.launch.reason) == (True, WatchdogReason.LAUNCH_REFUSED)
    # The quota's words: "exceeded quota", or "status unknown for quota" before its controller counted it.
    assert "quota: no-executions" in refused.report.launch.message, refused.report.launch.message
    assert broken([refused], ours) == {}, "a refused occurrence is settled: the chain goes on"
    warned = wait_for(lambda: events_about(cluster, refused_ns, "refused", str(FindingKind.LAUNCH_FAILING)),
                      timeout=30, what="the watchdog's LaunchFailing Event")  # fmt: skip
    assert warned[0].type == "Warning" and "quota: no-executions" in warned[0].message
    value = metrics.REGISTRY.get_sample_value(
        "vigil_job_launch_failing", {"namespace": refused_ns, "job": "refused", "reason": "LaunchRefused"}
    )
    assert value == 1.0
    assert (condition(get_job(cluster, refused_ns, "refused"), "LaunchFailing") or {}).get("status") == "True"
    watchdog.check(audit=True)
    assert len(events_about(cluster, refused_ns, "refused", "LaunchFailing")) == 1, "one Warning per episode"


def _entries_of(cluster: KubeCluster, opns: str, name: str) -> list[tuple[str, str]]:
    buckets: list[dict[str, Any]] = cluster.custom.list_namespaced_custom_object(
        "vigil.dev", "v1alpha1", opns, "schedulebuckets"
    )["items"]
    fired = {b["metadata"]["name"]: (b.get("status") or {}).get("fired") or {} for b in buckets}
    return [
        (b["metadata"]["name"], o["key"])
        for b in buckets
        for o in b["spec"].get("occurrences") or []
        if o["name"] == name and o["key"] not in fired[b["metadata"]["name"]]
    ]
