"""Vigil installed by its own chart on the kubelet node: the image loaded, the routes, `helm`.

What `make demo` and the chart's e2e suite (e2e/test_chart.py) both do to run the operator
in-cluster on a local control plane with a real node:

* `load_image` — `docker save <tag> | ctr -n k8s.io images import -`: no registry is reachable
  here, so the image `make image` built goes straight into the node's containerd, and the chart
  names it with `image.pullPolicy: Never` (what the README says to do for any node);
* `route_api` — the `kubernetes` Service's ClusterIP routed to the API server on loopback (the
  local control plane runs no kube-proxy, see serviceroutes.py); the routes go when the node
  stops (`localcluster down` removes every route of the node's bridge);
* `demo` — both, then `helm upgrade --install` of helm/vigil into `vigil-system` with one replica
  and its SQLite history on an emptyDir (two replicas need a shared PostgreSQL, and the bundled
  one's image cannot be pulled here), waiting until the operator pod is Ready.

    python -m e2e.cluster.release demo --state .cluster/default
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import yaml

from e2e.cluster import serviceroutes
from e2e.cluster.kubeletnode import NodeFiles, snapshotter_of
from e2e.cluster.localcluster import DEFAULT_STATE, NODE_KUBELET, node_kind

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "vigil"
IMAGE_SCRIPT = REPO / "scripts" / "image.sh"
DOCKERD = REPO / "e2e" / "cluster" / "dockerd.sh"
DEMO_RELEASE = "vigil"
DEMO_NAMESPACE = "vigil-system"
ROLLOUT_TIMEOUT_S = 300  # the operator pod's first start on 2 shared cores
IMPORT_TIMEOUT_S = 600


def node_files(state: Path) -> NodeFiles:
    port_base = int((state / "port-base").read_text())
    return NodeFiles(state=state.resolve(), port_base=port_base)


def build_image() -> str:
    """`make image`'s script: builds (or finds up to date) the operator image; returns its name."""
    proc = subprocess.run([str(IMAGE_SCRIPT)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/image.sh failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout.strip().splitlines()[-1]


def docker_env() -> dict[str, str]:
    """The environment for `docker` to talk to the project's daemon (e2e/cluster/dockerd.sh)."""
    out = subprocess.run([str(DOCKERD), "host"], check=True, capture_output=True, text=True)
    return {**os.environ, "DOCKER_HOST": out.stdout.strip()}


def load_image(tag: str, files: NodeFiles) -> None:
    """`docker save <tag> | ctr -n k8s.io images import -` into the node's containerd."""
    ctr = [str(files.state / "node-bin" / "ctr"), "--address", str(files.socket), "--namespace", "k8s.io",
           "images", "import", "--snapshotter", snapshotter_of(files), "-"]  # fmt: skip
    save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE, env=docker_env())
    try:
        imported = subprocess.run(ctr, stdin=save.stdout, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
    finally:
        assert save.stdout is not None
        save.stdout.close()
        save.wait(timeout=60)
    if save.returncode != 0 or imported.returncode != 0:
        raise RuntimeError(f"importing {tag} into the node failed: {imported.stderr.strip()}")


def route_api(files: NodeFiles, kubeconfig: Path) -> serviceroutes.Route:
    """Pods of the node reach the `kubernetes` Service's ClusterIP: the API server on loopback."""
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    ip, port = serviceroutes.KUBERNETES_SERVICE
    return serviceroutes.forward(serviceroutes.Route(files.bridge, ip, port, int(urlparse(server).port or 443)))


def image_values(tag: str) -> dict[str, object]:
    repository, version = tag.rsplit(":", 1)
    return {"repository": repository, "tag": version, "pullPolicy": "Never"}


def demo_values(tag: str, image_id: str) -> dict[str, object]:
    """One replica, SQLite history; the image's id as a pod annotation, so a rebuilt image under
    the same tag rolls the pod on the next `make demo`."""
    return {
        "image": image_values(tag),
        "replicaCount": 1,
        "postgresql": {"enabled": False},
        "podAnnotations": {"vigil.dev/image-id": image_id},
    }


def image_id(tag: str) -> str:
    out = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag],
                         check=True, capture_output=True, text=True, env=docker_env())  # fmt: skip
    return out.stdout.strip()


def demo(state: Path) -> None:
    """Install (or upgrade) the demo's release on the kubelet cluster in `state`."""
    if node_kind(state) != NODE_KUBELET:
        raise SystemExit(f"the cluster in {state} has no kubelet node: start it with NODE=kubelet")
    files = node_files(state)
    kubeconfig = state / "kubeconfig"
    started = time.monotonic()
    tag = build_image()
    _say(f"image {tag} built or up to date ({time.monotonic() - started:.0f}s)")
    started = time.monotonic()
    load_image(tag, files)
    _say(f"image loaded into the node's containerd ({time.monotonic() - started:.0f}s)")
    route_api(files, kubeconfig)
    values = state / "demo-values.yaml"
    values.write_text(json.dumps(demo_values(tag, image_id(tag)), indent=2))
    helm = [str(state / "bin" / "helm"), "--kubeconfig", str(kubeconfig)]
    started = time.monotonic()
    proc = subprocess.run(
        [*helm, "upgrade", "--install", DEMO_RELEASE, str(CHART), "--namespace", DEMO_NAMESPACE, "--create-namespace",
         "--values", str(values), "--wait", "--timeout", f"{ROLLOUT_TIMEOUT_S}s"],
        capture_output=True, text=True, timeout=ROLLOUT_TIMEOUT_S + 60,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"helm upgrade --install failed:\n{proc.stderr}\n{_describe(state)}")
    _say(f"helm release {DEMO_RELEASE} in {DEMO_NAMESPACE} ready ({time.monotonic() - started:.0f}s)")


def _describe(state: Path) -> str:
    kubectl = [str(state / "bin" / "kubectl"), "--kubeconfig", str(state / "kubeconfig"), "-n", DEMO_NAMESPACE]
    pods = subprocess.run([*kubectl, "get", "pods", "-o", "wide"], capture_output=True, text=True, check=False)
    logs = subprocess.run([*kubectl, "logs", "-l", "app.kubernetes.io/component=operator", "--tail=40"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return f"{pods.stdout}{pods.stderr}\n{logs.stdout}{logs.stderr}"


def _say(text: str) -> None:
    print(f"== {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="release", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["demo"])
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE)
    args = parser.parse_args(argv)
    demo(args.state.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
