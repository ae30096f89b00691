"""Fixtures for tests against the real local control plane.

The `cluster` fixture starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and the local node agent once per session (in `.cluster/test`,
on ports apart from the demo's), installs Vigil's CRDs and the workflow-requests
ValidatingAdmissionPolicy (the chart's copy, as it is), and stops everything at
the end. Set VIGIL_TEST_KEEP_CLUSTER=1 to leave it running between sessions
for faster iteration; it is reused when found running.

Tests marked `@pytest.mark.kubelet` need a real node: the `kubelet_cluster`
fixture starts a second cluster the same way, with a kubelet, containerd 2 and
runc instead of the node agent (in `.cluster/test-kubelet`, 500 ports above the
first), only when such a test runs. The two clusters never share a node.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from e2e.cluster import localcluster
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
#: One state directory per cluster; VIGIL_TEST_CLUSTER lets parallel runs keep theirs apart.
STATE = REPO / ".cluster" / os.environ.get("VIGIL_TEST_CLUSTER", "test")
GROUP, VERSION = "vigil.dev", "v1alpha1"
#: Every namespaced kind of Vigil's, which `clear_namespace` empties.
VIGIL_KINDS = ("scheduledjobs", "executions", "workflows", "workflowdefinitions", "schedulebuckets", "taskqueues")
PORT_BASE = int(os.environ.get("VIGIL_TEST_PORT_BASE", "26000"))  # apart from the demo's 16000
#: The real node's cluster: its own state directory and ports (etcd +379/380, API +443, kubelet +248/250).
#: The audience the API server's own tokens carry (its --service-account-issuer, e2e/cluster/localcluster.py).
API_SERVER_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
KUBELET_STATE = STATE.with_name(f"{STATE.name}-kubelet")
KUBELET_PORT_BASE = PORT_BASE + 500
#: The workflow-requests ValidatingAdmissionPolicy and its binding: the one copy the chart renders.
ADMISSION_POLICY = REPO / "helm" / "vigil" / "files" / "admission" / "workflow-requests.yaml"


class KubeCluster:
    """A running local cluster: kubeconfig, kubectl, helm and API clients."""

    def __init__(self, kubeconfig: Path, bin_dir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.bin = bin_dir
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.coordination = client.CoordinationV1Api(self.api)
        self.apiext = client.ApiextensionsV1Api(self.api)

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, helm, operators) aimed at this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": f"{self.bin}:{os.environ['PATH']}"}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.bin / "helm"), *args], capture_output=True, text=True, env=self.env, timeout=120
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def pod(self, namespace: str, name: str) -> Any:
        return self.core.read_namespaced_pod(name, namespace)

    def clear_namespace(self, name: str, *, timeout: float = 120) -> None:
        """Delete a test's namespace and wait until nothing of Vigil's is left in it.

        Every operator of a later test watches the whole cluster, so a terminating namespace's
        jobs, executions, workflows and pods would reach it; they are deleted first (pods with no
        grace: the test is over) and awaited. The namespace object itself then goes in the
        background. Safe to call twice.
        """
        for plural in VIGIL_KINDS:
            with gone_is_done():
                self.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, name, plural)
        with gone_is_done():
            self.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        with gone_is_done():
            self.core.delete_namespace(name)

        def leftovers() -> list[str]:
            found = [
                f"{plural}/{o['metadata']['name']}"
                for plural in VIGIL_KINDS
                for o in self.custom.list_namespaced_custom_object(GROUP, VERSION, name, plural)["items"]
            ]
            return found + [f"pods/{p.metadata.name}" for p in self.core.list_namespaced_pod(name).items]

        wait_for(lambda: not leftovers(), timeout=timeout, interval=0.5, what=f"namespace {name} to be emptied")

    @contextlib.contextmanager
    def impersonating(self) -> Iterator[Callable[..., client.ApiClient]]:
        """`as_user(user, group=None)`: an API client of the admin's that acts as that user (and
        group), so their rights come from real RBAC. Every client made is closed on exit."""
        made: list[client.ApiClient] = []

        def as_user(user: str, group: str | None = None) -> client.ApiClient:
            api = config.new_client_from_config(config_file=str(self.kubeconfig))
            api.set_default_header("Impersonate-User", user)
            if group is not None:
                api.set_default_header("Impersonate-Group", group)
            made.append(api)
            return api

        try:
            yield as_user
        finally:
            for api in made:
                api.close()

    def token_kubeconfig(
        self, namespace: str, service_account: str, path: Path, *, hours: int = 4
    ) -> Path:
        """Write a kubeconfig that authenticates as `service_account` with a fresh bound token.

        Whatever runs with it has exactly that ServiceAccount's RBAC, never the admin's. The
        token is bound to the API server's audience and to `vigil`, so the same kubeconfig
        reaches the operator's HTTP API (which reviews tokens for `vigil` only).
        """
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[API_SERVER_AUDIENCE, "vigil"], expiration_seconds=hours * 3600)
        )
        token = self.core.create_namespaced_service_account_token(service_account, namespace, request).status.token
        admin = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]
        ca = admin.get("certificate-authority-data") or base64.b64encode(
            Path(admin["certificate-authority"]).read_bytes()
        ).decode()
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": service_account,
            "clusters": [{"name": "local", "cluster": {"server": admin["server"], "certificate-authority-data": ca}}],
            "users": [{"name": service_account, "user": {"token": token}}],
            "contexts": [{"name": service_account, "context": {
                "cluster": "local", "user": service_account, "namespace": namespace}}],
        }))  # fmt: skip
        return path


@contextlib.contextmanager
def gone_is_done() -> Iterator[None]:
    """Around a delete: "already gone" (404) and "already going" (409) count as done."""
    try:
        yield
    except client.ApiException as error:
        if error.status not in (404, 409):
            raise


@pytest.fixture(scope="session")
def cluster() -> Iterator[KubeCluster]:
    external = os.environ.get("VIGIL_TEST_KUBECONFIG")
    keep = external is not None or os.environ.get("VIGIL_TEST_KEEP_CLUSTER") == "1"
    if external:  # e.g. a kind cluster on a machine with Docker; kubectl and helm come from PATH
        kubectl = shutil.which("kubectl")
        assert kubectl, "VIGIL_TEST_KUBECONFIG is set but kubectl is not on PATH"
        kube = KubeCluster(Path(external), Path(kubectl).parent)
        install_vigil_api(kube)
        yield kube
        return
    yield from _local_cluster(STATE, PORT_BASE, keep=keep)


@pytest.fixture(scope="session")
def kubelet_cluster() -> Iterator[KubeCluster]:
    """A local control plane whose node is a real kubelet with containerd 2 and runc.

    Started (binaries built, images loaded) the first time a `kubelet` test asks; stopped at
    the end of the session unless VIGIL_TEST_KEEP_CLUSTER=1.
    """
    keep = os.environ.get("VIGIL_TEST_KEEP_CLUSTER") == "1"
    yield from _local_cluster(KUBELET_STATE, KUBELET_PORT_BASE, keep=keep, node=localcluster.NODE_KUBELET)


def _local_cluster(
    state: Path, port_base: int, *, keep: bool, node: str = localcluster.NODE_AGENT
) -> Iterator[KubeCluster]:
    """A local control plane with Vigil's CRDs and API objects; stopped afterwards unless `keep`."""
    handle = localcluster.up(state, port_base, node=node)
    kube = KubeCluster(handle.kubeconfig, handle.state / "bin")
    install_vigil_api(kube)
    try:
        yield kube
    finally:
        if not keep:
            localcluster.down(state)


def install_vigil_api(kube: KubeCluster) -> None:
    """Vigil's CRDs, Established, and the workflow-requests admission policy, enforced."""
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    for path in sorted((REPO / "crds").glob("*.yaml")):
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ADMISSION_POLICY))
    wait_for(
        lambda: workflow_requests_enforced(kube),
        timeout=60,
        what="the workflow-requests admission policy to be enforced",
    )


def workflow_requests_enforced(kube: KubeCluster) -> bool:
    """Whether the API server already refuses a request written in someone else's name.

    A policy takes effect a moment after it is created; a server-side dry run asks without
    writing anything.
    """
    probe = {
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "admission-probe"},
        "spec": {
            "steps": [{"id": "wait", "type": "wait", "wait": {"duration": "1s"}}],
            "requests": [{"id": "probe", "action": "cancel", "by": "nobody-at-all"}],
        },
    }
    try:
        kube.custom.create_namespaced_custom_object(
            "vigil.dev", "v1alpha1", "default", "workflows", probe, dry_run="All"
        )
    except client.ApiException as error:
        return error.status == 403 and "workflow-requests" in str(error.body)
    return False


@pytest.fixture
def namespace(cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace per test, with its default service account ready."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def sa_ready() -> bool:
        try:
            cluster.core.read_namespaced_service_account("default", name)
        except client.ApiException:
            return False
        return True

    wait_for(sa_ready, timeout=60, what=f"default service account in {name}")
    yield name
    cluster.clear_namespace(name)


@pytest.fixture
def fleet(cluster: KubeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Operator processes of one test, in an operator namespace of their own."""
    from tests.integration.operators import OperatorFleet

    operators = OperatorFleet(cluster, tmp_path)
    yield operators
    operators.finish(request)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
