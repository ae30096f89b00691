"""Who may read the operator's HTTP API, through a real operator on the real API server.

The operator runs with the chart's own identity (tests/integration/operators.py), so its
TokenReviews and SubjectAccessReviews go through the chart's binding of system:auth-delegator.
A ScheduledJob in the test's namespace runs once; then, with ServiceAccount tokens as callers:

* no token, or a token the API server does not know, gets 401 (from every data endpoint);
* `stranger`, authenticated but granted nothing, gets 403 for the execution;
* `neighbour`, who may get executions in another namespace only, gets 403 for it, and 404 when
  asking for it in their own namespace (where it does not exist);
* `reader`, who may get executions in the namespace, gets 200 with spec and status, by id and by
  namespace and id; an id that exists nowhere is 403 for them (they may not read every namespace,
  so "absent" and "elsewhere" look the same), and 404 for someone who may;
* the health probes stay open; /leader needs `get` on the leader Lease;
* the job's executions from the history database (`/namespaces/NS/scheduledjobs/JOB/executions`)
  need `list` on executions there: 401 without a token, 403 for `stranger`, for `reader` (who
  may only `get`) and for `neighbour`'s list elsewhere; `lister` gets the page with the run;
* with `http.tls` set, the API answers HTTPS only, with the certificate given, to a client that
  verifies it against its CA (a client trusting another CA is refused);
* tokens are reviewed for the audience `vigil`: the same ServiceAccount's token for the API
  server's default audience is 401, and accepted only by an operator whose
  `http.tokenAudiences` lists that audience too (a migration).
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import API_SERVER_AUDIENCE, KubeCluster
from tests.integration.jobs import create_job, executions, make_namespace, rfc3339
from tests.integration.operators import LEASE_NAME, OperatorFleet
from tests.tlscerts import make_pki
from tests.waiting import wait_for

GROUP = "vigil.dev"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Api:
    """One operator's HTTP API on a local port."""

    port: int

    def get(self, path: str, token: str | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, _body(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, _body(error.read())


def _body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def token_of(
    cluster: KubeCluster, namespace: str, name: str, rules: list[client.V1PolicyRule] | None = None
) -> str:
    """A fresh token of a new ServiceAccount `name`, bound in `namespace` to a Role with `rules`:
    for the API server's audience and `vigil`, so a kubeconfig holding it reaches both."""
    cluster.core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    if rules:
        rbac = client.RbacAuthorizationV1Api(cluster.api)
        rbac.create_namespaced_role(namespace, client.V1Role(metadata=client.V1ObjectMeta(name=name), rules=rules))
        rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name=name),
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=namespace)],
            ),
        )
    return token_for(cluster, namespace, name, audiences=[API_SERVER_AUDIENCE, "vigil"])


def token_for(cluster: KubeCluster, namespace: str, name: str, *, audiences: list[str]) -> str:
    """A TokenRequest's token of the ServiceAccount `name` for `audiences` ([]: the API server's
    default, as `kubectl create token SA` without --audience)."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=audiences, expiration_seconds=3600)
    )
    token: str = cluster.core.create_namespaced_service_account_token(name, namespace, request).status.token
    return token


GET_EXECUTIONS = [client.V1PolicyRule(api_groups=[GROUP], resources=["executions"], verbs=["get"])]
LIST_EXECUTIONS = [client.V1PolicyRule(api_groups=[GROUP], resources=["executions"], verbs=["list"])]


@contextlib.contextmanager
def serving(fleet: OperatorFleet, request: pytest.FixtureRequest, **http: Any) -> Iterator[Api]:
    """One operator of `fleet` serving its HTTP API on a free port (with more `http` settings),
    until the block ends; its log printed when the test failed, and the fleet's namespace cleared."""
    port = free_port()
    fleet.start(http={"apiPort": port, **http})
    served = Api(port)
    wait_for(lambda: _up(served), timeout=60, what="the operator serving HTTP")
    try:
        yield served
    finally:
        fleet.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(fleet.logs())
        fleet.cluster.clear_namespace(fleet.namespace)


@pytest.fixture
def api(cluster: KubeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Api, OperatorFleet]]:
    fleet = OperatorFleet(cluster, tmp_path)
    with serving(fleet, request) as served:
        yield served, fleet


def _up(api: Api) -> bool:
    try:
        return api.get("/healthz")[0] == 200
    except OSError:
        return False


@pytest.fixture
def neighbourhood(cluster: KubeCluster) -> Iterator[str]:
    name = make_namespace(cluster, "nb")
    yield name
    cluster.clear_namespace(name)


def test_the_execution_api_authenticates_and_authorises_every_caller(
    cluster: KubeCluster, namespace: str, neighbourhood: str, api: tuple[Api, OperatorFleet]
) -> None:
    served, fleet = api
    create_job(cluster, namespace, "once", runAt=rfc3339(datetime.now(UTC)))
    ex = wait_for(lambda: executions(cluster, namespace), timeout=60, what="the job's execution")[0]
    execution_id = ex["metadata"]["name"]
    by_id = f"/executions/{execution_id}"
    by_namespace = f"/namespaces/{namespace}/executions/{execution_id}"
    reader = token_of(cluster, namespace, "reader", GET_EXECUTIONS)
    stranger = token_of(cluster, namespace, "stranger")
    neighbour = token_of(cluster, neighbourhood, "neighbour", GET_EXECUTIONS)

    for path in (by_id, by_namespace, "/leader"):
        assert served.get(path)[0] == 401, path
        assert served.get(path, token="not-a-token")[0] == 401, path
    assert served.get(by_id, stranger)[0] == 403
    assert served.get(by_namespace, stranger)[0] == 403
    assert served.get(by_id, neighbour)[0] == 403
    assert served.get(by_namespace, neighbour)[0] == 403
    assert served.get(f"/namespaces/{neighbourhood}/executions/{execution_id}", neighbour)[0] == 404

    for path in (by_id, by_namespace):
        status, body = served.get(path, reader)
        assert status == 200, (path, body)
        assert body["namespace"] == namespace and body["spec"]["executionId"] == execution_id
        assert body["status"] or body["history"] is not None
    assert served.get("/executions/ex-nowhere", reader)[0] == 403
    assert served.get(f"/namespaces/{namespace}/executions/ex-nowhere", reader)[0] == 404
    assert served.get("/leader", reader)[0] == 403
    assert served.get("/healthz")[0] == 200 and served.get("/readyz")[0] == 200

    job_history = f"/namespaces/{namespace}/scheduledjobs/once/executions"
    lister = token_of(cluster, namespace, "lister", LIST_EXECUTIONS)
    neighbour_lister = token_of(cluster, neighbourhood, "neighbour-lister", LIST_EXECUTIONS)
    assert served.get(job_history)[0] == 401
    assert served.get(job_history, token="not-a-token")[0] == 401
    for caller in (stranger, reader, neighbour, neighbour_lister):
        assert served.get(job_history, caller)[0] == 403
    assert served.get(job_history + "?limit=0", reader)[0] == 403  # access before the query's errors
    assert served.get(job_history + "?limit=0", lister)[0] == 400

    def listed() -> list[dict[str, Any]] | None:
        status, body = served.get(job_history + "?limit=10", lister)
        assert status == 200, body
        return list(body["executions"]) or None

    [row] = wait_for(listed, timeout=60, what="the run in the job's history")
    assert row["executionId"] == execution_id and row["attempts"] == 1

    lease_reader = token_of(
        cluster,
        fleet.namespace,
        "lease-reader",
        [
            client.V1PolicyRule(
                api_groups=["coordination.k8s.io"], resources=["leases"], resource_names=[LEASE_NAME], verbs=["get"]
            )
        ],
    )
    assert served.get("/leader", lease_reader) == (200, "op-1\n")


def test_only_tokens_for_the_vigil_audience_are_accepted_unless_the_settings_list_another(
    cluster: KubeCluster, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """An accepted token that may get executions is answered 404 for one that exists nowhere;
    a refused one 401, before any access is asked."""
    token_of(cluster, namespace, "audiences", GET_EXECUTIONS)
    for_vigil = token_for(cluster, namespace, "audiences", audiences=["vigil"])
    for_the_api_server = token_for(cluster, namespace, "audiences", audiences=[])
    for_both = token_for(cluster, namespace, "audiences", audiences=[API_SERVER_AUDIENCE, "vigil"])
    for_another = token_for(cluster, namespace, "audiences", audiences=["another-server"])
    nowhere = f"/namespaces/{namespace}/executions/ex-nowhere"
    for workdir in ("strict", "migrating"):
        (tmp_path / workdir).mkdir()

    with serving(OperatorFleet(cluster, tmp_path / "strict"), request) as served:
        assert served.get(nowhere, for_vigil)[0] == 404
        assert served.get(nowhere, for_both)[0] == 404
        assert served.get(nowhere, for_the_api_server)[0] == 401
        assert served.get(nowhere, for_another)[0] == 401

    migrating = OperatorFleet(cluster, tmp_path / "migrating")
    with serving(migrating, request, tokenAudiences=["vigil", API_SERVER_AUDIENCE]) as served:
        assert served.get(nowhere, for_the_api_server)[0] == 404
        assert served.get(nowhere, for_vigil)[0] == 404
        assert served.get(nowhere, for_another)[0] == 401


def test_the_operator_serves_its_api_over_tls_from_the_settings(
    cluster: KubeCluster, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pki, other = make_pki(tmp_path / "pki", "vigil"), make_pki(tmp_path / "other", "other")
    (tmp_path / "operator").mkdir()
    fleet = OperatorFleet(cluster, tmp_path / "operator")
    port = free_port()
    fleet.start(http={"apiPort": port, "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key)}})
    url = f"https://127.0.0.1:{port}"
    trusting = ssl.create_default_context(cafile=str(pki.ca))

    def get(path: str, context: ssl.SSLContext, token: str | None = None) -> int:
        call = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(call, timeout=30, context=context) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            with error:
                return error.code

    def up() -> bool:
        try:
            return get("/healthz", trusting) == 200
        except OSError:
            return False

    try:
        wait_for(up, timeout=60, what="the operator serving HTTPS")
        reader = token_of(cluster, namespace, "tls-reader", GET_EXECUTIONS)
        assert get(f"/namespaces/{namespace}/executions/ex-nowhere", trusting, reader) == 404
        assert get(f"/namespaces/{namespace}/executions/ex-nowhere", trusting) == 401
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            get("/healthz", ssl.create_default_context(cafile=str(other.ca)))
        with pytest.raises(OSError):  # plain HTTP on the TLS port: no answer
            Api(port).get("/healthz")
    finally:
        fleet.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(fleet.logs())
        cluster.clear_namespace(fleet.namespace)
