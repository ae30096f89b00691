"""`make demo`'s script, as a new user runs it: Vigil installed by Helm with the built image.

A kubelet cluster of the test's own (state `.cluster/<suite>-demo`, port base PORT_BASE + 700:
apart from the suite's two clusters and the user's demo at 16000) is started as `make cluster-up`
starts one, then scripts/demo.sh runs on it unchanged: `make image`'s image loaded into the
node's containerd, `helm upgrade --install` of helm/vigil into vigil-system, the examples applied
as they are (their `busybox:1.36` is the node's local busybox, e2e/cluster/images.py). The test
reads what the script prints and what the cluster holds: the operator pod Running under the
chart's Deployment beside the jobs' pods, the heartbeat job fired and its pod Succeeded, the
workflow waiting at its approval step. Then every command the script printed (each `$ ` line,
and the approve hint) runs as a user pastes it, in a shell with the exports the script's last
lines give: the approval, as the demo's editor, is recorded by the operator. A second run (what a user does after a change) upgrades
the release in place. `localcluster down` then leaves no route of the node's bridge behind.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from e2e.cluster import localcluster, serviceroutes
from e2e.cluster.kubeletnode import NodeFiles
from e2e.cluster.release import DEMO_NAMESPACE, DEMO_RELEASE
from tests.integration.conftest import PORT_BASE, REPO, STATE

pytestmark = [pytest.mark.kubelet, pytest.mark.docker]

DEMO_STATE = STATE.with_name(f"{STATE.name}-demo")
DEMO_PORT_BASE = PORT_BASE + 700
SCRIPT = REPO / "scripts" / "demo.sh"
RUN_TIMEOUT_S = 1200  # an image build after a change, the first fire up to a minute away


@pytest.fixture(scope="module")
def demo_cluster() -> Iterator[Path]:
    localcluster.up(DEMO_STATE, DEMO_PORT_BASE, node=localcluster.NODE_KUBELET)
    try:
        yield DEMO_STATE.resolve()
    finally:
        files = NodeFiles(state=DEMO_STATE.resolve(), port_base=DEMO_PORT_BASE)
        localcluster.down(DEMO_STATE)
        assert f"-i {files.bridge} " not in iptables_rules(), "a route of the demo's bridge outlived the node"


def iptables_rules() -> str:
    return subprocess.run(["iptables", "-t", "nat", "-S", "PREROUTING"], capture_output=True, text=True, check=True).stdout


def run_demo(state: Path) -> str:
    proc = subprocess.run([str(SCRIPT)], cwd=REPO, env={**os.environ, "VIGIL_DEMO_STATE": str(state)},
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)  # fmt: skip
    assert proc.returncode == 0, f"demo.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def api(state: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(state / "kubeconfig"))


@pytest.fixture(scope="module")
def first_run(demo_cluster: Path) -> str:
    """What the demo's first run printed (the tests after it read it; only the last runs it again)."""
    return run_demo(demo_cluster)


def test_the_demo_installs_the_chart_with_the_built_image_and_runs_the_examples(
    demo_cluster: Path, first_run: str
) -> None:
    out = first_run
    core = client.CoreV1Api(api(demo_cluster))
    [operator] = core.list_namespaced_pod(DEMO_NAMESPACE, label_selector=f"app.kubernetes.io/instance={DEMO_RELEASE}").items
    assert operator.status.phase == "Running" and operator.metadata.owner_references[0].kind == "ReplicaSet"
    assert operator.spec.service_account_name == DEMO_RELEASE  # the chart's own identity (fullname vigil)
    assert operator.spec.containers[0].image.startswith("vigil:")
    # `kubectl get pods -A` shows the operator beside the jobs' pods, in the script's own output.
    listing = out[out.index("$ kubectl get pods -A") :]
    assert re.search(rf"^{DEMO_NAMESPACE}\s+{operator.metadata.name}\s+1/1\s+Running\s", listing, re.M), listing
    assert re.search(r"^default\s+\S+\s+0/1\s+Completed\s", listing, re.M), listing
    custom = client.CustomObjectsApi(api(demo_cluster))
    heartbeat = custom.get_namespaced_custom_object("vigil.dev", "v1alpha1", "default", "scheduledjobs", "heartbeat")
    assert heartbeat["status"].get("lastScheduleTime"), heartbeat["status"]
    workflow = custom.get_namespaced_custom_object("vigil.dev", "v1alpha1", "default", "workflows", "video-publish")
    assert workflow["status"]["steps"]["approve"]["phase"] == "Running", workflow["status"]
    job_pods = core.list_namespaced_pod("default", label_selector="app.kubernetes.io/managed-by=vigil").items
    assert job_pods and all(p.spec.containers[0].image == "busybox:1.36" for p in job_pods)
    assert all(p.status.phase in ("Running", "Succeeded") for p in job_pods), [p.status.phase for p in job_pods]
    assert f"-i vgl{DEMO_PORT_BASE} " in iptables_rules()  # the operator's route to the API server


def printed_commands(out: str) -> tuple[str, list[str]]:
    """The exports the demo's last lines give, and every command it printed for pasting."""
    exports = re.search(r"^vigil plugin on PATH\): (export .*)$", out, re.M)
    hint = re.search(r"^\(approve it as an editor, a member of group editors: (kubectl vigil .*)\)$", out, re.M)
    assert exports is not None and hint is not None, out
    shown = [line[2:] for line in out.splitlines() if line.startswith("$ ")]
    return exports.group(1), [*shown, hint.group(1)]


def test_the_commands_the_demo_printed_work_as_pasted(first_run: str) -> None:
    exports, commands = printed_commands(first_run)
    assert any(c.startswith("kubectl vigil --as ") and " approve video-publish approve " in c for c in commands)
    for command in commands:
        proc = subprocess.run(["bash", "-c", f"{exports}\n{command}"], cwd=REPO, env=dict(os.environ),
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, f"{command!r} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        if " approve " in command:
            assert proc.stdout.startswith("approved step approve of workflow/video-publish"), proc.stdout


def test_a_second_run_upgrades_the_release_in_place(demo_cluster: Path) -> None:
    run_demo(demo_cluster)
    helm = [str(demo_cluster / "bin" / "helm"), "--kubeconfig", str(demo_cluster / "kubeconfig")]
    history = subprocess.run([*helm, "history", DEMO_RELEASE, "-n", DEMO_NAMESPACE, "-o", "yaml"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    revisions = yaml.safe_load(history)
    assert [r["status"] for r in revisions][-1] == "deployed" and len(revisions) == 2, revisions
    assert serviceroutes.KUBERNETES_SERVICE[0] in iptables_rules()
