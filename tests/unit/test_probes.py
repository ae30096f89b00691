"""The kubelet's probes cannot be starved by clients of the API (issue 37, item 2; vigil/probes.py).

Real sockets on loopback: the API (vigil.api, with the runtime's default limits from
`config.http`) is held by 60 idle sockets and 10 slow writers — 40 idle sockets were enough to
starve the thread-per-connection server it replaced, whose /healthz then answered 503 or
nothing, which is how three failed probes restarted every replica. Now the probes, on their own
listener, answer 200 every time, and the API itself still answers an ordinary request: the
holders come from another address (127.0.0.2), as another pod would, so the cap on connections
per peer is what they meet. tests/stress/test_api_hold.py holds 500 idle sockets and 50 slow writers.
The probe listener also sheds connections past its own bound instead of queueing them.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.unit.test_httpapi import ROW, get, server
from vigil.probes import IO_TIMEOUT_SECONDS, MAX_CONNECTIONS, serve_probes
from vigil.runtime.serving import api_limits
from vigil.settings import Http

IDLE, SLOW = 60, 10  # past the old server's 8 workers and 32 queued: what 40 idle sockets already did
PROBES = 10
#: Where the holders connect from: another pod, as far as the cap on connections per peer knows.
HOLDER = "127.0.0.2"


def probe(port: int, path: str = "/healthz") -> int | None:
    """A kubelet's probe: the status, or None when no answer came within its 2 s timeout."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


@contextlib.contextmanager
def held(port: int, *, idle: int = IDLE, slow: int = SLOW) -> Iterator[list[socket.socket]]:
    """`idle` sockets that never send, and `slow` that send a byte of a request now and then;
    yields the sockets (those the server closed at once, past the per-peer cap, included)."""
    sockets = [socket.create_connection(("127.0.0.1", port), source_address=(HOLDER, 0)) for _ in range(idle + slow)]
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.3):
            for sock in sockets[idle:]:
                with contextlib.suppress(OSError):
                    sock.send(b"G")

    writer = threading.Thread(target=trickle)
    writer.start()
    try:
        yield sockets
    finally:
        stop.set()
        writer.join()
        for sock in sockets:
            sock.close()


@pytest.fixture
def api_port() -> Iterator[int]:
    """The API as the runtime serves it: its routes, within the limits `config.http` defaults to."""
    http = server(rows=[ROW]).serve(0, api_limits(Http()))
    try:
        yield http.server_address[1]
    finally:
        http.shutdown()
        http.server_close()


def held_probes_and_api(api_port: int, *, idle: int, slow: int) -> None:
    probes = serve_probes(0)
    try:
        with held(api_port, idle=idle, slow=slow):
            assert [probe(probes.server_address[1]) for _ in range(PROBES)] == [200] * PROBES
            assert [probe(probes.server_address[1], "/readyz") for _ in range(PROBES)] == [200] * PROBES
            status, body, _ = get(api_port, "/executions/ex-abc", "t-alice")
            assert status == 200 and b"ex-abc" in body
    finally:
        probes.shutdown()
        probes.server_close()


def test_probes_on_their_own_listener_and_the_api_answer_while_the_api_is_held(api_port: int) -> None:
    held_probes_and_api(api_port, idle=IDLE, slow=SLOW)


def test_readiness_follows_the_state_it_is_given_and_other_paths_are_not_served() -> None:
    ready = threading.Event()
    probes = serve_probes(0, ready=ready.is_set)
    port = probes.server_address[1]
    try:
        assert (probe(port, "/readyz"), probe(port, "/healthz"), probe(port, "/leader")) == (503, 200, 404)
        ready.set()
        assert probe(port, "/readyz") == 200
    finally:
        probes.shutdown()
        probes.server_close()


def test_the_probe_listener_sheds_connections_past_its_bound_and_drops_silent_ones() -> None:
    probes = serve_probes(0)
    port = probes.server_address[1]
    try:
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CONNECTIONS + 8)]
        try:
            # the first MAX_CONNECTIONS are read with a timeout, the rest closed at once; either way
            # every silent socket is closed by the server within the read timeout
            for sock in silent:
                sock.settimeout(IO_TIMEOUT_SECONDS + 3)
                assert sock.recv(1) == b""
        finally:
            for sock in silent:
                sock.close()
        assert probe(port) == 200
    finally:
        probes.shutdown()
        probes.server_close()
