"""A real Prometheus scrapes a real metrics endpoint and Vigil's JobOverdue alert reaches firing.

Prometheus is Debian's /usr/bin/prometheus, started by tests/prometheus_server.py on a loopback
port with a throwaway TSDB, scraping every second and evaluating the chart's rule file rendered
with short thresholds (`for: 1s`). The metrics endpoint is prometheus_client's own HTTP server in
this process, serving an overdue job and a leader; a later test points the same Prometheus at a
real operator. Covers: the rendered rules load in a real server, the scrape keeps the job's own
`namespace` and `job` labels (honor_labels), JobOverdue fires with them, and NoTriggerLeader stays
quiet while a replica reports vigil_leader 1. Nothing is left running afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tests.prometheus_server import SHORT_TEST_THRESHOLDS, render_rule_file, running_prometheus
from tests.waiting import wait_for

LOOPBACK = "127.0.0.1"
OVERDUE_JOB = {"namespace": "media", "job": "nightly-report", "reason": "NotFired"}
#: Start-up, one scrape, two evaluations and the `for: 1s` fit well inside this on a busy machine.
FIRING_TIMEOUT_SECONDS = 60.0


def firing(alerts: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The alert named `name` if Prometheus reports it firing."""
    return next(
        (
            alert
            for alert in alerts
            if alert["labels"]["alertname"] == name and alert["state"] == "firing"
        ),
        None,
    )


@pytest.fixture
def metrics_target() -> Iterator[str]:
    """host:port of an HTTP endpoint serving one overdue job and a replica holding the Lease."""
    registry = CollectorRegistry()
    overdue = Gauge(
        "vigil_job_overdue",
        "1 while the job is past its expectedMaxInterval (labels namespace, job, reason).",
        ["namespace", "job", "reason"],
        registry=registry,
    )
    overdue.labels(**OVERDUE_JOB).set(1)
    leader = Gauge(
        "vigil_leader", "1 while this replica holds the trigger Lease.", registry=registry
    )
    leader.set(1)
    server, thread = start_http_server(0, addr=LOOPBACK, registry=registry)
    try:
        yield f"{LOOPBACK}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_job_overdue_reaches_firing(metrics_target: str, tmp_path: Path) -> None:
    rules = render_rule_file(SHORT_TEST_THRESHOLDS)
    with running_prometheus(tmp_path, targets=[metrics_target], rules=rules) as prometheus:
        alert = wait_for(
            lambda: firing(prometheus.alerts(), "JobOverdue"),
            timeout=FIRING_TIMEOUT_SECONDS,
            what="JobOverdue firing in /api/v1/alerts",
        )
        assert alert["labels"] == {"alertname": "JobOverdue", "severity": "warning", **OVERDUE_JOB}
        assert alert["annotations"]["runbook_url"] == "docs/alerts.md#joboverdue"
        assert "media/nightly-report" in alert["annotations"]["summary"]
        active = {item["labels"]["alertname"] for item in prometheus.alerts()}
        assert active == {"JobOverdue"}, "NoTriggerLeader must stay quiet while a leader reports 1"
