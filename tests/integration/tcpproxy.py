"""A loopback TCP relay that can stop forwarding while keeping every connection open.

It stands between one operator process and the API server (that process's kubeconfig names the
relay; TLS passes through untouched, and the API server's certificate names 127.0.0.1) to play
the network failure no timeout-less client survives: a half-open connection. After
`stop_forwarding()` nothing more reaches either side, no connection is closed or refused, and
new connections are accepted and then left silent — what a dead NAT entry, a partitioned node or
a wedged proxy look like from the client. Plain sockets, two threads per connection.
`relay(cluster)` puts one in front of a test cluster's API server, and `through_proxy` writes a
kubeconfig that goes through it.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from tests.integration.conftest import KubeCluster

POLL_SECONDS = 0.1  # how often a relay thread looks at the forwarding switch while idle
CHUNK = 65536


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.accepted = 0  # connections accepted so far
        threading.Thread(target=self._accept, name="tcpproxy-accept", daemon=True).start()

    def stop_forwarding(self) -> None:
        """From now on forward nothing, in either direction, and close nothing."""
        self._forwarding.clear()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in [self._server, *sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._closed.is_set():
                self._sockets.append(sock)
                return
        sock.close()  # accepted as the relay closed: close() has swept its list already

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                downstream, _ = self._server.accept()
            except OSError:
                return
            self.accepted += 1
            self._keep(downstream)
            if not self._forwarding.is_set():
                continue  # accepted, and never answered
            try:
                upstream = socket.create_connection(self._upstream)
            except OSError:
                downstream.close()
                continue
            self._keep(upstream)
            for source, target in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._relay, args=(source, target), name="tcpproxy-relay", daemon=True).start()

    def _relay(self, source: socket.socket, target: socket.socket) -> None:
        while not self._closed.is_set():
            if not self._forwarding.is_set():
                self._closed.wait()  # hold: read nothing, send nothing, close nothing
                return
            try:
                ready, _, _ = select.select([source], [], [], POLL_SECONDS)
                if not ready:
                    continue
                data = source.recv(CHUNK)
            except (OSError, ValueError):
                return
            if not data:
                break
            if not self._forwarding.is_set():
                continue  # read just as forwarding stopped: dropped, never delivered later
            try:
                target.sendall(data)
            except OSError:
                break
        if self._forwarding.is_set():  # one side ended while relaying: end the other too
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


# --- a relay in front of a test cluster's API server ------------------------------------------


def through_proxy(kubeconfig: Path, proxy: TcpProxy, path: Path) -> Path:
    """A copy of `kubeconfig` whose server is the relay (the API server's certificate names 127.0.0.1)."""
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path.write_text(yaml.safe_dump(config))
    return path


def api_server_address(cluster: KubeCluster) -> tuple[str, int]:
    server = urlsplit(yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"])
    assert server.hostname and server.port
    return server.hostname, server.port


@contextlib.contextmanager
def relay(cluster: KubeCluster) -> Iterator[TcpProxy]:
    proxy = TcpProxy(*api_server_address(cluster))
    try:
        yield proxy
    finally:
        proxy.close()
