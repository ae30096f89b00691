"""Leadership and firing when the network or the API server is sick, with real operator processes.

* **Hung connection.** The leader reaches the API server through a loopback TCP relay
  (tests/integration/tcpproxy.py) and a standby directly. The relay stops forwarding but closes
  nothing: every request of the leader, its Lease renewals among them, hangs. The leader must stop
  acting (log the loss and exit) within its renew deadline, the standby take over once the Lease
  has expired, and at no time may both act: an `every: 1s` job fires each occurrence once, with no
  gap, and the leader's fire log lines all come before the standby's first.
* **Throttling.** API Priority and Fairness puts the operator's ServiceAccount in a priority level
  with a tiny share and `limitResponse: Reject`, so the API server answers it 429. The operator
  waits the answers out (vigil_api_throttled_total, and the API server's own rejected-requests
  count for that level, go up), every occurrence of a few `every: 1s` jobs still fires exactly
  once, and once the throttling is removed it catches up. The operator's Lease requests keep a
  level of their own (as Kubernetes' own controllers' do), so a 429 never costs leadership; two
  replicas run, as the chart's Deployment runs them, because a leader may still lose its Lease
  when this 2-core machine stalls the API server past the fleet's 2 s renew deadline.

Both use the fleet's short Lease (3 s, renewed every second: a 2 s renew deadline).

* **A hung API server and the CLI.** `kubectl vigil` through the same relay, stopped: the command
  ends within its `--request-timeout` with an error saying the API server did not answer in
  time, instead of hanging the user's terminal.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.approvals import free_port
from tests.integration.conftest import KubeCluster
from tests.integration.jobs import (
    create_job,
    duplicates,
    ledger,
    parse_time,
    rfc3339,
    scheduled_for_by_job,
    wait_for_ledger,
)
from tests.integration.operators import OperatorFleet, OperatorProcess
from tests.integration.tcpproxy import relay, through_proxy
from tests.integration.test_cli import SCRIPTS
from tests.waiting import wait_for
from vigil.cli.errors import EXIT_API_FAILURE
from vigil.kube.lifecycle import EXIT_LOST_LEADERSHIP

LEASE_SECONDS = 3.0  # tests/integration/operators.py's Lease
RENEW_SECONDS = 1.0
RENEW_DEADLINE = LEASE_SECONDS * 2 / 3
#: Added to bounds derived from the election's settings: this 2-core machine runs the API server,
#: etcd, the operators and the test at once, and a starved thread can lose a second or two.
MARGIN_SECONDS = 2.0
OPERATOR_START_TIMEOUT = 60.0  # imports, the first Lease write
JSON_LOGS = {"format": "json", "level": "INFO"}
ONE_SECOND = timedelta(seconds=1)


# --- reading what the operators logged ---------------------------------------------------------


def log_entries(op: OperatorProcess) -> list[dict[str, Any]]:
    entries = []
    for line in op.log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and "message" in entry:
                entries.append(entry)
    return entries


def times_of(op: OperatorProcess, prefix: str) -> list[datetime]:
    return [datetime.fromisoformat(e["time"]) for e in log_entries(op) if e["message"].startswith(prefix)]


def fire_times(op: OperatorProcess) -> list[datetime]:
    return times_of(op, "fired ")


def assert_every_occurrence_once(nominals: list[str], *, through: datetime) -> None:
    """One Execution per second, none twice, none missing, up to `through`."""
    assert not duplicates(nominals), f"occurrences fired twice: {duplicates(nominals)}"
    stamps = sorted(parse_time(n) for n in nominals)
    gaps = [(a, b) for a, b in itertools.pairwise(stamps) if b - a != ONE_SECOND]
    assert not gaps, f"occurrences missing between {[(rfc3339(a), rfc3339(b)) for a, b in gaps]}"
    assert stamps[-1] >= through.replace(microsecond=0) - ONE_SECOND, f"fired only through {rfc3339(stamps[-1])}"


# --- hung connection ----------------------------------------------------------------------------


def test_a_leader_whose_connection_stops_forwarding_stops_within_its_deadline_and_never_overlaps_the_standby(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, tmp_path: Path
) -> None:
    with relay(cluster) as proxy:
        leader = fleet.start(kubeconfig=through_proxy(fleet.identity.kubeconfig, proxy, tmp_path / "relayed"),
                             logging=JSON_LOGS)  # fmt: skip
        assert fleet.leader(timeout=OPERATOR_START_TIMEOUT) is leader
        standby = fleet.start(logging=JSON_LOGS)  # straight to the API server
        wait_for(lambda: times_of(standby, f"{standby.name} campaigning"), timeout=OPERATOR_START_TIMEOUT,
                 what="the standby to campaign")  # fmt: skip
        create_job(cluster, namespace, "steady", every="1s", jitter="0s")
        wait_for(lambda: len(fire_times(leader)) >= 3, timeout=60, what="the leader firing through the relay")

        proxy.stop_forwarding()
        cut = time.monotonic()
        wait_for(lambda: not leader.alive, timeout=RENEW_DEADLINE + MARGIN_SECONDS, interval=0.05,
                 what="the leader to stop within its renew deadline")  # fmt: skip
        stopped_after = time.monotonic() - cut
        # The Lease expires a whole duration after the leader's last renewal, at most a renew
        # period before the cut; the standby polls every half period and claims with one write.
        wait_for(lambda: fleet.holder() == standby.name, timeout=LEASE_SECONDS + RENEW_SECONDS + MARGIN_SECONDS,
                 interval=0.05, what="the standby to take the Lease")  # fmt: skip
        taken_after = time.monotonic() - cut
        print(f"leader stopped {stopped_after:.2f}s after the cut; standby leads after {taken_after:.2f}s")

    assert leader.proc.returncode == EXIT_LOST_LEADERSHIP
    [lost_at] = times_of(leader, "lost leadership of lease")
    [acquired_at] = times_of(standby, "acquired leadership")
    assert lost_at < acquired_at, "the standby led before the old leader stopped"
    until = datetime.now(UTC) + timedelta(seconds=3)
    wait_for_ledger(cluster, namespace, "steady", through=until, timeout=30)
    leader_fired, standby_fired = fire_times(leader), fire_times(standby)
    assert standby_fired, "the standby never fired"
    assert max(leader_fired) < lost_at < min(standby_fired), "both operators fired in the same interval"
    assert_every_occurrence_once(scheduled_for_by_job(cluster, namespace)["steady"], through=until)
    fired = [e["nominal"] for e in ledger(cluster, namespace, "steady") if e["outcome"] == "Fired"]
    assert not duplicates(fired)


# --- throttling -----------------------------------------------------------------------------------

THROTTLED_JOBS = 6
#: 429s the operator must have waited out before the throttling is lifted.
THROTTLED_WANTED = 20
THROTTLED_TIMEOUT = 120.0
CATCH_UP_TIMEOUT = 60.0


def apf_objects(user: str, *, name: str, lease_namespace: str) -> list[dict[str, Any]]:
    """A priority level with a tiny share that rejects what it cannot seat at once, a FlowSchema
    sending `user` there, and one (matched first) keeping its Lease requests in `leader-election`."""
    subject = [{"kind": "User", "user": {"name": user}}]
    api = "flowcontrol.apiserver.k8s.io/v1"
    return [
        {
            "apiVersion": api,
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 1,  # about 3 seats of the server's 600
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,  # and never more
                    "limitResponse": {"type": "Reject"},
                },
            },
        },
        {
            "apiVersion": api,
            "kind": "FlowSchema",
            "metadata": {"name": f"{name}-lease"},
            "spec": {
                "priorityLevelConfiguration": {"name": "leader-election"},
                "matchingPrecedence": 150,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": subject,
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["coordination.k8s.io"],
                                       "resources": ["leases"], "namespaces": [lease_namespace]}],
                }],
            },
        },
        {
            "apiVersion": api,
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 160,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": subject,
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                       "clusterScope": True, "namespaces": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }],
            },
        },
    ]  # fmt: skip


@contextlib.contextmanager
def throttled(cluster: KubeCluster, objects: list[dict[str, Any]]) -> Iterator[None]:
    text = yaml.safe_dump_all(objects)
    cluster.kubectl("apply", "-f", "-", input=text)
    try:
        yield
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=text)


def throttled_total(ports: list[int]) -> float:
    """vigil_api_throttled_total summed over the operators still serving metrics."""
    total = 0.0
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                text = answer.read().decode()
        except OSError:
            continue  # that replica exited (a slow API server can cost a leader its Lease)
        total += sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "vigil_api_throttled_total"
        )
    return total


def rejected_by_server(cluster: KubeCluster, level: str) -> float:
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "apiserver_flowcontrol_rejected_requests_total"
        and sample.labels.get("priority_level") == level
    )


def test_a_throttled_operator_waits_out_the_429s_and_fires_every_occurrence_once(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    ports = [free_port(), free_port()]
    for port in ports:  # two replicas, as a Deployment runs them: a leader and a standby
        fleet.start(http={"metricsPort": port, "apiPort": 0})
    fleet.leader(timeout=OPERATOR_START_TIMEOUT)
    names = [f"tick-{i}" for i in range(THROTTLED_JOBS)]
    for name in names:
        create_job(cluster, namespace, name, every="1s", jitter="0s")
    wait_for(lambda: all(ledger(cluster, namespace, n) for n in names), timeout=60, what="every job firing")

    level = f"vigil-throttle-{fleet.namespace}"
    user = f"system:serviceaccount:{fleet.namespace}:{fleet.identity.service_account}"
    with throttled(cluster, apf_objects(user, name=level, lease_namespace=fleet.namespace)):
        wait_for(lambda: throttled_total(ports) >= THROTTLED_WANTED, timeout=THROTTLED_TIMEOUT, interval=0.5,
                 what=f"the operators to wait out {THROTTLED_WANTED} 429s")  # fmt: skip
        rejected = rejected_by_server(cluster, level)
    lifted = datetime.now(UTC)
    print(f"the API server rejected {rejected:.0f} of the operators' requests; they counted {throttled_total(ports):.0f}")
    assert rejected > 0, "the API server's own count shows no 429 for the operators' priority level"
    fleet.leader(timeout=OPERATOR_START_TIMEOUT)  # someone leads (the Lease's requests are never throttled)

    until = lifted + timedelta(seconds=3)
    for name in names:
        wait_for_ledger(cluster, namespace, name, through=until, timeout=CATCH_UP_TIMEOUT)
    nominals = scheduled_for_by_job(cluster, namespace)
    for name in names:
        assert_every_occurrence_once(nominals[name], through=until)
        outcomes = {e["outcome"] for e in ledger(cluster, namespace, name)}
        assert outcomes == {"Fired"}, f"{name}: {outcomes}"


CLI_TIMEOUT_SECONDS = 2.0
#: Python's start and the plugin's imports, plus one more try of a connection that timed out
#: (urllib3 tries a failed connect twice): well under the 30 s default, so the flag is what ends it.
CLI_SLACK_SECONDS = 12.0


def test_a_hung_api_server_ends_a_cli_command_with_a_clear_error_within_its_timeout(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    create_job(cluster, namespace, "steady", every="1h")
    with relay(cluster) as proxy:
        kubeconfig = through_proxy(cluster.kubeconfig, proxy, tmp_path / "relayed")
        env = {**cluster.env, "KUBECONFIG": str(kubeconfig), "PATH": f"{SCRIPTS}:{cluster.env['PATH']}"}
        command = [str(cluster.bin / "kubectl"), "vigil", "--request-timeout", f"{CLI_TIMEOUT_SECONDS:g}s",
                   "occurrences", "steady", "-n", namespace]  # fmt: skip
        answered = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert answered.returncode == 0, answered.stderr  # through the relay while it forwards
        proxy.stop_forwarding()
        started = time.monotonic()
        hung = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
    assert hung.returncode == EXIT_API_FAILURE, (hung.returncode, hung.stderr)
    assert "did not answer in time (--request-timeout)" in hung.stderr, hung.stderr
    assert "Traceback" not in hung.stderr
    assert took <= CLI_TIMEOUT_SECONDS * 2 + CLI_SLACK_SECONDS, f"took {took:.1f}s"
