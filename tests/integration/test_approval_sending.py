"""A slow notifier holds no workflow pass: approval tokens are sent off the engine.

The notifier here is a real HTTP server on loopback whose handler takes 30 s per call: it
blocks on an Event that the test releases (or on its 30 s). The engine's passes run in the test
process against the real API server (its step pods are the test's, as in test_workflow_writes)
with the token publisher as their after-pass hook and the approval outbox's real sender threads.
While the sender is held inside its POST, the approval workflow's own passes and every pass of
another workflow (two pod steps, from start to Succeeded) complete; then the notifier answers and
the token is delivered once. With the tokens sent inside the pass, the approval workflow's first
pass would wait for the notifier's answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.test_workflow_writes import StepPods
from tests.integration.workflows import MovableClock, create_workflow, get_workflow, pod_step
from tests.waiting import wait_for
from vigil.kube.controllers.approvals import (
    SigningKey,
    TokenPublisher,
    WebhookNotifier,
    approval_outbox,
)
from vigil.kube.controllers.workflows import WorkflowEngine
from vigil.kube.kits.coreapi import CoreApi

CALL_SECONDS = 30.0  # what one call to the slow notifier takes unless the test releases it


class SlowNotifier:
    """A webhook whose every call holds its answer until ``release`` is set (30 s at most)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.answered = threading.Event()
        self.received: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                outer.entered.set()
                outer.release.wait(CALL_SECONDS)
                outer.received.append(body)
                self.send_response(204)
                self.end_headers()
                outer.answered.set()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow_notifier() -> Iterator[SlowNotifier]:
    notifier = SlowNotifier()
    yield notifier
    notifier.close()


def phases(cluster: KubeCluster, namespace: str, name: str) -> dict[str, str]:
    status = get_workflow(cluster, namespace, name).get("status") or {}
    return {step: summary["phase"] for step, summary in (status.get("steps") or {}).items()}


def test_a_notifier_taking_30s_per_call_delays_no_workflow_pass(
    cluster: KubeCluster, namespace: str, slow_notifier: SlowNotifier
) -> None:
    clock, pods = MovableClock(), StepPods(cluster)
    publisher = TokenPublisher(
        key=SigningKey(CoreApi(cluster.api), namespace=namespace, clock=clock),
        notifier=WebhookNotifier(slow_notifier.url, timeout_seconds=2 * CALL_SECONDS),
        clock=clock,
        find_workflow=pods.get,
        default_lifetime=timedelta(hours=24),
    )
    outbox = approval_outbox(publisher, retry_seconds=30.0, max_retry_seconds=600.0)
    stop = threading.Event()
    threading.Thread(target=outbox.run, args=(stop,), daemon=True).start()
    engine = WorkflowEngine(pods, clock=clock, events=None, on_pass=publisher.on_pass)
    try:
        approval = {"id": "approve", "type": "approval", "timeout": "1h", "approval": {"approvers": ["user:carol"]}}
        create_workflow(cluster, namespace, "gate", steps=[approval])
        create_workflow(cluster, namespace, "work", steps=[pod_step("s0"), pod_step("s1", "s0")])

        engine.reconcile(namespace, "gate")  # pins the definition; the approval step waits
        assert slow_notifier.entered.wait(10), "the token was not sent"
        assert phases(cluster, namespace, "gate") == {"approve": "Running"}  # awaiting its approver

        # The sender is inside its POST. Passes go on: the approval workflow's, and another's.
        engine.reconcile(namespace, "gate")
        engine.reconcile(namespace, "work")
        pods.end("s0")
        engine.reconcile(namespace, "work")
        pods.end("s1")
        engine.reconcile(namespace, "work")
        assert get_workflow(cluster, namespace, "work")["status"]["phase"] == "Succeeded"
        assert not slow_notifier.answered.is_set(), "a pass waited for the notifier's answer"
        # Each workflow is offered on its first pass (a check; "work" has nothing to send): its
        # delivery may still be running on another sender thread, while the gate's stays held.
        wait_for(lambda: outbox.depth == 1, timeout=10, what="only the held delivery to be waiting")
        assert not slow_notifier.answered.is_set(), "the held delivery ended before its release"

        slow_notifier.release.set()
        wait_for(outbox.idle, timeout=10, what="the token to be delivered")
        assert [n["approver"] for n in slow_notifier.received] == ["user:carol"]
    finally:
        stop.set()
