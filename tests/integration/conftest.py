"""Fixtures for tests against the real local control plane.

The `cluster` fixture starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and the local node agent once per session (in `.cluster/test`,
on ports apart from the demo's), installs Vigil's CRDs and the workflow-requests
ValidatingAdmissionPolicy (the chart's copy, as it is), and stops everything at
the end. Set VIGIL_TEST_KEEP_CLUSTER=1 to leave it running between sessions
for faster iteration; it is reused when found running.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Generator, Iterator
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
PORT_BASE = int(os.environ.get("VIGIL_TEST_PORT_BASE", "26000"))  # apart from the demo's 16000
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


@pytest.fixture(scope="session")
def cluster() -> Iterator[KubeCluster]:
    external = os.environ.get("VIGIL_TEST_KUBECONFIG")
    keep = external is not None or os.environ.get("VIGIL_TEST_KEEP_CLUSTER") == "1"
    if external:  # e.g. a kind cluster on a machine with Docker; kubectl and helm come from PATH
        kubectl = shutil.which("kubectl")
        assert kubectl, "VIGIL_TEST_KUBECONFIG is set but kubectl is not on PATH"
        kube = KubeCluster(Path(external), Path(kubectl).parent)
    else:
        handle = localcluster.up(STATE, PORT_BASE)
        kube = KubeCluster(handle.kubeconfig, handle.state / "bin")
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
    try:
        yield kube
    finally:
        if not keep:
            localcluster.down(STATE)


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
    cluster.core.delete_namespace(name)


@pytest.fixture
def fleet(cluster: KubeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Operator processes of one test, in an operator namespace of their own."""
    from tests.integration.operators import OperatorFleet

    operators = OperatorFleet(cluster, tmp_path)
    yield operators
    operators.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(operators.logs())
    cluster.core.delete_namespace(operators.namespace)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
