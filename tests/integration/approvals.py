"""Helpers for approval tests: a notifier webhook that keeps what it receives, and the HTTP callback.

The operator sends each approver's token to `approvals.notifier.url`; :class:`Notifier` is that
webhook (a chat or e-mail bridge in a real cluster), run in the test process on loopback, where
the operator processes reach it. :func:`start_with_api` starts an operator process of a fleet
serving its HTTP API on a port of its own, and returns a :class:`Callback` that POSTs to it.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.integration.operators import OperatorFleet, OperatorProcess
from tests.waiting import wait_for


class Notifier:
    """A webhook receiver standing in for a chat or e-mail bridge: keeps every POSTed body."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    received.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token_for(
        self, approver: str, *, workflow: str, not_in: tuple[str, ...] = (), timeout: float = 60
    ) -> dict[str, Any]:
        """The first notification for `approver` about `workflow` whose token is not in `not_in`."""

        def found() -> dict[str, Any] | None:
            return next(
                (n for n in list(self.received)
                 if n["approver"] == approver and n["workflow"] == workflow and n["token"] not in not_in),
                None,
            )  # fmt: skip

        return wait_for(found, timeout=timeout, what=f"a token for {approver} at the notifier")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Callback:
    """POSTs to one operator process's HTTP API."""

    def __init__(self, process: OperatorProcess, port: int) -> None:
        self.process = process
        self.port = port

    def post(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else b""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.loads(error.read())

    def serving(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                return True
        except OSError:
            return False


def start_with_api(fleet: OperatorFleet) -> Callback:
    """Start one more operator process of `fleet`, serving its HTTP API on a port of its own."""
    port = free_port()
    callback = Callback(fleet.start(http={"metricsPort": 0, "apiPort": port}), port)
    wait_for(callback.serving, timeout=60, what=f"{callback.process.name} serving HTTP")
    return callback
