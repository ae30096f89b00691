"""What the metrics endpoint may tell whoever scrapes it: counts and ages, never an execution.

The metrics port is read by Prometheus and whoever else can reach it, and a label value is kept
for as long as the series lives: an execution id names a tenant's work and grows without bound.
Covers: every label of every exported metric is one of a small bounded set (namespaces, jobs,
workflows, priorities, outcomes, reasons, events); dead letters are published per job (the
oldest's age) and per namespace (how many), and vanish with the jobs that had them.
"""

from __future__ import annotations

from vigil import metrics

#: Every label a Vigil metric may carry: each bounded by what is live (namespaces, jobs,
#: workflows) or by a closed set of values (priority, outcome, reason, event).
BOUNDED_LABELS = frozenset({"namespace", "job", "workflow", "priority", "outcome", "reason", "event"})


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
