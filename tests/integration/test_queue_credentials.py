"""The leader gives each namespace with a TaskQueue its workers' database role and a Secret with
its DSN, mends a Secret deleted by hand, and removes both when the namespace's last TaskQueue goes
(vigil.kube.controllers.queuecredentials, vigil.queue.roles). Real API server, real PostgreSQL.

Writing those Secrets needs `create` on Secrets in every namespace, which RBAC cannot limit by
name; the chart's policy (templates/admission-queue-credentials.yaml, rendered and applied here)
lets the operator's ServiceAccount write no other Secret outside its namespace: not another name,
and not a ServiceAccount token.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import REPO, KubeCluster
from tests.queue.conftest import conninfo
from tests.waiting import wait_for
from vigil.core.memory import FakeClock
from vigil.core.queue import Submission
from vigil.kube.controllers.queuecredentials import SECRET_KEY, SECRET_NAME, QueueCredentials
from vigil.kube.kits.coreapi import CoreApi
from vigil.queue.roles import TenantRoles
from vigil.queue.store import QueueStore, WorkerStore

__all__ = ["postgres"]

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
RELEASE = "creds-test"
OPERATOR = f"system:serviceaccount:vigil-system:{RELEASE}-vigil"
POLICY = f"{RELEASE}-vigil-queue-credentials"


@pytest.fixture
def queue_dsn(postgres: PostgresServer) -> str:
    dsn = conninfo(postgres, postgres.create_database())
    QueueStore(dsn).migrate()
    return dsn


def secret_dsn(core: CoreApi, namespace: str) -> str | None:
    try:
        secret = core.read_namespaced_secret(SECRET_NAME, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return base64.b64decode(secret["data"][SECRET_KEY]).decode()


def lease_with(dsn: str, queue: str) -> tuple[str, int]:
    """Who the DSN logs in as, and how many executions of `queue` it leases."""
    async def go() -> tuple[str, int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            user = await (await connection.execute("SELECT session_user")).fetchone()
            leased = await WorkerStore(connection, queue=queue, worker="w").lease(
                ["record"], limit=10, lease=timedelta(seconds=30), now=T0
            )
            return str(user[0] if user else ""), len(leased)

    return asyncio.run(go())


def test_a_namespace_with_a_taskqueue_gets_a_role_and_a_secret_that_goes_with_the_last_one(
    cluster: KubeCluster, namespace: str, queue_dsn: str
) -> None:
    core = CoreApi(cluster.api)
    clock = FakeClock(T0)
    credentials = QueueCredentials(core, TenantRoles(queue_dsn), now=clock.now, recheck=timedelta(minutes=5))
    queue = f"{namespace}/jobs"
    QueueStore(queue_dsn).submit(queue, [Submission("record")], now=T0)

    credentials.sync({namespace})
    first = secret_dsn(core, namespace)
    assert first is not None
    user, leased = lease_with(first, queue)
    assert user.startswith(f"vigil_{namespace}_") and leased == 1

    credentials.sync({namespace})  # nothing changed: the same Secret, the same password
    assert secret_dsn(core, namespace) == first

    core.delete_namespaced_secret(SECRET_NAME, namespace)  # by hand
    clock.advance(timedelta(minutes=5))  # the next recheck finds it gone and mends it
    credentials.sync({namespace})
    mended = secret_dsn(core, namespace)
    assert mended is not None and mended != first  # a new password, set on the role too

    credentials.sync(set())  # the namespace's last TaskQueue is gone
    assert secret_dsn(core, namespace) is None
    assert TenantRoles(queue_dsn).provisioned() == {}
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        psycopg.connect(mended).close()


@pytest.fixture(scope="module")
def operator_api(cluster: KubeCluster) -> Iterator[client.ApiClient]:
    """A client acting as the chart's operator ServiceAccount, with RBAC that would let it write any
    Secret anywhere, and the chart's policy applied: what stops it is the policy alone."""
    rendered = cluster.helm(
        "template", RELEASE, str(REPO / "helm" / "vigil"), "--namespace", "vigil-system",
        "--set", "queue.enabled=true", "--set", "queue.existingSecret=q",
        "--show-only", "templates/admission-queue-credentials.yaml",
    ).stdout  # fmt: skip
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    cluster.kubectl("apply", "-f", "-", input=rendered)
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name=RELEASE),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["secrets"], verbs=["create", "get", "update", "delete"])],
    ))  # fmt: skip
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=RELEASE),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=RELEASE),
        subjects=[client.RbacV1Subject(kind="User", name=OPERATOR, api_group="rbac.authorization.k8s.io")],
    ))  # fmt: skip
    try:
        with cluster.impersonating() as as_user:
            api = as_user(OPERATOR)
            wait_for(lambda: refused_by_policy(api, "default", secret("probe")), timeout=60,
                     what="the queue-credentials policy to be enforced")  # fmt: skip
            yield api
    finally:
        rbac.delete_cluster_role_binding(RELEASE)
        rbac.delete_cluster_role(RELEASE)
        for obj in objects:
            cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")


def secret(name: str, *, kind: str = "Opaque", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": kind,
            "metadata": {"name": name, "annotations": annotations or {}}, "stringData": {"x": "y"}}  # fmt: skip


def refused_by_policy(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> bool:
    try:
        client.CoreV1Api(api).create_namespaced_secret(namespace, body, dry_run="All")
    except ApiException as error:
        return error.status == 403 and POLICY in str(error.body)
    return False


def test_the_operator_writes_its_credentials_secret_and_no_other(
    cluster: KubeCluster, namespace: str, queue_dsn: str, operator_api: client.ApiClient
) -> None:
    QueueCredentials(CoreApi(operator_api), TenantRoles(queue_dsn), now=FakeClock(T0).now).sync({namespace})
    assert secret_dsn(CoreApi(cluster.api), namespace) is not None  # the operator's own write passes
    assert refused_by_policy(operator_api, namespace, secret("another"))
    token = secret(SECRET_NAME, kind="kubernetes.io/service-account-token",
                   annotations={"kubernetes.io/service-account.name": "default"})  # fmt: skip
    assert refused_by_policy(operator_api, namespace, token)
    assert not refused_by_policy(cluster.api, namespace, secret("another"))  # others: not its business
