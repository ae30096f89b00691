"""`kubectl vigil queue stats` against the real API server: the TaskQueues' statuses as the API
server holds them, and the breakdown per priority and tenant from the operator's queue API.

Two TaskQueues are applied, one given a status (as the operator's status pass writes it, through
the status subresource). The queue API is served in the test process over a real PostgreSQL
queue store (its reviews stood in for, as in tests/queue/test_api.py; the real reviews are
tests/integration/test_queue_access.py's); the plugin runs as kubectl runs it, a subprocess.
Without the operator's address the statuses are still shown, and stderr says why the breakdown
is not; an unknown TaskQueue is bad input (exit 2).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import KubeCluster
from tests.integration.test_cli import SCRIPTS
from tests.integration.test_task_queues import create
from tests.queue.conftest import conninfo
from tests.queue.test_api import Clock
from tests.unit.reviews import Reviews
from vigil.api.queue import QueueApi
from vigil.api.router import ApiServer
from vigil.cli.errors import EXIT_BAD_INPUT
from vigil.model import GROUP, VERSION
from vigil.queue.store import QueueStore, Submission

__all__ = ["postgres"]

pytestmark = pytest.mark.postgres

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def operator_api(postgres: PostgresServer, namespace: str) -> Iterator[str]:
    """The queue API over a real store holding 2 ready executions of `orders` (one 2 minutes
    old, of tenant acme at priority -10) and 1 of tenant bolt."""
    store = QueueStore(conninfo(postgres, postgres.create_database()))
    store.migrate()
    queue = f"{namespace}/orders"
    store.submit(queue, [Submission(task="t", priority=-10, tenant="acme")], now=NOW - timedelta(minutes=2))
    store.submit(queue, [Submission(task="t", tenant="bolt"), Submission(task="t", tenant="bolt")], now=NOW)
    reviews = Reviews(lambda user, access: user.name == "alice")
    server = ApiServer(
        leader=lambda: None, find_execution=lambda _: None, timeline=lambda _: [],
        queue_api=QueueApi(store, clock=Clock(NOW), authenticator=reviews, authorizer=reviews),
    ).serve(0)  # fmt: skip
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def plugin(cluster: KubeCluster, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in cluster.env.items() if k not in ("VIGIL_API_URL", "VIGIL_API_TOKEN")}
    environ = {**inherited, "PATH": f"{SCRIPTS}:{cluster.env['PATH']}", "VIGIL_API_TOKEN": "t-alice", **env}
    return subprocess.run(
        [str(cluster.bin / "kubectl"), "vigil", "queue", *args], env=environ, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


@pytest.fixture
def queues(cluster: KubeCluster, namespace: str) -> None:
    create(cluster, namespace, "orders", {"objective": {"oldestReadyAge": "1m"}})
    create(cluster, namespace, "billing", {})
    status = {
        "ready": 3, "leased": 0, "dead": 0, "oldestReadyAge": "2m", "oldestReadySeconds": 120,
        "succeededPerMinute": 7, "deadPerMinute": 0,
        "conditions": [{
            "type": "Behind", "status": "True", "reason": "OldestReadyTooOld", "message": "2m > 1m",
            "lastTransitionTime": NOW.isoformat().replace("+00:00", "Z"),
        }],
    }  # fmt: skip
    cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "taskqueues", "orders", {"status": status}
    )


def test_stats_show_every_taskqueue_and_the_breakdown_per_priority_and_tenant(
    cluster: KubeCluster, namespace: str, queues: None, operator_api: str
) -> None:
    proc = plugin(cluster, "stats", "-n", namespace, VIGIL_API_URL=operator_api)

    assert (proc.returncode, proc.stderr) == (0, "")
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert lines[0] == ["NAME", "READY", "LEASED", "DEAD", "OLDEST", "OBJECTIVE", "BEHIND", "OK/MIN", "DEAD/MIN", "AGE"]
    assert lines[1][:9] == ["billing", "-", "-", "-", "-", "-", "-", "-", "-"]
    assert lines[2][:9] == ["orders", "3", "0", "0", "2m", "1m", "True", "7", "0"]
    assert lines[4:] == [
        ["orders:", "by", "priority", "and", "tenant"],
        ["PRIORITY", "TENANT", "READY", "LEASED", "DEAD", "OLDEST"],
        ["-10", "acme", "1", "0", "0", "2m"],
        ["0", "bolt", "2", "0", "0", "0s"],
    ]


def test_stats_of_one_queue_as_json(cluster: KubeCluster, namespace: str, queues: None, operator_api: str) -> None:
    proc = plugin(cluster, "stats", "orders", "-n", namespace, "-o", "json", VIGIL_API_URL=operator_api)
    assert proc.returncode == 0, proc.stderr
    [queue] = json.loads(proc.stdout)["queues"]
    assert (queue["name"], queue["status"]["ready"], queue["status"]["oldestReadySeconds"]) == ("orders", 3, 120)
    assert [(b["priority"], b["tenant"], b["ready"]) for b in queue["breakdown"]] == [(-10, "acme", 1), (0, "bolt", 2)]


def test_without_the_operators_address_the_statuses_are_still_shown(
    cluster: KubeCluster, namespace: str, queues: None
) -> None:
    proc = plugin(cluster, "stats", "orders", "-n", namespace)
    assert proc.returncode == 0
    assert [line.split()[0] for line in proc.stdout.splitlines()] == ["NAME", "orders"]
    assert proc.stderr == (
        "kubectl vigil: the breakdown per priority and tenant is not shown: no address for the operator's API: "
        "set VIGIL_API_URL or --api-url (docs/executions.md)\n"
    )


def test_an_unknown_taskqueue_is_bad_input(cluster: KubeCluster, namespace: str) -> None:
    proc = plugin(cluster, "stats", "nope", "-n", namespace)
    assert proc.returncode == EXIT_BAD_INPUT
    assert proc.stderr == f'kubectl vigil: taskqueue "nope" not found in namespace "{namespace}"\n'


def test_a_namespace_without_taskqueues_says_so(cluster: KubeCluster, namespace: str) -> None:
    proc = plugin(cluster, "stats", "-n", namespace)
    assert (proc.returncode, proc.stdout) == (0, "")
    assert proc.stderr == f'No taskqueues in namespace "{namespace}".\n'
