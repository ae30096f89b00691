"""Every metric the operator promises, scraped from a running operator; and Prometheus alerting on it.

One operator runs a handful of jobs that between them exercise every path —
success, failure into a dead letter, an overdue job, stale output, a suspended
job — and the test scrapes its metrics port and asserts each metric family the
docs and alerts name. Then Debian's Prometheus scrapes the same operator with
the chart's rule file (short thresholds) until JobOverdue is firing.
"""

from __future__ import annotations

import re
import socket
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import condition, create_job, get_job
from tests.integration.operators import OperatorFleet
from tests.prometheus_server import SHORT_TEST_THRESHOLDS, render_rule_file, running_prometheus
from tests.waiting import wait_for

EXPECTED = (
    "vigil_trigger_fired_total",
    "vigil_trigger_lag_seconds_bucket",
    "vigil_trigger_tick_seconds_count",
    "vigil_trigger_errors_total",
    'vigil_occurrences_total{outcome="Fired"}',
    "vigil_leader 1.0",
    "vigil_leader_transitions_total",
    'vigil_oldest_ready_execution_age_seconds{priority="normal"}',
    'vigil_executions_total{outcome="Succeeded"}',
    'vigil_executions_total{outcome="Failed"}',
    'vigil_executions_total{outcome="Dead"}',
    "vigil_duplicate_attempts_total",
    "vigil_history_buffer_depth",
    "vigil_buckets_pending",
    'vigil_job_seconds_since_last_success{job="ok"',
    'vigil_job_overdue{job="doomed"',
    'vigil_schedule_chain_broken{job="ok"',
    'vigil_dead_letter_age_seconds{execution_id="ex-',
    "vigil_dead_letters{namespace=",
    'vigil_job_output_stale{job="reporter"',
    'vigil_job_output_age_seconds{job="reporter"',
    'vigil_job_suspended_seconds{job="paused"',
)


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

        def all_present() -> str | None:
            text = scrape(port)
            return text if all(name in text for name in EXPECTED) else None

        try:
            text = wait_for(all_present, timeout=60, what="every metric family")
        except AssertionError:
            text = scrape(port)
            missing = [name for name in EXPECTED if name not in text]
            raise AssertionError(f"metrics missing from the scrape: {missing}") from None
        assert re.search(r'vigil_job_overdue\{job="doomed",namespace="[^"]+",reason="Failing"\} 1\.0', text)
        assert re.search(r'vigil_job_output_stale\{job="reporter",namespace="[^"]+"\} 1\.0', text)
        assert re.search(r'vigil_executions_total\{outcome="Succeeded"\} [1-9]', text)

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
        cluster.core.delete_namespace(fleet.namespace)
