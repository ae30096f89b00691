"""The HTTP API over TLS (issue 37, item 3; vigil/api/transport.py, vigil/client.py).

A CA and a server certificate for 127.0.0.1 are made per test module (the openssl CLI,
as the chart's genCA/genSignedCert would); a real uvicorn listener serves a plain
route with them. What must hold: the listener speaks TLS only; `vigil.client` verifies the
certificate against the CA it is given and refuses one signed by another CA (or, with no CA
given, one the system does not trust) unless told explicitly to skip the check; a key that does
not match the certificate fails at start, not at the first request. A renewed certificate
is served to new connections once the reloader sees it; a half-written pair keeps the old one.
"""

from __future__ import annotations

import http.client
import shutil
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.tlscerts import Pki, make_pki
from vigil.api.app import Application
from vigil.api.problems import Answer, json_answer
from vigil.api.transport import Limits, Serving, TlsFiles, serve
from vigil.client import ApiError, Client


def ok(method: str, path: str, query: str, token: str | None, body: bytes) -> Answer:
    return json_answer(200, {"jobs": [], "continue": None, "token": token})


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), "vigil")


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("other"), "other")


@pytest.fixture
def serving() -> Iterator[Callable[[TlsFiles], int]]:
    started: list[tuple[Serving, Application]] = []

    def start(tls: TlsFiles) -> int:
        app = Application(ok, Limits())
        started.append((serve(app, 0, Limits(), host="127.0.0.1", tls=tls), app))
        return started[-1][0].server_address[1]

    yield start
    for server, app in started:
        server.shutdown()
        server.server_close()
        app.close()


def test_the_listener_serves_tls_and_the_client_verifies_it_against_the_ca(
    pki: Pki, serving: Callable[[TlsFiles], int]
) -> None:
    port = serving(TlsFiles(str(pki.cert), str(pki.key)))
    client = Client(f"https://127.0.0.1:{port}", token="t", ca_file=pki.ca)
    assert client.queue_jobs("ns", "q").jobs == ()
    connection = http.client.HTTPSConnection(
        "127.0.0.1", port, timeout=5, context=ssl.create_default_context(cafile=str(pki.ca))
    )
    try:
        connection.request("GET", "/x")
        response = connection.getresponse()
        assert response.status == 200
        sock = connection.sock
        assert isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        connection.close()


def test_plain_http_is_not_answered_on_a_tls_listener(pki: Pki, serving: Callable[[TlsFiles], int]) -> None:
    port = serving(TlsFiles(str(pki.cert), str(pki.key)))
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            connection.request("GET", "/x")
            connection.getresponse()
    finally:
        connection.close()


def test_the_client_refuses_a_certificate_of_another_ca(
    pki: Pki, other_pki: Pki, serving: Callable[[TlsFiles], int]
) -> None:
    port = serving(TlsFiles(str(pki.cert), str(pki.key)))
    with pytest.raises(ApiError) as refused:
        Client(f"https://127.0.0.1:{port}", token="t", ca_file=other_pki.ca).queue_jobs("ns", "q")
    assert refused.value.reason == "Unreachable" and "CERTIFICATE_VERIFY_FAILED" in str(refused.value)


def test_without_a_ca_the_system_trust_store_decides_and_refuses_a_private_ca(
    pki: Pki, serving: Callable[[TlsFiles], int]
) -> None:
    port = serving(TlsFiles(str(pki.cert), str(pki.key)))
    with pytest.raises(ApiError) as refused:
        Client(f"https://127.0.0.1:{port}", token="t").queue_jobs("ns", "q")
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)


def test_only_an_explicit_insecure_flag_skips_verification(pki: Pki, serving: Callable[[TlsFiles], int]) -> None:
    port = serving(TlsFiles(str(pki.cert), str(pki.key)))
    client = Client(f"https://127.0.0.1:{port}", token="t", insecure_skip_tls_verify=True)
    assert client.queue_jobs("ns", "q").jobs == ()
    with pytest.raises(ValueError, match="not both"):
        Client(f"https://127.0.0.1:{port}", token="t", ca_file=pki.ca, insecure_skip_tls_verify=True)


def test_a_key_that_does_not_match_the_certificate_fails_at_start(pki: Pki, other_pki: Pki) -> None:
    with pytest.raises(ssl.SSLError):
        serve(Application(ok, Limits()), 0, Limits(), host="127.0.0.1", tls=TlsFiles(str(pki.cert), str(other_pki.key)))


def test_a_renewed_certificate_is_served_to_new_connections_and_a_broken_pair_is_not(
    pki: Pki, other_pki: Pki, tmp_path: Path
) -> None:
    """The reloader is called by hand here (the server calls it every `reload_seconds`)."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copyfile(pki.cert, cert)
    shutil.copyfile(pki.key, key)
    app = Application(ok, Limits())
    server = serve(app, 0, Limits(), host="127.0.0.1", tls=TlsFiles(str(cert), str(key)))
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        assert server.reloader is not None and not server.reloader.reload_if_changed()  # nothing changed yet
        cert.write_bytes(other_pki.cert.read_bytes())  # a new certificate, its key not yet written
        assert not server.reloader.reload_if_changed()
        assert Client(url, token="t", ca_file=pki.ca).queue_jobs("ns", "q").jobs == ()  # the old pair still served
        key.write_bytes(other_pki.key.read_bytes())
        assert server.reloader.reload_if_changed()
        assert Client(url, token="t", ca_file=other_pki.ca).queue_jobs("ns", "q").jobs == ()
        with pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED"):
            Client(url, token="t", ca_file=pki.ca).queue_jobs("ns", "q")
    finally:
        server.shutdown()
        server.server_close()
        app.close()
