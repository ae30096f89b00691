"""The HTTP transport under the operator's API: uvicorn (HTTP/1.1 on h11), bounded per connection.

The hand-written server this replaced gave each connection a worker thread (8, and 32 queued)
from accept to close, so 40 idle sockets starved it, and its deadline shut the client's socket
but left the handler holding its worker. Here connections are cheap (an asyncio protocol each)
and hold nothing until a whole request has arrived; the work of answering runs in a bounded
executor (vigil.api.app). What this module bounds, per connection, is what the server itself
would otherwise wait on:

* a request head (request line and headers) must arrive whole within ``read_timeout_seconds``
  of the connection's opening or of its first byte after a response: a slow writer ("slowloris")
  is closed, whether it sends nothing or a byte now and then;
* between requests a keep-alive connection may idle ``idle_timeout_seconds``, then it is closed;
* a head is at most ``max_header_bytes`` (431), a body at most ``max_request_bytes`` (413, from
  the application, which also bounds the time to read it);
* one peer address may hold ``connections_per_peer`` connections, and the server
  ``max_connections`` in all; more are closed at once, unanswered, so one pod cannot take every
  connection the process allows.

With `TlsFiles` the listener speaks TLS only (uvicorn's ssl options, TLS 1.2 or later by
Python's defaults), and the files are read at start and again whenever they change (checked every
`reload_seconds`: a mounted Secret that cert-manager renews is served without a restart; a pair
that does not load, half-written, keeps the old one until it does); without, plain HTTP, for tests and a mesh
that terminates TLS itself. Health and readiness are never here (vigil.probes serves them on a
plain listener of their own), so the kubelet needs no certificate.

Even the transport's own refusals (a malformed or oversized head) are problem details
(vigil.api.problems). Nothing here knows what is served: `serve` takes any ASGI application.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from vigil.api.problems import problem

log = logging.getLogger(__name__)

#: Seconds a 429 (a namespace at its queue quota) asks the client to wait: room comes back as the
#: namespace's executions finish and the leader recounts them, every `queue.statusIntervalSeconds`
#: (5 s by default); twice that, so a retry finds the recount done.
RETRY_AFTER_SECONDS = 10


@dataclasses.dataclass(frozen=True)
class Limits:
    """How much one server may be asked to do at once, and for how long."""

    workers: int = 8  # blocking calls (the API server's reviews, a database) running at once
    queued: int = 32  # requests waiting for one of those workers; each waits within its deadline
    deadline_seconds: float = 30.0  # one request, from its whole head to its answer (body read too)
    read_timeout_seconds: float = 10.0  # a request head, from its first byte (or the connection's start)
    idle_timeout_seconds: float = 5.0  # a keep-alive connection between requests
    max_request_bytes: int = 64 * 1024  # a body: the largest payload (32 KiB) fits twice
    max_header_bytes: int = 16 * 1024  # request line and headers: a token fits many times
    max_connections: int = 1024  # open at once in all; more are closed unanswered
    connections_per_peer: int = 64  # open at once from one address; more are closed unanswered


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """The PEM certificate chain and private key the listener serves (a Secret's tls.crt, tls.key)."""

    cert_file: str
    key_file: str
    reload_seconds: float = 60.0  # how often the files are checked for a renewed certificate


class CertificateReloader:
    """Loads `files` into the listener's SSL `context` again when they change, for new handshakes
    (connections already open keep what they agreed)."""

    def __init__(self, context: ssl.SSLContext, files: TlsFiles) -> None:
        self._context = context
        self._files = files
        self._stamp = self._stamp_now()

    def _stamp_now(self) -> tuple[tuple[int, int, int], ...]:
        stats = [os.stat(path) for path in (self._files.cert_file, self._files.key_file)]
        return tuple((st.st_ino, st.st_mtime_ns, st.st_size) for st in stats)

    def reload_if_changed(self) -> bool:
        """Whether a changed certificate was loaded now; a pair that cannot be read or does not
        match keeps the old one (and is tried again next time)."""
        try:
            stamp = self._stamp_now()
            if stamp == self._stamp:
                return False
            # a pair that fails to load leaves a context half-changed: try it on a throwaway first
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self._files.cert_file, self._files.key_file)
            self._context.load_cert_chain(self._files.cert_file, self._files.key_file)
        except (OSError, ssl.SSLError) as error:
            log.warning("HTTP: the API's certificate files changed but do not load (%s); the old one is served", error)
            return False
        self._stamp = stamp
        log.info("HTTP: the API's certificate changed on disk and is served from now on")
        return True


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None for anything else."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(ch.isspace() for ch in token):
        return None
    return token


def _protocol(limits: Limits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with this module's per-connection bounds; the count of connections
    per peer lives in the closure, shared by every connection of one server."""
    peers: collections.Counter[str] = collections.Counter()
    every = ""  # the key in `peers` counting every connection (no address is empty)

    class Bounded(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _peer: str | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(cast(asyncio.Transport, transport))  # a TCP server's: always one
            sock = transport.get_extra_info("socket")
            if sock is not None:  # an answer's head and body are two writes: Nagle would hold the
                with contextlib.suppress(OSError):  # second for the client's delayed ACK (40 ms)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = self.client[0] if self.client else "unknown"
            peers[peer] += 1
            peers[every] += 1
            self._peer = peer
            if peers[peer] > limits.connections_per_peer or peers[every] > limits.max_connections:
                log.debug("HTTP: a connection past the %d a peer may hold (%d in all) is closed",
                          limits.connections_per_peer, limits.max_connections)  # fmt: skip
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._peer is not None:
                for key in (self._peer, every):
                    peers[key] -= 1
                    if peers[key] <= 0:
                        del peers[key]
                self._peer = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE and self._head_too_large(data):
                self._refuse(problem(
                    431, f"a request's line and headers are at most {limits.max_header_bytes} bytes", "HeadersTooLarge"
                ))  # fmt: skip
                return
            super().data_received(data)
            if self.transport.is_closing():
                return
            if self.conn.their_state is h11.IDLE:
                if self._deadline is None:
                    self._arm()  # part of a head: it must be whole in time
            else:
                self._disarm()  # a whole head arrived: the application's deadline takes over

        def _head_too_large(self, data: bytes) -> bool:
            """Whether the head being read, with `data`, passes the cap (h11 checks only a head
            still incomplete, so one sent whole in a packet would go through)."""
            buffered, _ = self.conn.trailing_data
            window = buffered + data
            end = window.find(b"\r\n\r\n")
            return len(window) > limits.max_header_bytes if end < 0 else end + 4 > limits.max_header_bytes

        def on_response_complete(self) -> None:
            self._disarm()
            super().on_response_complete()

        def send_400_response(self, msg: str) -> None:
            self._refuse(problem(400, "the request is not HTTP/1.1 this server reads", "BadRequest"))

        def _refuse(self, answer: tuple[int, str, bytes]) -> None:
            """Answer `answer` and close, before (or instead of) any request reaching the application."""
            status, kind, body = answer
            headers = [(b"Content-Type", kind.encode()), (b"Content-Length", str(len(body)).encode()),
                       (b"Connection", b"close")]  # fmt: skip
            with contextlib.suppress(h11.LocalProtocolError):
                self.transport.write(self.conn.send(h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase)))
                self.transport.write(self.conn.send(h11.Data(data=body)))
                self.transport.write(self.conn.send(h11.EndOfMessage()))
            self.transport.close()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.read_timeout_seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                log.debug("HTTP: a request head not whole within %ss; closed", limits.read_timeout_seconds)
                self.transport.close()

    return Bounded


class Serving:
    """A server running on a thread of its own: its address, and how to stop it."""

    def __init__(
        self,
        server: uvicorn.Server,
        sock: socket.socket,
        on_close: Callable[[], None] | None,
        *,
        reloader: CertificateReloader | None = None,
        reload_seconds: float = 60.0,
    ) -> None:
        self._server = server
        self._on_close = on_close
        self._socket = sock
        self.reloader = reloader
        self._reload_seconds = reload_seconds
        self.server_address: tuple[str, int] = sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        reloading = asyncio.create_task(self._reload_periodically()) if self.reloader is not None else None
        try:
            await self._server.serve(sockets=[self._socket])
        finally:
            if reloading is not None:
                reloading.cancel()

    async def _reload_periodically(self) -> None:
        assert self.reloader is not None
        while True:
            await asyncio.sleep(self._reload_seconds)  # a period, not a synchronisation
            self.reloader.reload_if_changed()

    def shutdown(self) -> None:
        """Stop accepting, close the connections, and wait for the thread (at most 10 s)."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        if self._on_close is not None:
            self._on_close()

    def server_close(self) -> None:
        """Release the listening socket (after `shutdown`)."""
        self._socket.close()


def serve(
    app: Any,
    port: int,
    limits: Limits,
    *,
    host: str = "",
    tls: TlsFiles | None = None,
    on_close: Callable[[], None] | None = None,
) -> Serving:
    """Serve the ASGI `app` on `port` (0: any free port) from a thread; returns at once, the
    socket already listening (connections made before the loop starts wait in its backlog).
    With `tls`, only TLS is spoken (a file that cannot be read fails here, at start).
    `on_close` runs once the server has stopped (the application's executor is closed there)."""
    config = uvicorn.Config(
        app,
        http=_protocol(limits),
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_keep_alive=max(1, round(limits.idle_timeout_seconds)),
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_graceful_shutdown=1,
        ssl_certfile=tls.cert_file if tls else None,
        ssl_keyfile=tls.key_file if tls else None,
    )
    reloader = None
    if tls is not None:
        config.load()  # builds the SSL context now: a missing or mismatched file fails the start, not a request
        assert config.ssl is not None  # load() made it from the files
        reloader = CertificateReloader(config.ssl, tls)
    sock = socket.create_server((host, port), backlog=min(limits.max_connections, socket.SOMAXCONN))
    return Serving(
        uvicorn.Server(config), sock, on_close, reloader=reloader, reload_seconds=tls.reload_seconds if tls else 60.0
    )
