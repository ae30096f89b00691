"""How `kubectl vigil` verifies the operator's API over TLS (issue 37, item 3; cli/operatorapi.py).

A real TLS listener (the transport, with a CA and certificate made as in test_api_tls.py) answers
an empty page of a job's executions. `connect` verifies an https:// API against the CA of
`--api-ca-file`, else `VIGIL_API_CA_FILE`, else the CA the cluster publishes (read through the
kubeconfig), else the system's trust store; a certificate of another CA is refused with a line
that says where the right CA is; only `--insecure-skip-tls-verify` skips the check, and not
together with a CA. Plain http:// stays plain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.tlscerts import Pki, make_pki
from vigil.api.app import Application
from vigil.api.problems import Answer, json_answer
from vigil.api.transport import Limits, TlsFiles, serve
from vigil.cli.errors import BadInput
from vigil.cli.operatorapi import API_CA_ENV, HistoryNotShown, connect


def page(method: str, path: str, query: str, token: str | None, body: bytes) -> Answer:
    return json_answer(200, {"executions": [], "continue": None})


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), "vigil")


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("other"), "other")


@pytest.fixture
def url(pki: Pki) -> Iterator[str]:
    app = Application(page, Limits())
    server = serve(app, 0, Limits(), host="127.0.0.1", tls=TlsFiles(str(pki.cert), str(pki.key)))
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    app.close()


def asks(
    url: str,
    *,
    ca_file: str | None = None,
    environ: dict[str, str] | None = None,
    published_ca: Callable[[], str | None] = lambda: None,
    insecure_skip_tls_verify: bool = False,
) -> bool:
    """Whether a page of executions is read from `url`, connected so."""
    api = connect(
        url, environ=environ or {}, kube_token=lambda: "t", ca_file=ca_file, published_ca=published_ca,
        insecure_skip_tls_verify=insecure_skip_tls_verify,
    )  # fmt: skip
    return api.job_executions("ns", "job", limit=10) == ([], None)


def test_the_ca_comes_from_the_flag_the_environment_or_the_cluster(url: str, pki: Pki) -> None:
    assert asks(url, ca_file=str(pki.ca))
    assert asks(url, environ={API_CA_ENV: str(pki.ca)})
    assert asks(url, published_ca=pki.ca.read_text)


def test_a_certificate_of_another_ca_is_refused_with_where_to_find_the_right_one(url: str, other: Pki) -> None:
    with pytest.raises(HistoryNotShown, match="--api-ca-file"):
        asks(url, ca_file=str(other.ca))
    with pytest.raises(HistoryNotShown, match="--api-ca-file"):
        asks(url, published_ca=other.ca.read_text)
    with pytest.raises(HistoryNotShown, match="--api-ca-file"):
        asks(url)  # the system's trust store knows no private CA


def test_the_flag_wins_over_the_environment_and_the_cluster(url: str, pki: Pki, other: Pki) -> None:
    assert asks(url, ca_file=str(pki.ca), environ={API_CA_ENV: str(other.ca)}, published_ca=other.ca.read_text)


def test_only_the_insecure_flag_skips_verification_and_never_with_a_ca(url: str, pki: Pki, tmp_path: Path) -> None:
    assert asks(url, insecure_skip_tls_verify=True)
    with pytest.raises(BadInput):
        asks(url, insecure_skip_tls_verify=True, ca_file=str(pki.ca))
    with pytest.raises(BadInput, match="cannot read"):
        asks(url, ca_file=str(tmp_path / "missing.crt"))


def test_plain_http_has_no_tls() -> None:
    assert connect("http://127.0.0.1:8080", environ={}, kube_token=lambda: "t").tls is None
