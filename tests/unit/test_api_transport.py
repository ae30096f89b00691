"""The HTTP API's transport and application bounds (issue 37, item 1; vigil/api/transport.py, app.py).

Real sockets on loopback, a route that is a plain function: idle and trickling connections hold
no worker and are closed after the read timeout; a connection past the per-peer cap is closed at
once; keep-alive serves several requests on one connection; a route past its deadline is
answered 503 and its handler freed, a call not yet started is dropped, and the executor never
admits more than its bound. Time is bounded by the limits each test sets (fractions of a second),
never waited out with a sleep: each test blocks on a socket or an event.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.waiting import wait_for
from vigil.api.app import Application
from vigil.api.problems import Answer, json_answer
from vigil.api.transport import Limits, Serving, serve

Route = Callable[[str, str, str, "str | None", bytes], Answer]


def ok(method: str, path: str, query: str, token: str | None, body: bytes) -> Answer:
    return json_answer(200, {"path": path, "token": token, "size": len(body)})


@pytest.fixture
def serving() -> Iterator[Callable[..., int]]:
    """Serve a route within limits; yields a function returning the port."""
    started: list[tuple[Serving, Application]] = []

    def start(route: Route = ok, **limits: Any) -> int:
        bounds = Limits(**limits)
        app = Application(route, bounds)
        started.append((serve(app, 0, bounds, host="127.0.0.1"), app))
        return started[-1][0].server_address[1]

    yield start
    for server, app in started:
        server.shutdown()
        server.server_close()
        app.close()


def request(port: int, path: str = "/x", *, method: str = "GET", source: str = "127.0.0.1") -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(source, 0))
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes `sock` (EOF) within `within` seconds, reading what it sends."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_idle_and_trickling_connections_hold_no_worker(serving: Callable[..., int]) -> None:
    """One worker, one queued: 40 idle sockets starved the old server's 8 + 32; here 60 idle and
    10 that sent part of a head leave the one worker free for an ordinary request."""
    port = serving(workers=1, queued=1, read_timeout_seconds=30)
    holders = [socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0)) for _ in range(70)]
    try:
        for sock in holders[60:]:
            sock.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert request(port)[0] == 200
    finally:
        for sock in holders:
            sock.close()


def test_a_silent_or_trickling_connection_is_closed_after_the_read_timeout(serving: Callable[..., int]) -> None:
    port = serving(read_timeout_seconds=0.3, idle_timeout_seconds=30)
    silent = socket.create_connection(("127.0.0.1", port))
    partial = socket.create_connection(("127.0.0.1", port))
    try:
        partial.sendall(b"GET /x HTTP/1.1\r\nHo")
        started = time.monotonic()
        assert closed_by_server(silent, within=5) and closed_by_server(partial, within=5)
        assert time.monotonic() - started < 3
    finally:
        silent.close()
        partial.close()


def test_keep_alive_serves_several_requests_on_one_connection_then_closes_it_when_idle(
    serving: Callable[..., int],
) -> None:
    port = serving(idle_timeout_seconds=1, read_timeout_seconds=30)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        for path in ("/a", "/b", "/c"):
            connection.request("GET", path)
            response = connection.getresponse()
            assert (response.status, json.loads(response.read())["path"]) == (200, path)
            assert response.getheader("Connection") != "close"
        sock = connection.sock
        assert sock is not None and closed_by_server(sock, within=5)  # the idle timeout closed it
    finally:
        connection.close()


def test_a_peer_past_its_cap_is_closed_at_once_and_others_are_served(serving: Callable[..., int]) -> None:
    port = serving(connections_per_peer=4, read_timeout_seconds=30)
    held = [socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0)) for _ in range(4)]
    extra = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0))
    try:
        assert closed_by_server(extra, within=2)
        assert not closed_by_server(held[0], within=0.2)  # those within the cap stay open
        assert request(port)[0] == 200  # another address is not affected
    finally:
        extra.close()
        for sock in held:
            sock.close()
    assert request(port, source="127.0.0.2")[0] == 200  # the count goes down as they close


def test_past_the_servers_connection_cap_a_connection_is_closed_at_once(serving: Callable[..., int]) -> None:
    port = serving(max_connections=3, read_timeout_seconds=30)
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    extra = socket.create_connection(("127.0.0.1", port))
    try:
        assert closed_by_server(extra, within=2)
        assert not closed_by_server(held[0], within=0.2)
    finally:
        extra.close()
        for sock in held:
            sock.close()
    wait_for(lambda: answers(port), timeout=5, interval=0.05, what="a place freed by the closed ones")


def answers(port: int) -> bool:
    """Whether an ordinary request is answered 200 now (False when its connection is closed)."""
    try:
        return request(port)[0] == 200
    except (ConnectionError, http.client.HTTPException):
        return False


class Blocking:
    """A route that blocks until released, recording the paths it started."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []
        self.running = threading.Event()

    def __call__(self, method: str, path: str, query: str, token: str | None, body: bytes) -> Answer:
        self.started.append(path)
        if path.startswith("/block"):
            self.running.set()
            self.release.wait(timeout=10)
        return json_answer(200, {"path": path})


def test_a_route_past_its_deadline_is_503_and_its_handler_is_freed(serving: Callable[..., int]) -> None:
    """One worker, one queued: a call stuck on its thread is answered 503 at its deadline; a
    call waiting behind it is dropped unstarted at its own; while the stuck one holds the worker
    nothing else runs; once it returns, its slot comes back and the next request is served."""
    route = Blocking()
    port = serving(route, workers=1, queued=1, deadline_seconds=0.5)
    stuck: list[tuple[int, bytes]] = []
    first = threading.Thread(target=lambda: stuck.append(request(port, "/block")))
    first.start()
    assert route.running.wait(timeout=5)
    status, body = request(port, "/queued")  # waits behind /block, past its deadline
    assert (status, json.loads(body)["reason"]) == (503, "DeadlineExceeded")
    first.join(timeout=5)
    assert stuck[0][0] == 503 and json.loads(stuck[0][1])["reason"] == "DeadlineExceeded"
    status, body = request(port, "/more")  # /block still holds its slot and its thread
    assert status == 503
    route.release.set()  # the slot comes back when /block's thread returns
    wait_for(lambda: request(port, "/after")[0] == 200, timeout=5, interval=0.05, what="the freed slot")
    assert "/queued" not in route.started  # dropped before it ran


def test_a_body_past_the_cap_is_413_before_it_is_read(serving: Callable[..., int]) -> None:
    port = serving(max_request_bytes=1024)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")  # and no body
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413") and b"application/problem+json" in answer
