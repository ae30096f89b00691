"""The eleven-days story, compressed in time: a job that silently stops must be impossible to miss.

A recurring job with a short expectedMaxInterval succeeds; then its next
occurrence is removed from its bucket — the broken-chain bug, which produces no
error at all. The schedule-integrity audit must report the broken chain within
one audit period, the watchdog must mark the job Overdue (NotFired) once the
interval passes, the metrics must say so, and `kubectl get sj` must show it.
Two more ways a job fails silently: pods that keep failing while the scheduler
fires happily (Overdue, Failing), and output that stops being refreshed while
every pod succeeds (OutputStale).
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.jobs import (
    condition,
    create_job,
    get_job,
    parse_time,
    wait_for_ledger,
)
from tests.integration.operators import OperatorFleet
from tests.waiting import wait_for
from vigil.kube.stores.buckets import KubeBucketStore
from vigil.model import GROUP, VERSION
from vigil.model.names import SCHEDULE_BUCKETS

WATCHDOG = {"intervalSeconds": 1, "suspendedMaxAge": "1h"}
AUDIT = {"intervalSeconds": 2, "repair": False, "chainGraceSeconds": 2}
INTERVAL = timedelta(seconds=8)  # the nightly job's expectedMaxInterval


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def watched_fleet(cluster: KubeCluster, tmp_path: Path) -> tuple[OperatorFleet, int]:
    port = free_port()
    fleet = OperatorFleet(cluster, tmp_path, watchdog=WATCHDOG, audit=AUDIT, http={"metricsPort": port, "apiPort": 0})
    fleet.start()
    fleet.leader()
    return fleet, port


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def condition_true(cluster: KubeCluster, namespace: str, name: str, type_: str) -> dict[str, Any] | None:
    c = condition(get_job(cluster, namespace, name), type_)
    return c if c and c["status"] == "True" else None


def pending_entries(cluster: KubeCluster, operator_ns: str, uid: str) -> list[tuple[str, str]]:
    items = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, operator_ns, SCHEDULE_BUCKETS)["items"]
    out = []
    for bucket in items:
        fired = (bucket.get("status") or {}).get("fired") or {}
        for entry in bucket["spec"].get("occurrences") or []:
            if entry["uid"] == uid and entry["key"] not in fired:
                out.append((bucket["metadata"]["name"], entry["key"]))
    return out


def break_the_chain(cluster: KubeCluster, operator_ns: str, uid: str) -> None:
    """Remove the job's pending occurrence from its bucket until none is left (the trigger may race us)."""
    store = KubeBucketStore(cluster.api, namespace=operator_ns, shards=4, max_per_bucket=2000)

    def removed_all() -> bool:
        entries = pending_entries(cluster, operator_ns, uid)
        for bucket, key in entries:
            store.remove(bucket, key)
        return not entries and not pending_entries(cluster, operator_ns, uid)

    wait_for(removed_all, timeout=30, what="the chain head to be gone")


def test_a_job_that_silently_stops_is_reported(cluster: KubeCluster, namespace: str, tmp_path: Path) -> None:
    fleet, port = watched_fleet(cluster, tmp_path)
    try:
        interval = f"{INTERVAL.seconds}s"
        job = create_job(cluster, namespace, "nightly", every="2s", jitter="0s", expectedMaxInterval=interval)
        wait_for(
            lambda: (get_job(cluster, namespace, "nightly").get("status") or {}).get("lastSuccessfulTime"),
            timeout=60,
            what="a first success",
        )
        break_the_chain(cluster, fleet.namespace, job["metadata"]["uid"])

        chain = wait_for(
            lambda: condition_true(cluster, namespace, "nightly", "ScheduleChainBroken"),
            timeout=AUDIT["intervalSeconds"] + 15,
            what="the audit to report the broken chain",
        )
        assert chain["reason"] == "NoFutureOccurrence"
        # The last occurrence fired before the break may still be finishing when the interval
        # first runs out; the verdict settles on NotFired once nothing is in flight.
        overdue = wait_for(
            lambda: (c := condition_true(cluster, namespace, "nightly", "Overdue")) and c["reason"] == "NotFired" and c,
            timeout=40,
            what="Overdue with reason NotFired",
        )
        assert "expectedMaxInterval" in overdue["message"] or "8s" in overdue["message"], overdue
        # Not raised early: only once the interval since the last success has run out (whole seconds).
        last_success = parse_time(get_job(cluster, namespace, "nightly")["status"]["lastSuccessfulTime"])
        raised = parse_time(overdue["lastTransitionTime"])
        assert raised >= last_success + INTERVAL - timedelta(seconds=1), (raised, last_success)

        def overdue_scraped() -> str | None:
            text = scrape(port)
            return text if 'vigil_job_overdue{job="nightly"' in text else None

        metrics = wait_for(overdue_scraped, timeout=20, what="the overdue metric")
        assert f'vigil_job_overdue{{job="nightly",namespace="{namespace}",reason="NotFired"}} 1.0' in metrics
        assert f'vigil_schedule_chain_broken{{job="nightly",namespace="{namespace}"}} 1.0' in metrics
        assert 'vigil_job_seconds_since_last_success{job="nightly"' in metrics

        events = cluster.core.list_namespaced_event(namespace, field_selector="involvedObject.name=nightly").items
        reasons = {e.reason for e in events}
        assert {"Overdue", "ScheduleChainBroken"} <= reasons

        table = cluster.kubectl("get", "sj", "-n", namespace).stdout
        assert "NotFired" in table, table
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)


def test_a_job_whose_pods_keep_failing_is_overdue_while_it_fires(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    fleet, _ = watched_fleet(cluster, tmp_path)
    try:
        create_job(
            cluster, namespace, "broken", command="exit 1", every="2s", jitter="0s",
            expectedMaxInterval="6s", retry={"maxAttempts": 1},
        )  # fmt: skip
        overdue = wait_for(lambda: condition_true(cluster, namespace, "broken", "Overdue"), timeout=60, what="Overdue")
        assert overdue["reason"] == "Failing", overdue
        ledger = (get_job(cluster, namespace, "broken").get("status") or {}).get("occurrences") or []
        assert any(e["outcome"] == "Fired" for e in ledger), "the scheduler was firing all along"
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)


def test_output_that_stops_updating_is_stale_even_though_pods_succeed(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    fleet, _ = watched_fleet(cluster, tmp_path)
    try:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        cluster.core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="report"), data={"producedAt": stamp}),
        )
        create_job(
            cluster, namespace, "reporter", every="2s", jitter="0s",
            freshness={"configMap": {"name": "report", "key": "producedAt"}, "maxAge": "5s"},
        )  # fmt: skip
        wait_for(
            lambda: (get_job(cluster, namespace, "reporter").get("status") or {}).get("lastSuccessfulTime"),
            timeout=60,
            what="successful runs",
        )
        stale = wait_for(
            lambda: condition_true(cluster, namespace, "reporter", "OutputStale"), timeout=40, what="OutputStale"
        )
        assert "maxAge is 5s" in stale["message"], stale
        recent = (get_job(cluster, namespace, "reporter").get("status") or {}).get("recent") or []
        assert recent and all(r["outcome"] == "Succeeded" for r in recent), "every pod succeeded"
        cluster.core.patch_namespaced_config_map(
            "report", namespace, {"data": {"producedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}}
        )
        wait_for(
            lambda: (condition(get_job(cluster, namespace, "reporter"), "OutputStale") or {}).get("status") == "False",
            timeout=30,
            what="OutputStale to clear once the output is fresh again",
        )
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)


def kubectl_vigil(cluster: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "PATH": f"{REPO / '.venv' / 'bin'}:{cluster.env['PATH']}"}
    return subprocess.run(
        [str(cluster.bin / "kubectl"), "vigil", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_audit_reports_and_repairs_a_broken_chain(cluster: KubeCluster, namespace: str, tmp_path: Path) -> None:
    fleet = OperatorFleet(cluster, tmp_path, watchdog={"enabled": False})
    fleet.start()
    fleet.leader()
    try:
        job = create_job(
            cluster, namespace, "chain", every="2s", jitter="0s", catchUpPolicy="None", catchUpWindow="3s"
        )
        wait_for(lambda: (get_job(cluster, namespace, "chain").get("status") or {}).get("lastScheduleTime"),
                 timeout=60, what="a first fire")  # fmt: skip
        break_the_chain(cluster, fleet.namespace, job["metadata"]["uid"])

        def audit_finds_it() -> subprocess.CompletedProcess[str] | None:
            result = kubectl_vigil(cluster, "audit", "--operator-namespace", fleet.namespace, "--grace-seconds", "2")
            return result if "ScheduleChainBroken" in result.stdout and "chain" in result.stdout else None

        found = wait_for(audit_finds_it, timeout=180, what="the audit to find the broken chain")
        assert found.returncode == 1, found.stdout + found.stderr
        time.sleep(6)  # the scenario: the broken chain stays broken for a while, so its gap is late
        repaired = kubectl_vigil(
            cluster, "audit", "--repair", "--operator-namespace", fleet.namespace, "--grace-seconds", "2"
        )
        assert "repaired 1" in repaired.stdout, repaired.stdout + repaired.stderr
        after = datetime.now(UTC)
        entries = wait_for_ledger(cluster, namespace, "chain", through=after + timedelta(seconds=4), timeout=60)
        assert any(e["outcome"] == "Missed" for e in entries), "the gap went through the catch-up policy"
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)


def test_the_watchdog_can_run_as_its_own_process(cluster: KubeCluster, namespace: str, tmp_path: Path) -> None:
    """The verdicts come from the watchdog process; the operator fires but publishes no verdict at all."""
    fleet = OperatorFleet(cluster, tmp_path, watchdog={**WATCHDOG, "mode": "separate"}, audit=AUDIT)
    operator_port, watchdog_port = free_port(), free_port()
    fleet.start(http={"metricsPort": operator_port})
    watchdog = fleet.start("watchdog", http={"metricsPort": watchdog_port})
    fleet.leader()
    try:
        create_job(
            cluster, namespace, "failing", command="exit 1", every="2s", jitter="0s",
            expectedMaxInterval="6s", retry={"maxAttempts": 1},
        )  # fmt: skip
        overdue = wait_for(lambda: condition_true(cluster, namespace, "failing", "Overdue"), timeout=60, what="Overdue")
        assert overdue["reason"] == "Failing"
        lease = cluster.coordination.read_namespaced_lease("vigil-watchdog", fleet.namespace)
        assert lease.spec.holder_identity == watchdog.name
        verdict = f'vigil_job_overdue{{job="failing",namespace="{namespace}",reason="Failing"}} 1.0'
        wait_for(lambda: verdict in scrape(watchdog_port), timeout=20, what="the watchdog's overdue metric")
        operator_metrics = scrape(operator_port)
        assert "vigil_trigger_fired_total" in operator_metrics, "the operator's own metrics are served"
        assert 'job="failing"' not in operator_metrics, "the operator ran a watchdog pass of its own"
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)


def test_report_suspended_lists_owner_reason_and_age(cluster: KubeCluster, namespace: str) -> None:
    create_job(
        cluster, namespace, "paused", every="1h", suspend=True,
        suspendReason="upstream outage INC-42", suspendedBy="alice",
    )  # fmt: skip
    result = kubectl_vigil(cluster, "report", "suspended", "-n", namespace)
    assert result.returncode == 0, result.stderr
    assert "paused" in result.stdout and "alice" in result.stdout and "INC-42" in result.stdout
