"""What the metrics endpoint may tell whoever scrapes it: counts and ages, never an execution.

The metrics port is read by Prometheus and whoever else can reach it, and a label value is kept
for as long as the series lives: an execution id names a tenant's work and grows without bound.
Covers: every label of every exported metric is one of a small bounded set (namespaces, jobs,
workflows, priorities, outcomes, reasons, events, API clients); dead letters are published per
job (the oldest's age) and per namespace (how many), and vanish with the jobs that had them; a
watchdog pass's verdicts become the per-job gauges, and a job that is gone loses its series;
a TaskQueue pass's counts become the per-queue gauges (0 s when nothing waits), and a deleted
TaskQueue loses its series; every metric is listed in docs/metrics.md.
"""

from __future__ import annotations

import dataclasses
import re
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from vigil import metrics
from vigil.core.queue import QueueStats
from vigil.core.queuewatch import DeadLetters, JobVerdict, QueueWatchReport
from vigil.core.watchdog import ChainFinding, JobFacts, Overdue, WatchdogReason, assess_job
from vigil.kube.controllers.watchdog import Assessed

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

#: Every label a Vigil metric may carry: each bounded by what is live (namespaces, jobs,
#: workflows, the one queue a worker process serves) or by a closed set of values (priority,
#: outcome, reason, event, client).
# `tenant` is the callers' free text: bounded by the volume-tier watchdog's cap (1,000 series).
BOUNDED_LABELS = frozenset(
    {"namespace", "job", "workflow", "queue", "priority", "outcome", "reason", "event", "client", "tenant"}
)


def samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in metrics.REGISTRY.collect()
        for sample in family.samples
        if sample.name == name
    }


def test_no_metric_has_a_per_execution_label() -> None:
    for family in metrics.REGISTRY.collect():
        collector = metrics.REGISTRY._names_to_collectors[family.name]  # the declared label names
        labels = set(getattr(collector, "_labelnames", ()))
        assert labels <= BOUNDED_LABELS, f"{family.name} has labels {sorted(labels - BOUNDED_LABELS)}"


def test_dead_letters_are_the_oldest_per_job_and_a_count_per_namespace() -> None:
    metrics.record_dead_letters({("media", "nightly"): [60.0, 3600.0], ("media", "hourly"): [5.0], ("ops", "ok"): []})
    assert samples("vigil_dead_letter_age_seconds") == {
        (("job", "nightly"), ("namespace", "media")): 3600.0,
        (("job", "hourly"), ("namespace", "media")): 5.0,
    }
    assert samples("vigil_dead_letters") == {(("namespace", "media"),): 3.0}
    metrics.record_dead_letters({("media", "hourly"): [65.0]})  # nightly's were retried or deleted
    assert samples("vigil_dead_letter_age_seconds") == {(("job", "hourly"), ("namespace", "media")): 65.0}
    assert samples("vigil_dead_letters") == {(("namespace", "media"),): 1.0}
    metrics.record_dead_letters({})
    assert samples("vigil_dead_letter_age_seconds") == {} and samples("vigil_dead_letters") == {}


def counted(ready: int, leased: int, oldest: timedelta | None) -> QueueStats:
    return QueueStats(ready=ready, leased=leased, dead=0, succeeded_last_minute=0, dead_last_minute=0, oldest_ready_age=oldest)


def test_a_task_queue_pass_publishes_each_queues_counts_and_a_gone_queue_loses_its_series() -> None:
    metrics.record_queue_stats({
        ("payments", "billing"): counted(1200, 40, timedelta(minutes=2, seconds=5)),
        ("shop", "orders"): counted(0, 3, None),  # nothing waits: 0, not absent (an autoscaler reads it)
    })  # fmt: skip
    billing, orders = (("namespace", "payments"), ("queue", "billing")), (("namespace", "shop"), ("queue", "orders"))
    assert samples("vigil_queue_oldest_ready_age_seconds") == {billing: 125.0, orders: 0.0}
    assert samples("vigil_queue_ready") == {billing: 1200.0, orders: 0.0}
    assert samples("vigil_queue_leased") == {billing: 40.0, orders: 3.0}
    metrics.record_queue_stats({("shop", "orders"): counted(7, 0, timedelta(seconds=9))})  # billing deleted
    assert samples("vigil_queue_oldest_ready_age_seconds") == {orders: 9.0}
    assert samples("vigil_queue_ready") == {orders: 7.0} and samples("vigil_queue_leased") == {orders: 0.0}
    metrics.record_queue_stats({})


def verdict(name: str, facts_at: datetime, **facts: Any) -> Assessed:
    job = JobFacts(namespace="media", name=name, recurring=True, enabled_since=facts_at, **facts)
    report = assess_job(job, facts_at + timedelta(hours=2), suspended_max_age=timedelta(days=7))
    return Assessed(job={}, facts=job, report=report)


def publish_watchdog(assessed: list[Assessed]) -> None:
    gauges = metrics.WatchdogGauges()
    for item in assessed:
        gauges.add(item)
    gauges.publish()


def test_a_watchdog_pass_sets_each_jobs_gauges_and_a_gone_job_loses_its_series() -> None:
    at = datetime(2026, 5, 1, tzinfo=UTC)
    late = verdict("late", at, expected_max_interval=timedelta(hours=1), next_occurrence=at + timedelta(hours=3))
    fine = verdict("fine", at, last_success=at + timedelta(hours=1, minutes=50), next_occurrence=at + timedelta(hours=3))

    publish_watchdog([late, fine])
    overdue = samples("vigil_job_overdue")
    since = samples("vigil_job_seconds_since_last_success")

    assert list(overdue) == [(("job", "late"), ("namespace", "media"), ("reason", "NotFired"))]
    assert since[(("job", "late"), ("namespace", "media"))] == 7200.0
    assert since[(("job", "fine"), ("namespace", "media"))] == 600.0

    publish_watchdog([fine])

    assert samples("vigil_job_overdue") == {}
    assert list(samples("vigil_job_seconds_since_last_success")) == [(("job", "fine"), ("namespace", "media"))]


def test_a_pass_over_ten_thousand_jobs_is_published_as_values_not_an_object_per_series() -> None:
    """A labelled child of prometheus_client is ~700 bytes; the per-job gauges held one per job
    each (about 7 MiB per gauge at 10,000 jobs), on top of the pass's own verdicts."""
    at = datetime(2026, 5, 1, tzinfo=UTC)
    one = verdict("j", at, last_success=at + timedelta(hours=1), next_occurrence=at + timedelta(hours=3))
    passes = [dataclasses.replace(one, facts=dataclasses.replace(one.facts, name=f"j{i:05d}")) for i in range(10_000)]
    publish_watchdog([])
    tracemalloc.start()
    try:
        publish_watchdog(passes)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(samples("vigil_job_seconds_since_last_success")) == 10_000
    assert len(samples("vigil_schedule_chain_broken")) == 10_000
    assert held < 4 * 2**20, f"{held / 2**20:.1f} MiB held for 10,000 jobs' series"
    publish_watchdog([])


def test_every_metric_is_listed_in_the_metrics_reference() -> None:
    listed = set(re.findall(r"^\| `(vigil_[a-z_]+)`", METRICS_DOC.read_text(encoding="utf-8"), flags=re.MULTILINE))
    exported = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in metrics.REGISTRY.collect()
    }
    assert exported - listed == set(), f"add these to {METRICS_DOC.name}"
    assert listed - exported == set(), f"{METRICS_DOC.name} lists metrics that no longer exist"


def test_a_volume_watchdog_pass_publishes_what_it_found_and_an_unaudited_pass_keeps_the_chains() -> None:
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    overdue = Overdue(status=True, reason=WatchdogReason.NOT_FIRED, message="m")
    broken = ChainFinding(status=True, reason=WatchdogReason.NO_FUTURE_OCCURRENCE, message="m")
    report = QueueWatchReport(
        now=now, overdue=[JobVerdict("j1", "shop/orders", overdue)], overdue_counts={"shop/orders": 7},
        broken=[JobVerdict("j2", "shop/orders", broken)], broken_counts={"shop/orders": 1},
        dead_letters={"shop/orders": DeadLetters(3, 120.0)}, oldest_ready={("shop/orders", -10, "acme"): 4.5},
    )  # fmt: skip
    metrics.record_queue_watchdog(report)
    shop = (("namespace", "shop"), ("queue", "orders"))
    assert samples("vigil_queue_job_overdue") == {(("job", "j1"), *shop, ("reason", "NotFired")): 1.0}
    assert samples("vigil_queue_jobs_overdue") == {shop: 7.0}
    assert samples("vigil_queue_chain_broken") == {(("job", "j2"), *shop): 1.0}
    assert samples("vigil_queue_chains_broken") == {shop: 1.0}
    assert samples("vigil_queue_dead_letters") == {shop: 3.0}
    assert samples("vigil_queue_dead_letter_oldest_age_seconds") == {shop: 120.0}
    assert samples("vigil_queue_oldest_ready_age_seconds_by") == {
        (("namespace", "shop"), ("priority", "-10"), ("queue", "orders"), ("tenant", "acme")): 4.5
    }
    metrics.record_queue_watchdog(
        dataclasses.replace(report, overdue=[], overdue_counts={}, broken=None, broken_counts=None, dead_letters={})
    )
    assert samples("vigil_queue_job_overdue") == {} and samples("vigil_queue_jobs_overdue") == {}
    assert samples("vigil_queue_chain_broken") == {(("job", "j2"), *shop): 1.0}  # not audited: kept
    assert samples("vigil_queue_dead_letters") == {}
