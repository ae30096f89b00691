"""`kubectl vigil executions JOB` still lists what retention deleted, from the history database.

A real operator (the chart's identity, its HTTP API on a local port) runs an `every: 1s` job that
keeps 2 succeeded Executions. Once it has run at least ten times and settled, the plugin, run by
kubectl as a tenant whose kubeconfig holds a ServiceAccount token with get/list on the job and
its Executions, shows the 2 Executions (FROM `cluster`) and every pruned one (FROM `history`),
newest first, exactly the executions the history database holds; `--history 3` the newest three
pruned ones; `--history 0` the Executions alone, as before. When the history cannot be asked — an
address nobody serves, a kubeconfig with a client certificate and no token — it says why in one
line on stderr and still shows the Executions (exit 0); VIGIL_API_TOKEN supplies a token; an
address that is no http(s) URL is refused (exit 2).
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import create_job, executions, patch_spec, wait_all_executions_finished
from tests.integration.operators import OperatorFleet
from tests.integration.test_cli import SCRIPTS
from tests.integration.test_http_access import GROUP, free_port, token_of
from tests.waiting import wait_for
from vigil.cli.errors import EXIT_BAD_INPUT
from vigil.core.history import ExecutionSummary
from vigil.history.store import SqlHistory

KEPT = {"succeeded": 2, "failed": 1}
RUNS = 10  # executions the job runs before it is suspended: 8 or more are pruned
HEADER = ["EXECUTION", "SCHEDULED", "PHASE", "ATTEMPT", "REASON", "AGE"]
TENANT_RULES = [
    client.V1PolicyRule(api_groups=[GROUP], resources=["scheduledjobs", "executions"], verbs=["get", "list"])
]


@pytest.fixture
def operator_api(cluster: KubeCluster, fleet: OperatorFleet) -> Iterator[str]:
    port = free_port()
    fleet.start(http={"apiPort": port})
    fleet.leader()
    yield f"http://127.0.0.1:{port}"


def recorded(fleet: OperatorFleet, namespace: str) -> list[ExecutionSummary]:
    """Every execution of the job in the operator's history database, newest first."""
    history = SqlHistory(f"sqlite:///{fleet.workdir}/history.db")
    try:
        return history.job_executions(namespace, "churn", limit=500).executions
    except Exception:  # the operator may not have created the database yet
        return []
    finally:
        history.close()


def tenant_kubeconfig(cluster: KubeCluster, path: Path, *, namespace: str, token: str) -> Path:
    """The admin's kubeconfig with the tenant's token for a user, in the test's namespace."""
    admin = json.loads(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["name"]
    config = {
        **admin,
        "users": [{"name": "tenant", "user": {"token": token}}],
        "contexts": [{"name": "tenant", "context": {"cluster": server, "user": "tenant", "namespace": namespace}}],
        "current-context": "tenant",
    }
    path.write_text(json.dumps(config))
    return path


def plugin(cluster: KubeCluster, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`kubectl vigil ARGS` as a user runs it, with `env` added to the environment."""
    inherited = {k: v for k, v in cluster.env.items() if k not in ("VIGIL_API_URL", "VIGIL_API_TOKEN")}
    environ = {**inherited, "PATH": f"{SCRIPTS}:{cluster.env['PATH']}", **env}
    return subprocess.run(
        [str(cluster.bin / "kubectl"), "vigil", *args], env=environ, capture_output=True, text=True, timeout=60
    )


def table(proc: subprocess.CompletedProcess[str], *, history: bool) -> list[list[str]]:
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == HEADER + (["FROM"] if history else []), proc.stdout
    return [line.split() for line in lines[1:]]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_executions_that_retention_deleted_are_listed_from_the_history(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, operator_api: str, tmp_path: Path
) -> None:
    create_job(cluster, namespace, "churn", every="1s", jitter="0s", retry={"maxAttempts": 1}, retention=KEPT)
    wait_for(lambda: len(recorded(fleet, namespace)) >= RUNS, timeout=120, what=f"{RUNS} executions in the history")
    patch_spec(cluster, namespace, "churn", {"suspend": True, "suspendReason": "end of test"})
    wait_all_executions_finished(cluster, namespace, timeout=60)

    def settled() -> bool:
        items = executions(cluster, namespace)
        in_history = {summary.execution_id for summary in recorded(fleet, namespace)}
        written = all(e["metadata"]["name"] in in_history for e in items)
        return written and len(items) == KEPT["succeeded"]

    wait_for(settled, timeout=60, what=f"retention to leave {KEPT['succeeded']} Executions")
    live = [e["metadata"]["name"] for e in executions(cluster, namespace)]
    history = [s.execution_id for s in recorded(fleet, namespace)]
    pruned = [name for name in history if name not in live]
    assert set(live) <= set(history) and len(pruned) >= RUNS - KEPT["succeeded"], (live, history)

    token = token_of(cluster, namespace, "tenant", TENANT_RULES)
    kubeconfig = str(tenant_kubeconfig(cluster, tmp_path / "tenant.kubeconfig", namespace=namespace, token=token))
    as_tenant = {"KUBECONFIG": kubeconfig, "VIGIL_API_URL": operator_api}

    proc = plugin(cluster, "executions", "churn", "--history", "100", **as_tenant)
    rows = table(proc, history=True)
    assert proc.stderr == ""
    assert [row[0] for row in rows] == history  # newest first, every one
    assert {row[0]: row[-1] for row in rows} == {name: "history" if name in pruned else "cluster" for name in history}
    assert all(row[2:5] == ["Succeeded", "1", "Completed"] for row in rows), rows

    rows = table(plugin(cluster, "executions", "churn", "--history", "3", **as_tenant), history=True)
    assert [row[0] for row in rows if row[-1] == "history"] == pruned[:3]

    proc = plugin(cluster, "executions", "churn", "--history", "0", **as_tenant)
    assert sorted(row[0] for row in table(proc, history=False)) == sorted(live) and proc.stderr == ""

    nobody = f"http://127.0.0.1:{closed_port()}"
    proc = plugin(cluster, "executions", "churn", **{**as_tenant, "VIGIL_API_URL": nobody})
    assert sorted(row[0] for row in table(proc, history=False)) == sorted(live)
    assert proc.stderr.count("\n") == 1 and f"cannot reach the operator's API at {nobody}" in proc.stderr

    as_admin = {"VIGIL_API_URL": operator_api}  # the admin's kubeconfig holds a client certificate
    proc = plugin(cluster, "executions", "churn", "-n", namespace, **as_admin)
    assert len(table(proc, history=False)) == len(live)
    assert proc.stderr.count("\n") == 1 and "set VIGIL_API_TOKEN" in proc.stderr
    proc = plugin(cluster, "executions", "churn", "-n", namespace, **as_admin, VIGIL_API_TOKEN=token)
    assert len(table(proc, history=True)) == len(history)

    proc = plugin(cluster, "executions", "churn", "--api-url", "localhost:8080", **as_tenant)
    assert proc.returncode == EXIT_BAD_INPUT and "--api-url or VIGIL_API_URL" in proc.stderr

