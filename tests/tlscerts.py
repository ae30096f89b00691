"""Test certificates: a private CA and a server certificate it signs, made with the openssl CLI
(as the chart's genCA and genSignedCert make them), for the TLS tests of every layer."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate clients trust
    cert: Path  # the server's certificate for 127.0.0.1, signed by `ca`
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path, label: str) -> Pki:
    """A self-signed CA and a server certificate it signs, valid for 127.0.0.1 and localhost
    (the openssl CLI, as the chart's genCA and genSignedCert would make them)."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl CLI is needed to make the test certificates")
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", f"/CN={label}-ca", cwd=directory)  # fmt: skip
    _openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=vigil", cwd=directory)
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "tls.crt", "-days", "3650", "-extfile", "san.ext", cwd=directory)  # fmt: skip
    return Pki(ca=directory / "ca.crt", cert=directory / "tls.crt", key=directory / "tls.key")
