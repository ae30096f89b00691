"""`kubectl vigil timeline WF` still shows a workflow its ttlAfterFinished deleted, from the history database.

A real operator (the chart's identity, its HTTP API on a local port) runs a workflow of a pod
step and a wait step with `ttlAfterFinished: 3s` to the end, and deletes it. Its history rows
were written before that, entry 0 with the definition the Workflow pinned. Then, through the
operator's HTTP API and the real API server's reviews:

* the plugin, run by kubectl as a tenant whose ServiceAccount token may get workflows there,
  shows the same step table (and, with `--events`, the same entries) the object showed, under
  "FROM history: the Workflow was deleted (ttlAfterFinished)";
* the route answers 401 without a token, 403 to a tenant who may only list executions and to
  one who may get another workflow only (`resourceNames`), 200 to the reader;
* a name with neither an object nor history rows is an error naming it (exit 2); without an
  address for the API, or with one nobody serves, it says so in one line (exit 1).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.test_cli_history import closed_port, plugin, tenant_kubeconfig
from tests.integration.test_http_access import GROUP, free_port, token_of
from tests.integration.workflows import create_workflow, get_workflow, pod_step, wait_phase
from tests.waiting import wait_for
from vigil.cli.errors import EXIT_API_FAILURE, EXIT_BAD_INPUT
from vigil.cli.timeline import events_lines, timeline_lines
from vigil.history.store import SqlHistory

READ_WORKFLOWS = [client.V1PolicyRule(api_groups=[GROUP], resources=["workflows"], verbs=["get"])]
LIST_EXECUTIONS = [client.V1PolicyRule(api_groups=[GROUP], resources=["executions"], verbs=["get", "list"])]
ANOTHER_WORKFLOW = [
    client.V1PolicyRule(api_groups=[GROUP], resources=["workflows"], verbs=["get"], resource_names=["another"])
]
STEPS = [pod_step("build"), {"id": "settle", "type": "wait", "dependsOn": ["build"], "wait": {"duration": "1s"}}]


def gone(cluster: KubeCluster, namespace: str, name: str) -> bool:
    try:
        get_workflow(cluster, namespace, name)
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def status_of(url: str, token: str | None) -> int:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            code: int = response.status
            return code
    except urllib.error.HTTPError as error:
        with error:
            return error.code


def test_a_workflow_its_ttl_deleted_is_shown_from_the_history(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    fleet = OperatorFleet(cluster, tmp_path)
    try:
        fleet.start(http={"apiPort": port})
        fleet.leader()
        operator_api = f"http://127.0.0.1:{port}"
        create_workflow(cluster, namespace, "release", steps=STEPS, ttlAfterFinished="3s")
        done = wait_phase(cluster, namespace, "release", "Succeeded")
        wait_for(lambda: gone(cluster, namespace, "release"), timeout=60, what="release deleted by its TTL")

        store = SqlHistory(fleet.settings["history"]["dsn"])
        try:
            rows = store.workflow_events(namespace, "release")
        finally:
            store.close()
        assert [dict(row.data) for row in rows] == done["status"]["history"]
        assert rows[0].definition == done["status"]["definition"]

        reader = token_of(cluster, namespace, "reader", READ_WORKFLOWS)
        as_reader = {
            "KUBECONFIG": str(tenant_kubeconfig(cluster, tmp_path / "reader", namespace=namespace, token=reader)),
            "VIGIL_API_URL": operator_api,
        }
        now = datetime.now(UTC)
        shown = plugin(cluster, "timeline", "release", **as_reader)
        assert shown.returncode == 0 and shown.stderr == "", shown.stderr
        lines, live = shown.stdout.splitlines(), timeline_lines(done, now=now)
        count = len(done["status"]["history"])
        assert lines[0] == f"FROM history: the Workflow was deleted (ttlAfterFinished); {count} history entries from the history database"
        assert lines[1].split(" (")[0] == live[0].split(" (")[0]  # "workflow NS/release: Succeeded, started T"
        assert lines[2:] == live[1:]
        assert [line.split()[:3] for line in lines[4:]] == [["build", "pod", "Succeeded"], ["settle", "wait", "Succeeded"]]

        events = plugin(cluster, "timeline", "release", "--events", "-n", namespace, **as_reader)
        assert events.returncode == 0, events.stderr
        assert events.stdout.splitlines()[2:] == events_lines(done, now=now)[1:]

        # The route itself, asked with the real API server's reviews.
        route = f"{operator_api}/namespaces/{namespace}/workflows/release/history"
        lister = token_of(cluster, namespace, "lister", LIST_EXECUTIONS)
        neighbour = token_of(cluster, namespace, "neighbour", ANOTHER_WORKFLOW)
        assert [status_of(route, token) for token in (None, lister, neighbour, reader)] == [401, 403, 403, 200]
        as_lister = {**as_reader, "VIGIL_API_TOKEN": lister}  # the kubeconfig may get it, the token may not
        refused = plugin(cluster, "timeline", "release", **as_lister)
        assert refused.returncode == EXIT_API_FAILURE
        assert "lister may not get workflows.vigil.dev release in namespace" in refused.stderr

        missing = plugin(cluster, "timeline", "never-was", **as_reader)
        assert missing.returncode == EXIT_BAD_INPUT
        assert missing.stderr.strip() == (
            f'kubectl vigil: workflow "never-was" not found in namespace "{namespace}", nor in the history database'
        )
        for env, words in (
            ({"VIGIL_API_URL": ""}, "set VIGIL_API_URL or --api-url"),
            ({"VIGIL_API_URL": f"http://127.0.0.1:{closed_port()}"}, "cannot reach the operator's API"),
        ):
            unasked = plugin(cluster, "timeline", "release", **{**as_reader, **env})
            assert unasked.returncode == EXIT_API_FAILURE and unasked.stderr.count("\n") == 1, unasked.stderr
            assert 'workflow "release" not found in namespace' in unasked.stderr and words in unasked.stderr
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)
