"""Console viewers for the integration tests: ServiceAccount tokens with a Role of their own, the
rights the console's pages ask for, and a free local port for an operator to serve the console on."""

from __future__ import annotations

import socket
import urllib.request
from typing import Any

from kubernetes import client

from tests.integration.conftest import API_SERVER_AUDIENCE, KubeCluster
from tests.integration.jobs import GROUP


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def viewer_token(cluster: KubeCluster, namespace: str, name: str, rules: list[dict[str, Any]]) -> str:
    """A token of a new ServiceAccount `name` bound in `namespace` to a Role with `rules`, for the
    API server's audience and `vigil` (the console reviews the latter, writes with the former)."""
    cluster.core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    })  # fmt: skip
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[API_SERVER_AUDIENCE, "vigil"], expiration_seconds=3600)
    )
    token: str = cluster.core.create_namespaced_service_account_token(name, namespace, request).status.token
    return token


def rules(*, approve: bool) -> list[dict[str, Any]]:
    """alice's (`approve`) and bob's rights in the team namespace: bob lacks `approve` on
    workflows and `update` (retry) on task queues' executions."""
    workflow_verbs = ["get", "list", "patch", *(["approve"] if approve else [])]
    queue_verbs = ["get", *(["update"] if approve else [])]
    return [
        {"apiGroups": [GROUP], "resources": ["taskqueues"], "verbs": ["get", "list"]},
        {"apiGroups": [GROUP], "resources": ["taskqueues/executions"], "verbs": queue_verbs},
        {"apiGroups": [GROUP], "resources": ["scheduledjobs"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [GROUP], "resources": ["executions"], "verbs": ["get", "list", "create"]},
        {"apiGroups": [GROUP], "resources": ["workflows"], "verbs": workflow_verbs},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]


def serving(base: str) -> bool:
    """Whether the console at `base` (http://host:port) answers its login page."""
    try:
        with urllib.request.urlopen(f"{base}/console/login", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
