"""Log tails that outlive their pods, on the real node (kubelet, containerd 2, runc): the node
agent serves no logs.

A job whose attempt prints hostile output — 300 KB, a NUL byte, invalid UTF-8 — and fails,
with `retention.failed: 0`, so retention deletes its Execution (and the pod with it) as soon
as it may: the tail is stored first (retention waits for it), bounded to 64 KiB of valid
text without NUL, its end intact; and `kubectl vigil logs JOB` (the plugin, as a user runs
it) shows it once the pod is gone. A second job with `spec.logs: none` stores nothing and
its Execution goes all the same (nothing waits for a tail that is not wanted). A running pod's log is followed (`-f`) to its
end, from the pod, and a success's tail is not kept under the default `spec.logs: failed`.
A workflow step's failed attempt (`kubectl vigil logs WORKFLOW STEP`): from its pod, then,
the pod deleted, from the history.

The stored tail is served to the CLI by a stand-in for the operator's route
(GET /namespaces/{ns}/executions/{id}/log, vigil.cli.operatorapi.OperatorApi.attempt_log)
reading the operator's own history database, until the API package serves it.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from e2e.cluster import images
from tests.integration.conftest import KubeCluster
from tests.integration.jobs import (
    create_job,
    get_execution,
    make_namespace,
    rfc3339,
)
from tests.integration.operators import OperatorFleet
from tests.integration.test_cli import kubectl_plugin
from tests.integration.workflows import create_workflow, wait_phase
from tests.waiting import wait_for
from vigil.core.history import AttemptState
from vigil.core.ids import execution_id, step_execution_id
from vigil.core.logtail import DEFAULT_TAIL_BYTES, log_tail_to_json
from vigil.history.store import SqlHistory

pytestmark = pytest.mark.kubelet

TIMEOUT = 120
#: 300 KB of `a`, then a NUL, invalid UTF-8 and the line that says why it failed.
HOSTILE = (
    "echo start; head -c 300000 /dev/zero | tr '\\000' a; "
    "printf '\\nNUL:\\000:\\377\\376:bad utf-8\\n'; echo 'the error: boom'; exit 3"
)


@pytest.fixture(scope="module")
def fleet(kubelet_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorFleet]:
    fleet = OperatorFleet(kubelet_cluster, tmp_path_factory.mktemp("log-fleet"))
    fleet.start()
    fleet.leader()
    yield fleet
    fleet.stop()
    kubelet_cluster.clear_namespace(fleet.namespace)


@pytest.fixture
def history(fleet: OperatorFleet) -> Iterator[SqlHistory]:
    store = SqlHistory(str(fleet.settings["history"]["dsn"]))
    store.migrate()  # the operator migrates at its first write; the test may read before that
    yield store
    store.close()


class StoredLogRoute(BaseHTTPRequestHandler):
    """GET /namespaces/{ns}/executions/{id}/log[?attempt=N], and the first page of
    /namespaces/{ns}/scheduledjobs/{job}/executions, from `history` (the operator's database)."""

    history: SqlHistory

    def do_GET(self) -> None:
        parts = urllib.parse.urlsplit(self.path)
        segments = parts.path.strip("/").split("/")
        attempt = urllib.parse.parse_qs(parts.query).get("attempt")
        body: dict[str, Any] = {"reason": "NotFound"}
        if len(segments) == 5 and segments[0] == "namespaces" and segments[2] == "executions" and segments[4] == "log":
            tail = self.history.log_tail(segments[1], segments[3], attempt=int(attempt[0]) if attempt else None)
            body = log_tail_to_json(tail) if tail else body
        elif len(segments) == 5 and segments[0] == "namespaces" and segments[2] == "scheduledjobs":
            page = self.history.job_executions(segments[1], segments[3], limit=1)
            body = {"executions": [{
                "executionId": s.execution_id, "scheduledFor": s.scheduled_for.isoformat(), "state": str(s.state),
                "attempts": s.attempts,
            } for s in page.executions]}  # fmt: skip
        status = 404 if body.get("reason") == "NotFound" else 200
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def api_url(history: SqlHistory, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("VIGIL_API_TOKEN", "a token the stand-in does not check")  # the kubeconfig has certificates
    handler = type("Route", (StoredLogRoute,), {"history": history})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def job(cluster: KubeCluster, namespace: str, name: str, command: str = HOSTILE, **spec: Any) -> str:
    main_container = {"name": "main", "image": images.JOB_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", command]}
    template = {"spec": {"containers": [main_container], "terminationGracePeriodSeconds": 2}}
    run_at = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    obj = create_job(
        cluster, namespace, name, runAt=rfc3339(run_at), template=template,
        retry={"maxAttempts": 1}, retention={"failed": 0}, **spec,
    )  # fmt: skip
    return execution_id(obj["metadata"]["uid"], run_at)


def test_a_failed_attempts_tail_outlives_its_pod_and_kubectl_vigil_logs_shows_it(
    kubelet_cluster: KubeCluster,
    fleet: OperatorFleet,
    history: SqlHistory,
    api_url: str,
) -> None:
    namespace = make_namespace(kubelet_cluster, "logs")
    kept = job(kubelet_cluster, namespace, "fails")
    unwanted = job(kubelet_cluster, namespace, "fails-quietly", logs="none")
    for ex_id in (kept, unwanted):  # retention (failed: 0) deletes each once it is Dead and written
        wait_for(lambda ex_id=ex_id: [r for r in history.timeline(ex_id) if r.state is AttemptState.DEAD],
                 timeout=TIMEOUT, what=f"{ex_id} dead in the history")  # fmt: skip
        wait_for(lambda ex_id=ex_id: get_execution(kubelet_cluster, namespace, ex_id) is None,
                 timeout=TIMEOUT, what=f"retention to delete {ex_id}")  # fmt: skip
    wait_for(lambda: not kubelet_cluster.core.list_namespaced_pod(namespace).items, timeout=TIMEOUT, what="pods gone")

    tail = history.log_tail(namespace, kept)
    assert tail is not None, fleet.logs()
    assert (tail.attempt, tail.pod, tail.note, tail.truncated) == (1, f"{kept}-1", "", True)
    assert tail.text.endswith("\nNUL::\ufffd\ufffd:bad utf-8\nthe error: boom\n")
    assert "\x00" not in tail.text and len(tail.text.encode()) <= DEFAULT_TAIL_BYTES
    assert tail.log_bytes > 300_000
    assert history.log_tail(namespace, unwanted) is None

    shown = kubectl_plugin(kubelet_cluster, "logs", "fails", "-n", namespace, "--api-url", api_url)  # its newest execution
    assert (shown.returncode, shown.stdout) == (0, tail.text), shown.stderr
    assert f"pod {kept}-1 (execution {kept}, attempt 1) is gone" in shown.stderr
    quiet = kubectl_plugin(kubelet_cluster, "logs", unwanted, "-n", namespace, "--api-url", api_url)
    assert (quiet.returncode, quiet.stdout) == (1, "")
    assert "no log of it is stored" in quiet.stderr
    kubelet_cluster.clear_namespace(namespace)


def test_a_live_pods_log_is_followed_until_the_pod_ends(
    kubelet_cluster: KubeCluster, fleet: OperatorFleet, history: SqlHistory, api_url: str
) -> None:
    namespace = make_namespace(kubelet_cluster, "logs")
    ex_id = job(kubelet_cluster, namespace, "talks", "echo first; sleep 4; echo last")

    def running() -> bool:
        pods = kubelet_cluster.core.list_namespaced_pod(namespace).items
        return bool(pods) and pods[0].status.phase == "Running"

    wait_for(running, timeout=TIMEOUT, what="the pod running")
    followed = kubectl_plugin(kubelet_cluster, "logs", "talks", "-n", namespace, "-f", "--api-url", api_url)

    assert (followed.returncode, followed.stdout, followed.stderr) == (0, "first\nlast\n", "")
    wait_for(lambda: [r for r in history.timeline(ex_id) if r.state is AttemptState.SUCCEEDED],
             timeout=TIMEOUT, what="the success in the history")  # fmt: skip
    assert history.log_tail(namespace, ex_id) is None  # spec.logs failed (the default): a success's is not kept
    kubelet_cluster.clear_namespace(namespace)


def test_a_workflow_steps_log_is_read_from_its_pod_then_from_the_history(
    kubelet_cluster: KubeCluster, fleet: OperatorFleet, history: SqlHistory, api_url: str
) -> None:
    namespace = make_namespace(kubelet_cluster, "logs")
    container = {"name": "main", "image": images.JOB_IMAGE, "imagePullPolicy": "Never",
                 "command": ["sh", "-c", "echo step says hello; exit 4"]}  # fmt: skip
    step = {"id": "build", "type": "pod", "template": {"spec": {"containers": [container]}}}
    workflow = create_workflow(kubelet_cluster, namespace, "video-1", steps=[step])
    wait_phase(kubelet_cluster, namespace, "video-1", "Failed", timeout=TIMEOUT)
    execution = step_execution_id(workflow["metadata"]["uid"], "build")

    live = kubectl_plugin(kubelet_cluster, "logs", "video-1", "build", "-n", namespace, "--api-url", api_url)
    assert (live.returncode, live.stdout, live.stderr) == (0, "step says hello\n", "")

    wait_for(lambda: history.log_tail(namespace, execution), timeout=TIMEOUT, what="the step's tail stored")
    kubelet_cluster.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_for(lambda: not kubelet_cluster.core.list_namespaced_pod(namespace).items, timeout=TIMEOUT, what="pods gone")

    gone = kubectl_plugin(kubelet_cluster, "logs", "video-1", "build", "-n", namespace, "--api-url", api_url)
    assert (gone.returncode, gone.stdout) == (0, "step says hello\n"), gone.stderr
    assert f"(execution {execution}, attempt" in gone.stderr and "is gone" in gone.stderr
    kubelet_cluster.clear_namespace(namespace)
