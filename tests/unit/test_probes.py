"""The kubelet's probes cannot be starved by clients of the API (issue 37, item 2; vigil/probes.py).

Real sockets on loopback: the API's bounded server (vigil/httpserver.py, with the runtime's
default limits: 8 workers, 32 queued) is held by 60 idle sockets and 10 slow writers (40 were enough), as any pod
of the cluster could hold it. On the API's port, /healthz then answers 503 or nothing — which is
how three failed probes restarted every replica; on the probes' own listener it answers 200 every
time. The probe listener also sheds connections past its own bound instead of queueing them.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Iterator

import pytest

from vigil import httpserver
from vigil.probes import IO_TIMEOUT_SECONDS, MAX_CONNECTIONS, serve_probes
from vigil.settings import Http

IDLE, SLOW = 60, 10  # past the API's 8 workers and 32 queued: what 40 idle sockets already did
PROBES = 10


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
def held(port: int) -> Iterator[None]:
    """IDLE sockets that never send, and SLOW that send a byte of a request now and then."""
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(IDLE + SLOW)]
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.3):
            for sock in sockets[IDLE:]:
                with contextlib.suppress(OSError):
                    sock.send(b"G")

    writer = threading.Thread(target=trickle)
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join()
        for sock in sockets:
            sock.close()


@pytest.fixture
def api_port() -> Iterator[int]:
    http = Http()
    limits = httpserver.Limits(workers=http.workers, queued=4 * http.workers,
                               deadline_seconds=http.request_timeout_seconds,
                               io_timeout_seconds=http.request_timeout_seconds / 3)  # fmt: skip
    server = httpserver.serve(0, get=lambda target, token: (200, "text/plain", b"ok\n"),
                              post=lambda path, token, body: (405, "text/plain", b""), limits=limits)  # fmt: skip
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_probes_on_their_own_listener_answer_while_the_api_is_held(api_port: int) -> None:
    probes = serve_probes(0)
    try:
        with held(api_port):
            assert [probe(probes.server_address[1]) for _ in range(PROBES)] == [200] * PROBES
            assert [probe(probes.server_address[1], "/readyz") for _ in range(PROBES)] == [200] * PROBES
    finally:
        probes.shutdown()
        probes.server_close()


def test_on_the_apis_own_port_the_same_hold_fails_the_probes(api_port: int) -> None:
    """What the chart's probes met before they moved: not one of them answered 200."""
    with held(api_port):
        assert 200 not in [probe(api_port) for _ in range(3)]


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
