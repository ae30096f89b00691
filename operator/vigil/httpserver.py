"""The HTTP transport under the operator's API: bounded in workers, time and size.

The standard library's ThreadingHTTPServer starts a thread per connection and waits on a slow
client forever, so any pod that can reach the port could exhaust the operator's threads and
memory. This server is bounded the way a production server is:

* a fixed pool of worker threads (``Limits.workers``) takes connections from a bounded queue
  (``Limits.queued``); a connection beyond both is answered ``503`` at once and closed;
* every connection has a deadline (``Limits.deadline_seconds``) for reading the request,
  answering and writing, after which its socket is shut; each socket read or write also times
  out (``Limits.io_timeout_seconds``), so a slow client cannot hold a worker;
* a request (request line, headers and body together) is at most ``Limits.max_request_bytes``;
  beyond that it is answered ``413`` and the connection closed;
* HTTP/1.0 semantics: one request per connection, so an idle keep-alive holds nothing.

It knows nothing of what it serves: ``get(target, token)``, ``post(path, token, body)`` and
``delete(path, token)`` (when given; otherwise DELETE is 501, as before) answer,
where ``token`` is the bearer token of the Authorization header (None without one) and ``target``
the request's path with its query string (``?…``) when it has one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import queue
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

log = logging.getLogger(__name__)

#: Seconds a 429 (a namespace at its queue quota) asks the client to wait: room comes back as the
#: namespace's executions finish and the leader recounts them, every `queue.statusIntervalSeconds`
#: (5 s by default); twice that, so a retry finds the recount done.
RETRY_AFTER_SECONDS = 10

#: (status, content type, body)
Answer = tuple[int, str, bytes]
Get = Callable[[str, "str | None"], Answer]
Post = Callable[[str, "str | None", bytes], Answer]
Delete = Callable[[str, "str | None"], Answer]


@dataclasses.dataclass(frozen=True)
class Limits:
    """How much one server may be asked to do at once, and for how long."""

    workers: int = 8  # requests answered at once: each may wait on the API server or the database
    queued: int = 32  # accepted connections waiting for a worker; more are refused with 503
    deadline_seconds: float = 30.0  # a whole request, from accept to last byte written
    io_timeout_seconds: float = 10.0  # one socket read or write
    max_request_bytes: int = 64 * 1024  # request line, headers and body: a token fits many times


class RequestTooLarge(Exception):
    pass


class _Capped(io.BufferedIOBase):
    """A reader that refuses to deliver more than `limit` bytes in all."""

    def __init__(self, inner: Any, limit: int) -> None:
        super().__init__()
        self._inner = inner
        self._left = limit

    def readable(self) -> bool:
        return True

    def _size(self, size: int | None) -> int:
        if self._left < 0:
            raise RequestTooLarge
        return self._left + 1 if size is None or size < 0 else min(size, self._left + 1)

    def _spent(self, data: bytes) -> bytes:
        self._left -= len(data)
        if self._left < 0:
            raise RequestTooLarge
        return data

    def read(self, size: int | None = -1) -> bytes:
        return self._spent(self._inner.read(self._size(size)))

    def readline(self, size: int | None = -1) -> bytes:
        return self._spent(self._inner.readline(self._size(size)))

    def close(self) -> None:
        """Close the socket's file too: left open, it keeps the socket's descriptor open until the
        garbage collector finds it (a ResourceWarning, and a descriptor held meanwhile)."""
        try:
            self._inner.close()
        finally:
            super().close()


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None for anything else."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(ch.isspace() for ch in token):
        return None
    return token


class BoundedServer(HTTPServer):
    """An HTTPServer whose connections are handled by a fixed pool of daemon worker threads."""

    def __init__(self, port: int, handler: type[BaseHTTPRequestHandler], limits: Limits) -> None:
        self.limits = limits
        self._waiting: queue.Queue[tuple[socket.socket, Any] | None] = queue.Queue(maxsize=limits.queued)
        super().__init__(("", port), handler)
        self._workers = [
            threading.Thread(target=self._work, name=f"http-{i}", daemon=True) for i in range(limits.workers)
        ]
        for worker in self._workers:
            worker.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._waiting.put_nowait((request, client_address))
        except queue.Full:
            _refuse(request)
            self.shutdown_request(request)

    def _work(self) -> None:
        while True:
            item = self._waiting.get()
            if item is None:
                return
            request, client_address = item
            request.settimeout(self.limits.io_timeout_seconds)
            cut = threading.Timer(self.limits.deadline_seconds, _cut, (request,))
            cut.daemon = True
            cut.start()
            try:
                self.finish_request(request, client_address)
            except Exception as error:  # a client that went away, or a timeout: nothing to answer
                log.debug("HTTP connection from %s ended: %s", client_address, error)
            finally:
                cut.cancel()
                self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        for _ in self._workers:
            try:
                self._waiting.put_nowait(None)
            except queue.Full:
                break


def _cut(request: socket.socket) -> None:
    """The deadline passed: shut the socket, so the worker's read or write fails at once."""
    with contextlib.suppress(OSError):
        request.shutdown(socket.SHUT_RDWR)


def _refuse(request: socket.socket) -> None:
    body = b"busy: try again\n"
    head = (
        "HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    try:
        request.settimeout(1.0)
        request.sendall(head.encode() + body)
    except OSError:
        pass


def serve(
    port: int,
    *,
    get: Get,
    post: Post,
    delete: Delete | None = None,
    limits: Limits = Limits(),
    redact: Callable[[str], str] = lambda path: path,
) -> BoundedServer:
    """Serve `get`, `post` (and `delete`) on `port` (0: any free port) from a thread; returns the server."""

    class Handler(BaseHTTPRequestHandler):
        def setup(self) -> None:
            super().setup()
            self.rfile = _Capped(self.rfile, limits.max_request_bytes)

        def handle(self) -> None:
            try:
                super().handle()
            except RequestTooLarge:
                self.close_connection = True
                self._send((413, "text/plain", f"a request is at most {limits.max_request_bytes} bytes\n".encode()))

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            try:
                answer = get(self.path, bearer_token(self.headers.get("Authorization")))
            except Exception:
                log.exception("GET %s failed", redact(path))
                answer = 500, "text/plain", b"internal error\n"
            self._send(answer)

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self._send((400, "text/plain", b"a POST needs a Content-Length\n"))
                return
            if length > limits.max_request_bytes:
                raise RequestTooLarge
            body = self.rfile.read(length)
            try:
                answer = post(path, bearer_token(self.headers.get("Authorization")), body)
            except Exception:
                log.exception("POST %s failed", redact(path))
                answer = 500, "text/plain", b"internal error\n"
            self._send(answer)

        def do_DELETE(self) -> None:
            path = self.path.split("?", 1)[0]
            if delete is None:
                self._send((501, "text/plain", b"DELETE is not served here\n"))
                return
            try:
                answer = delete(path, bearer_token(self.headers.get("Authorization")))
            except Exception:
                log.exception("DELETE %s failed", redact(path))
                answer = 500, "text/plain", b"internal error\n"
            self._send(answer)

        def _send(self, answer: Answer) -> None:
            status, kind, body = answer
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="vigil"')
            if status == 429:
                self.send_header("Retry-After", str(RETRY_AFTER_SECONDS))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = BoundedServer(port, Handler, limits)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
