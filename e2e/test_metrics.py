"""Every metric the operator promises, scraped from a running operator; and Prometheus alerting on it.

One operator runs a handful of jobs that between them exercise every path —
success, failure into a dead letter, an overdue job, stale output, a suspended
job — and the test scrapes its metrics port and checks each metric family the
docs and alerts name at a value only that work produces: a counter above zero
where the run did the thing, an error or duplicate counter at zero, a gauge at
the value the scenario sets up. Then Debian's Prometheus scrapes the same
operator with the chart's rule file (short thresholds) until JobOverdue fires.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import condition, create_job, execution_status, executions, get_job
from tests.integration.operators import OperatorFleet
from tests.prometheus_server import SHORT_TEST_THRESHOLDS, render_rule_file, running_prometheus
from tests.waiting import wait_for

Labels = dict[str, str]
Samples = dict[str, list[tuple[Labels, float]]]


def parse(text: str) -> Samples:
    """Every sample of the exposition, by sample name (a histogram's `_count` and `_sum` included)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample of `name` whose labels include `labels`, or None when there is none."""
    found = [v for have, v in samples.get(name, []) if labels.items() <= have.items()]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} samples"
    return found[0] if found else None


def expectations(namespace: str, dead: set[str]) -> dict[str, Callable[[Samples], bool]]:
    """What only real work produces, per metric: counters above zero where the run did the thing,
    zero where a healthy run must not, and gauges with the values this scenario sets up."""

    def at_least(name: str, floor: float, **labels: str) -> Callable[[Samples], bool]:
        return lambda s: (v := value(s, name, **labels)) is not None and v >= floor

    def between(name: str, low: float, high: float, **labels: str) -> Callable[[Samples], bool]:
        return lambda s: (v := value(s, name, **labels)) is not None and low <= v <= high

    def dead_letter_ages(s: Samples) -> bool:
        """One series per job with dead letters, its oldest's age: never one per execution."""
        series = s.get("vigil_dead_letter_age_seconds", [])
        jobs = {labels["job"] for labels, v in series if labels.get("namespace") == namespace and v >= 0}
        return bool(dead) and jobs == {"doomed"} and not any("execution_id" in labels for labels, _ in series)

    ns = {"namespace": namespace}
    return {
        "fired": at_least("vigil_trigger_fired_total", 3),
        "lag observed": at_least("vigil_trigger_lag_seconds_count", 3),
        "ticks": at_least("vigil_trigger_tick_seconds_count", 10),
        "no trigger errors": between("vigil_trigger_errors_total", 0, 0),
        "occurrences fired": at_least("vigil_occurrences_total", 3, outcome="Fired"),
        "leader": between("vigil_leader", 1, 1),
        "took the lease": at_least("vigil_leader_transitions_total", 1),
        "ready age": between("vigil_oldest_ready_execution_age_seconds", 0, 30, priority="normal"),
        "succeeded": at_least("vigil_executions_total", 2, outcome="Succeeded"),
        "failed": at_least("vigil_executions_total", 1, outcome="Failed"),
        "dead": at_least("vigil_executions_total", 1, outcome="Dead"),
        "no duplicate pods": between("vigil_duplicate_attempts_total", 0, 0),
        "history buffer": between("vigil_history_buffer_depth", 0, 5),
        "buckets pending": between("vigil_buckets_pending", 0, 5),
        "ok succeeded lately": between("vigil_job_seconds_since_last_success", 0, 30, job="ok", **ns),
        "doomed overdue": between("vigil_job_overdue", 1, 1, job="doomed", reason="Failing", **ns),
        "ok chain whole": between("vigil_schedule_chain_broken", 0, 0, job="ok", **ns),
        "dead letter ages": dead_letter_ages,
        "dead letters": at_least("vigil_dead_letters", 1, **ns),
        "reporter stale": between("vigil_job_output_stale", 1, 1, job="reporter", **ns),
        "reporter output age": between("vigil_job_output_age_seconds", 3600, 7200, job="reporter", **ns),
        "paused for a while": at_least("vigil_job_suspended_seconds", 1, job="paused", **ns),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def test_every_metric_is_exported_and_job_overdue_fires_in_prometheus(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    fleet = OperatorFleet(
        cluster,
        tmp_path,
        watchdog={"intervalSeconds": 1, "suspendedMaxAge": "1s"},
        audit={"intervalSeconds": 2, "chainGraceSeconds": 2},
        http={"metricsPort": port, "apiPort": 0},
    )
    fleet.start()
    fleet.leader()
    try:
        stamp = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        cluster.core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="out"), data={"at": stamp})
        )
        create_job(cluster, namespace, "ok", every="2s", jitter="0s", expectedMaxInterval="1h")
        create_job(
            cluster, namespace, "doomed", command="exit 1", every="3s", jitter="0s",
            expectedMaxInterval="4s", retry={"maxAttempts": 1},
        )  # fmt: skip
        create_job(
            cluster, namespace, "reporter", every="1h", jitter="0s",
            freshness={"configMap": {"name": "out", "key": "at"}, "maxAge": "5m"},
        )  # fmt: skip
        create_job(cluster, namespace, "paused", every="1h", suspend=True, suspendReason="test", suspendedBy="ci")
        wait_for(
            lambda: (condition(get_job(cluster, namespace, "doomed"), "Overdue") or {}).get("status") == "True",
            timeout=60,
            what="the failing job to be overdue",
        )

        def unmet() -> list[str]:
            dead = {e["metadata"]["name"] for e in executions(cluster, namespace)
                    if execution_status(e).get("phase") == "Dead"}  # fmt: skip
            samples = parse(scrape(port))
            return [what for what, holds in expectations(namespace, dead).items() if not holds(samples)]

        try:
            wait_for(lambda: not unmet(), timeout=60, what="every metric at a value the run produces")
        except AssertionError:
            raise AssertionError(f"metrics without the values the run produces: {unmet()}") from None

        rules = render_rule_file(SHORT_TEST_THRESHOLDS)
        (tmp_path / "prometheus").mkdir()
        with running_prometheus(tmp_path / "prometheus", targets=[f"127.0.0.1:{port}"], rules=rules) as prometheus:

            def job_overdue_firing() -> dict[str, Any] | None:
                return next(
                    (
                        a for a in prometheus.alerts()
                        if a["labels"]["alertname"] == "JobOverdue" and a["state"] == "firing"
                        and a["labels"].get("job") == "doomed"
                    ),
                    None,
                )  # fmt: skip

            alert = wait_for(job_overdue_firing, timeout=90, what="JobOverdue firing for the failing job")
            assert alert["labels"]["namespace"] == namespace
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)
