"""The kubelet's probes, /healthz and /readyz, on a listener of their own.

On the API's port the probes shared the API's worker pool (8 workers, 32 queued): any pod that
could reach the port held 40 idle sockets and the probes answered 503, three times in a row, and
the kubelet restarted every replica. Here nothing a client of the API does can make a probe
wait: the probes have their own port (`http.healthPort`, 8081), which the chart's NetworkPolicy
admits no pod to (the kubelet probes from the node), their own small set of threads, and they
answer from the process's state, never from the API server or a database.

Bounded like the API's server, for what does reach it: at most `MAX_CONNECTIONS` connections are
handled at once (more are closed at once), each gets `IO_TIMEOUT_SECONDS` to send its request,
and a request is a GET of a path and a few headers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

HEALTH_PATHS = ("/healthz", "/readyz")
#: Probe connections handled at once: the kubelet sends two probes every few seconds.
MAX_CONNECTIONS = 16
#: Seconds a connection may take to send its request: the kubelet's probe timeout is 2 s.
IO_TIMEOUT_SECONDS = 2.0


class ProbeServer(ThreadingHTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS at once; the rest are closed unanswered."""

    daemon_threads = True

    def __init__(self, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(("", port), handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def serve_probes(port: int, *, ready: Callable[[], bool] = lambda: True) -> ProbeServer:
    """Answer /healthz (200 while the process serves) and /readyz (200 while `ready()`) on `port`
    (0: any free port) from a thread of its own; returns the server."""

    class Probe(BaseHTTPRequestHandler):
        timeout = IO_TIMEOUT_SECONDS  # the socket's: a silent client is dropped, not waited for

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path not in HEALTH_PATHS:
                status, body = 404, b"only /healthz and /readyz here\n"
            elif path == "/readyz" and not ready():
                status, body = 503, b"not ready\n"
            else:
                status, body = 200, b"ok\n"
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ProbeServer(port, Probe)
    threading.Thread(target=server.serve_forever, name="probes", daemon=True).start()
    return server
