"""The chart's TLS for the HTTP API (issue 37, item 3; helm/vigil/templates/api-tls.yaml).

Rendered with the real helm binary: by default the chart generates a CA and a certificate for
the Service's DNS names (Secret <release>-api-tls with tls.crt, tls.key, ca.crt; the CA also in
the ConfigMap <release>-api-ca, which every authenticated user may get), and the operator is configured to serve them; on a cluster that
serves cert-manager.io/v1 it asks cert-manager instead (a self-signed Issuer, a CA, a CA Issuer,
the Service's Certificate into the same Secret name); `tls.existingSecret` mounts yours and
makes nothing; `tls.enabled=false` serves plain HTTP. The probes stay on the plain health port.
The reuse of an existing Secret (what `lookup` finds at upgrade) is checked on the helper
itself, since `helm template` has no cluster to look in.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_chart_trust import helm
from tests.unit.test_packaging import CHART, NAMESPACE, RELEASE, find, render, the_one

__all__ = ["helm"]  # the chart tests' helm fixture, shared

Helm = tuple[Path, dict[str, str]]
SECRET = f"{RELEASE}-api-tls"
SERVICE_NAMES = [RELEASE, f"{RELEASE}.{NAMESPACE}", f"{RELEASE}.{NAMESPACE}.svc", f"{RELEASE}.{NAMESPACE}.svc.cluster.local"]




def operator_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(the_one(objects, "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"])
    return config


def pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = the_one(objects, "Deployment", RELEASE)["spec"]["template"]["spec"]
    return spec


def mounted_secret(objects: list[dict[str, Any]]) -> str | None:
    spec = pod(objects)
    volumes = [v for v in spec["volumes"] if v["name"] == "api-tls"]
    mounts = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "api-tls"]
    if not volumes:
        assert not mounts
        return None
    assert mounts == [{"name": "api-tls", "mountPath": "/etc/vigil-tls", "readOnly": True}]
    name: str = volumes[0]["secret"]["secretName"]
    return name


def openssl(*args: str, stdin: bytes) -> str:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=True).stdout.decode()


def test_by_default_the_chart_generates_a_ca_and_a_certificate_for_the_service(helm: Helm, tmp_path: Path) -> None:
    objects = render(helm)
    secret = the_one(objects, "Secret", SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    pem = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    assert set(pem) == {"tls.crt", "tls.key", "ca.crt"}
    published = the_one(objects, "ConfigMap", f"{RELEASE}-api-ca")["data"]["ca.crt"]
    assert published.strip() == pem["ca.crt"].decode().strip()
    (tmp_path / "ca.crt").write_bytes(pem["ca.crt"])
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt")], input=pem["tls.crt"], capture_output=True, check=False
    )
    assert verified.returncode == 0, verified.stderr
    names = openssl("x509", "-noout", "-ext", "subjectAltName", stdin=pem["tls.crt"])
    for name in SERVICE_NAMES:
        assert f"DNS:{name}," in names or names.rstrip().endswith(f"DNS:{name}")
    assert find(objects, "Certificate") == []
    assert mounted_secret(objects) == SECRET
    reader = the_one(objects, "Role", f"{RELEASE}-api-ca-reader")["rules"]
    assert reader == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [f"{RELEASE}-api-ca"], "verbs": ["get"]}]
    binding = the_one(objects, "RoleBinding", f"{RELEASE}-api-ca-reader")
    assert [subject["name"] for subject in binding["subjects"]] == ["system:authenticated"]
    assert operator_config(objects)["http"]["tls"] == {"certFile": "/etc/vigil-tls/tls.crt", "keyFile": "/etc/vigil-tls/tls.key"}
    assert operator_config(objects)["http"]["tokenAudiences"] == ["vigil"]


def test_probes_stay_on_the_plain_health_port(helm: Helm) -> None:
    container = pod(render(helm))["containers"][0]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "health"
        assert container[probe]["httpGet"].get("scheme", "HTTP") == "HTTP"


def test_with_cert_manager_the_chart_asks_it_for_the_certificate(helm: Helm) -> None:
    objects = render(helm, "--api-versions", "cert-manager.io/v1")
    assert find(objects, "Secret", SECRET) == [] and find(objects, "ConfigMap", f"{RELEASE}-api-ca") == []
    issuers = {item["metadata"]["name"]: item["spec"] for item in find(objects, "Issuer")}
    assert issuers == {f"{RELEASE}-api-selfsigned": {"selfSigned": {}}, f"{RELEASE}-api-ca": {"ca": {"secretName": f"{RELEASE}-api-ca"}}}
    ca = the_one(objects, "Certificate", f"{RELEASE}-api-ca")["spec"]
    assert ca["isCA"] is True and ca["issuerRef"]["name"] == f"{RELEASE}-api-selfsigned"
    served = the_one(objects, "Certificate", f"{RELEASE}-api")["spec"]
    assert served["secretName"] == SECRET and served["issuerRef"]["name"] == f"{RELEASE}-api-ca"
    assert set(SERVICE_NAMES) <= set(served["dnsNames"])
    assert served["duration"] == ca["duration"] == "87600h"  # tls.validityDays, not cert-manager's 90 days
    assert mounted_secret(objects) == SECRET
    assert find(render(helm, "--api-versions", "cert-manager.io/v1", "--set", "tls.certManager=false"), "Certificate") == []


def test_an_existing_secret_is_mounted_and_nothing_is_made(helm: Helm) -> None:
    objects = render(helm, "--api-versions", "cert-manager.io/v1", "--set", "tls.existingSecret=mine")
    assert find(objects, "Certificate") == [] and find(objects, "Issuer") == [] and find(objects, "Secret", SECRET) == []
    assert mounted_secret(objects) == "mine"


def test_tls_off_serves_plain_http(helm: Helm) -> None:
    objects = render(helm, "--set", "tls.enabled=false")
    assert find(objects, "Secret", SECRET) == [] and find(objects, "ConfigMap", f"{RELEASE}-api-ca") == []
    assert mounted_secret(objects) is None
    assert "tls" not in operator_config(objects)["http"]


@pytest.fixture
def chart_that_finds_a_secret(tmp_path: Path) -> Path:
    """A copy of the chart with one more template: what vigil.apiTls.material answers when
    `lookup` found a Secret (a fixed one here), and when it found nothing."""
    chart = tmp_path / "vigil"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-material.yaml").write_text(
        '{{- $found := dict "data" (dict "tls.crt" "Q1JU" "tls.key" "S0VZ" "ca.crt" "Q0E=") }}\n'
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: material\ndata:\n"
        '  reused: {{ include "vigil.apiTls.material" (dict "ctx" . "existing" $found) | quote }}\n'
        '  fresh: {{ include "vigil.apiTls.material" (dict "ctx" . "existing" dict) | quote }}\n'
    )
    return chart


def test_an_upgrade_reuses_the_secret_it_finds_instead_of_rotating_it(helm: Helm, chart_that_finds_a_secret: Path) -> None:
    data = the_one(render(helm, chart=chart_that_finds_a_secret), "ConfigMap", "material")["data"]
    assert yaml.safe_load(data["reused"]) == {"tls.crt": "Q1JU", "tls.key": "S0VZ", "ca.crt": "Q0E="}
    fresh = yaml.safe_load(data["fresh"])
    assert base64.b64decode(fresh["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
    assert fresh["tls.crt"] != "Q1JU"
