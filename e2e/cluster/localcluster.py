"""Start and stop a real Kubernetes control plane on loopback, for tests and the demo.

`kind` needs images from a registry, which these machines cannot reach; instead the
real binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) are
built from source by `build.sh` beside this file and started here as local
processes, with one of two nodes:

* `agent` (the default): the local node agent (`e2e/nodeagent.py`), which plays
  the kubelet by running each pod's command as a local process. Fast; for the
  benchmarks and most tests.
* `kubelet`: a real kubelet with containerd 2, runc and the CNI bridge
  (`kubeletnode.py`), for what only a real node shows (OOM kills, image errors,
  grace periods, termination messages).

Admission, CRD schemas, status subresources, resourceVersion conflicts, Leases,
watches, RBAC and garbage collection are all the real thing.

    python -m e2e.cluster.localcluster up   [--state DIR] [--port-base N] [--node agent|kubelet]
    python -m e2e.cluster.localcluster down [--state DIR]
    python -m e2e.cluster.localcluster status [--state DIR]

`up` is idempotent: a cluster already running in the state directory is reused
(and refused if it runs the other kind of node: the two never share a cluster).
`down` stops every process it started (SIGTERM, then SIGKILL), checks none is left,
and for the real node removes its pods, unmounts what kubelet and containerd
mounted, and deletes its bridge and cgroups. Everything lives in the state
directory: `kubeconfig`, `logs/`, `pki/`, `etcd/`, `pids/`, `node-kubelet/`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from e2e.cluster import kubeletnode

REPO = Path(__file__).resolve().parents[2]
DEFAULT_STATE = REPO / ".cluster" / "default"
DEFAULT_PORT_BASE = 16000
NODE_NAME = "vigil-node"
NODE_AGENT, NODE_KUBELET = "agent", "kubelet"
NODE_KINDS = (NODE_AGENT, NODE_KUBELET)
SERVICE_CIDR = "10.96.0.0/16"
_CHILDREN: list[subprocess.Popen[bytes]] = []
# The scheduler's client may send this many requests a second (and as a burst). Its default, 50
# (burst 100), holds every pod to 50 bindings a second after the first 100, whatever the API
# server could take: the figures of `make bench` would measure that limit, not the control plane
# or Vigil, and a cluster sized for thousands of pods a second raises it too.
SCHEDULER_QPS = 1000
START_TIMEOUT_S = 180.0  # a cold etcd + API server on 2 busy cores takes ~20 s; allow margin


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where a running local cluster lives and how to reach it."""

    state: Path
    port_base: int

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def api_port(self) -> int:
        return self.port_base + 443

    @property
    def etcd_port(self) -> int:
        return self.port_base + 379

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pids(self) -> Path:
        return self.state / "pids"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log, written only by a cluster started with `audit=True`."""
        return self.logs / "audit.jsonl"


def bin_dir(what: str = "control-plane") -> Path:
    """Build (if needed) and return the directory holding the control plane binaries, or with
    `what="node"` the real node's (kubelet, containerd, ctr, the runc shim, CNI plugins, crictl)."""
    out = subprocess.run(
        [str(REPO / "e2e" / "cluster" / "build.sh"), what],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


# --- PKI --------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_pki(pki: Path) -> None:
    """A CA, the API server's serving cert, an admin client cert and the SA key pair."""
    if (pki / "admin.crt").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    days = "3650"
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=pki)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-days", days,
        "-subj", "/CN=vigil-local-ca", "-out", "ca.crt", cwd=pki,
    )  # fmt: skip
    (pki / "serving.ext").write_text(
        "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    (pki / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject, ext in (
        ("apiserver", "/CN=kube-apiserver", "serving.ext"),
        ("admin", "/O=system:masters/CN=vigil-admin", "client.ext"),
    ):
        _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=pki)
        _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=pki)
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", days, "-extfile", ext, "-out", f"{name}.crt", cwd=pki,
        )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def _make_node_cert(pki: Path) -> None:
    """The kubelet's client certificate: user system:node:<name> in group system:nodes, which the
    Node authorizer gives exactly a node's rights."""
    if (pki / "node.crt").exists():
        return
    _openssl("genrsa", "-out", "node.key", "2048", cwd=pki)
    subject = f"/O=system:nodes/CN=system:node:{NODE_NAME}"
    _openssl("req", "-new", "-key", "node.key", "-subj", subject, "-out", "node.csr", cwd=pki)
    _openssl(
        "x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "3650", "-extfile", "client.ext", "-out", "node.crt", cwd=pki,
    )  # fmt: skip


def _write_kubeconfig(cluster: Cluster, *, user: str = "admin", path: Path | None = None) -> None:
    pki = cluster.pki
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "vigil-local",
                "cluster": {"server": cluster.server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": "vigil-admin",
                "user": {
                    "client-certificate": str(pki / f"{user}.crt"),
                    "client-key": str(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "vigil-local", "context": {"cluster": "vigil-local", "user": "vigil-admin"}}
        ],
        "current-context": "vigil-local",
    }
    (path or cluster.kubeconfig).write_text(json.dumps(config, indent=2))


# --- processes --------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers signal 0; treat it as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _running(cluster: Cluster, name: str) -> int | None:
    pidfile = cluster.pids / f"{name}.pid"
    if not pidfile.exists():
        return None
    pid = int(pidfile.read_text())
    return pid if _pid_alive(pid) else None


def _spawn(cluster: Cluster, name: str, argv: list[str], *, env: dict[str, str] | None = None) -> None:
    if _running(cluster, name):
        return
    cluster.logs.mkdir(parents=True, exist_ok=True)
    cluster.pids.mkdir(parents=True, exist_ok=True)
    with (cluster.logs / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        )
    _CHILDREN.append(proc)  # daemons outlive this call; keep the handle so it is never collected
    (cluster.pids / f"{name}.pid").write_text(str(proc.pid))


def _wait(what: str, ready: Callable[[], bool], cluster: Cluster, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        for name in PROCESSES:
            pidfile = cluster.pids / f"{name}.pid"
            if pidfile.exists() and not _running(cluster, name):
                log = (cluster.logs / f"{name}.log").read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(f"{name} exited while waiting for {what}:\n" + "\n".join(log))
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; see logs in {cluster.logs}")


def _ssl_context(cluster: Cluster) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cluster.pki / "ca.crt"))
    ctx.load_cert_chain(str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
    return ctx


def _get(cluster: Cluster, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(
            cluster.server + path, context=_ssl_context(cluster), timeout=5
        ) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def _api_ready(cluster: Cluster) -> bool:
    return _get(cluster, "/readyz")[0] == 200


def _default_sa_ready(cluster: Cluster) -> bool:
    return _get(cluster, "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200


def _node_ready(cluster: Cluster) -> bool:
    code, body = _get(cluster, f"/api/v1/nodes/{NODE_NAME}")
    if code != 200:
        return False
    node = json.loads(body)
    conditions = node.get("status", {}).get("conditions", [])
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    taints = node.get("spec", {}).get("taints") or []
    return ready and not any(t["key"].startswith("node.kubernetes.io/not-ready") for t in taints)


def _start_etcd(cluster: Cluster, bins: Path) -> None:
    port = cluster.etcd_port
    _spawn(
        cluster,
        "etcd",
        [
            str(bins / "etcd"),
            "--name=vigil",
            f"--data-dir={cluster.state / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{port}",
            f"--advertise-client-urls=http://127.0.0.1:{port}",
            f"--listen-peer-urls=http://127.0.0.1:{port + 1}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{port + 1}",
            f"--initial-cluster=vigil=http://127.0.0.1:{port + 1}",
            "--unsafe-no-fsync=true",  # test cluster: durability across host crashes is not needed
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
    )


#: Every request once, at Metadata level (verb, resource, subresource, namespace, user; no bodies),
#: when its response is complete, or when a watch's response starts (a watch completes only when
#: it ends). For benchmarks that count API requests by client; tests run without it.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
"""


def _audit_flags(cluster: Cluster) -> list[str]:
    policy = cluster.state / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={cluster.audit_log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",  # batch mode drops events when its buffer fills; a count must not
        "--audit-log-maxsize=0",  # never rotated: a reader keeps its offset in one file
    ]


#: Set to 1 to serve the API server's CPU and heap profiles (`kubectl get --raw
#: '/debug/pprof/profile?seconds=20' > cpu.pb`, then `go tool pprof -top <state>/bin/kube-apiserver
#: cpu.pb`): how a benchmark's API server CPU is attributed. Off by default, as on a hardened
#: cluster. Read when the API server starts: a running cluster keeps what it started with.
PROFILING_ENV = "VIGIL_APISERVER_PROFILING"


def profiling_flag(environ: Mapping[str, str] = os.environ) -> str:
    return f"--profiling={'true' if environ.get(PROFILING_ENV) == '1' else 'false'}"


def _start_apiserver(cluster: Cluster, bins: Path, *, audit: bool, node: str) -> None:
    pki = cluster.pki
    # A real kubelet authenticates as system:node:<name>: the Node authorizer and NodeRestriction
    # give it a node's rights and no more. The node agent uses the admin's credentials.
    authorization = "Node,RBAC" if node == NODE_KUBELET else "RBAC"
    node_flags = ["--enable-admission-plugins=NodeRestriction"] if node == NODE_KUBELET else []
    _spawn(
        cluster,
        "kube-apiserver",
        [
            str(bins / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{cluster.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={cluster.api_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--authorization-mode={authorization}",
            # How `kubectl logs` and the like reach a kubelet, which asks the API server
            # (webhook) whether this client may.
            f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            *node_flags,
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",  # it refuses loopback, and nothing here routes to it
            profiling_flag(),
            "--v=1",
            *(_audit_flags(cluster) if audit else []),
        ],
    )


def _start_controllers(cluster: Cluster, bins: Path) -> None:
    pki = cluster.pki
    _spawn(
        cluster,
        "kube-controller-manager",
        [
            str(bins / "kube-controller-manager"),
            f"--kubeconfig={cluster.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            "--use-service-account-credentials=false",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--controllers=*",
            "--v=1",
        ],
    )
    _spawn(
        cluster,
        "kube-scheduler",
        [
            str(bins / "kube-scheduler"),
            f"--config={_write_scheduler_config(cluster)}",
            "--secure-port=0",
            "--v=1",
        ],
    )


def _write_scheduler_config(cluster: Cluster) -> Path:
    """The scheduler's configuration: the defaults, but for its client's rate limit (SCHEDULER_QPS)."""
    path = cluster.state / "scheduler.json"
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": str(cluster.kubeconfig),
            "qps": SCHEDULER_QPS,
            "burst": SCHEDULER_QPS,
        },
        "leaderElection": {"leaderElect": False},
    }
    path.write_text(json.dumps(config, indent=2))
    return path


def _start_node_agent(cluster: Cluster) -> None:
    _spawn(
        cluster,
        "node-agent",
        [
            sys.executable,
            "-m",
            "e2e.nodeagent",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--node-name={NODE_NAME}",
            f"--workdir={cluster.state / 'node'}",
        ],
    )


def _start_kubelet_node(cluster: Cluster) -> None:
    """containerd (then the images loaded into it), then the kubelet; see kubeletnode."""
    node_bin = bin_dir("node")
    files = kubeletnode.NodeFiles(state=cluster.state, port_base=cluster.port_base)
    (cluster.state / "node-bin").unlink(missing_ok=True)
    (cluster.state / "node-bin").symlink_to(node_bin)
    _make_node_cert(cluster.pki)
    address = kubeletnode.write_files(files, node_bin=node_bin, ca=cluster.pki / "ca.crt")
    _write_kubeconfig(cluster, user="node", path=files.kubelet_kubeconfig)
    env = kubeletnode.containerd_env(node_bin)
    _spawn(cluster, "containerd", kubeletnode.containerd_argv(files, node_bin), env=env)
    _wait("containerd to answer", lambda: kubeletnode.containerd_ready(files, node_bin), cluster)
    kubeletnode.load_images(files, node_bin)
    argv = kubeletnode.kubelet_argv(files, node_bin, node_name=NODE_NAME, address=address)
    _spawn(cluster, "kubelet", argv, env=env)


#: Stopped in this order: the node first, the store last.
PROCESSES = ("node-agent", "kubelet", "containerd", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")


def node_kind(state: Path) -> str:
    """Which node the cluster in `state` was started with (agent when it does not say)."""
    marker = state / "node-kind"
    return marker.read_text().strip() if marker.exists() else NODE_AGENT


def up(
    state: Path = DEFAULT_STATE,
    port_base: int = DEFAULT_PORT_BASE,
    *,
    audit: bool = False,
    node: str = NODE_AGENT,
) -> Cluster:
    """Start every component not already running and wait until a pod could run.

    `node` picks the node: the local node agent (default) or a real kubelet with containerd.
    A cluster already running with the other kind is refused, never mixed. `audit=True` has the
    API server write an audit log (`Cluster.audit_log`, AUDIT_POLICY) when it starts here; an
    API server already running keeps the flags it was started with.
    """
    if node not in NODE_KINDS:
        raise ValueError(f"node must be one of {NODE_KINDS}, not {node!r}")
    cluster = Cluster(state=state.resolve(), port_base=port_base)
    fresh = not any(_running(cluster, name) for name in PROCESSES)
    if not fresh and node_kind(cluster.state) != node:
        raise RuntimeError(
            f"the cluster in {cluster.state} runs with node {node_kind(cluster.state)!r}, not {node!r}: "
            "stop it first (localcluster down), the two kinds never run together"
        )
    if fresh and (cluster.state / "etcd").exists():
        shutil.rmtree(cluster.state / "etcd")  # a stopped cluster restarts empty
        shutil.rmtree(cluster.state / "node", ignore_errors=True)
    if fresh:
        _clean_node(cluster)  # whatever a cluster killed without `down` left behind
    bins = bin_dir()
    cluster.state.mkdir(parents=True, exist_ok=True)
    (cluster.state / "bin").unlink(missing_ok=True)
    (cluster.state / "bin").symlink_to(bins)
    (cluster.state / "port-base").write_text(str(port_base))
    (cluster.state / "node-kind").write_text(node)
    _make_pki(cluster.pki)
    _write_kubeconfig(cluster)
    _start_etcd(cluster, bins)
    _start_apiserver(cluster, bins, audit=audit, node=node)
    _wait("the API server to be ready", lambda: _api_ready(cluster), cluster)
    _start_controllers(cluster, bins)
    if node == NODE_KUBELET:
        _start_kubelet_node(cluster)
    else:
        _start_node_agent(cluster)
    _wait("the default service account", lambda: _default_sa_ready(cluster), cluster)
    _wait(f"node {NODE_NAME} to be Ready", lambda: _node_ready(cluster), cluster)
    return cluster


def _stop_pid(pid: int, grace_s: float) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.1)
    if _pid_alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _pid_alive(pid):
            time.sleep(0.1)


def stop_component(state: Path, name: str, *, grace_s: float = 10) -> None:
    """Stop one running component (SIGTERM, then SIGKILL after `grace_s`), as a crash would; `up`
    starts it again with the rest's data kept. For the fault tests (tests/faults/controlplane.py)."""
    cluster = Cluster(state=state.resolve(), port_base=_port_base(state))
    pid = _running(cluster, name)
    if pid is None:
        raise RuntimeError(f"{name} is not running in {cluster.state}")
    _stop_pid(pid, grace_s)
    (cluster.pids / f"{name}.pid").unlink(missing_ok=True)


def down(state: Path = DEFAULT_STATE) -> None:
    """Stop every process of the cluster in dependency order; leave none behind."""
    cluster = Cluster(state=state.resolve(), port_base=_port_base(state))
    # Anything else started beside the cluster (an operator, say) goes first.
    extra = sorted(p.stem for p in cluster.pids.glob("*.pid") if p.stem not in PROCESSES) if cluster.pids.exists() else []
    for name in (*extra, *PROCESSES):
        pid = _running(cluster, name)
        if name == "containerd" and pid:
            # The kubelet is stopped; its pods still run under containerd's shims, which
            # outlive containerd. Remove them through the CRI while containerd still answers.
            kubeletnode.remove_pods(_node_files(cluster), cluster.state / "node-bin")
        if pid:
            _stop_pid(pid, grace_s=10)
        (cluster.pids / f"{name}.pid").unlink(missing_ok=True)
    for proc in _CHILDREN:  # reap what this process started, so no zombie or warning is left
        if proc.poll() is None and not _pid_alive(proc.pid):
            proc.wait(timeout=5)
    left = [name for name in (*extra, *PROCESSES) if _running(cluster, name)]
    if left:
        raise RuntimeError(f"processes still running after stop: {left}")
    _clean_node(cluster)


def _node_files(cluster: Cluster) -> kubeletnode.NodeFiles:
    return kubeletnode.NodeFiles(state=cluster.state, port_base=cluster.port_base)


def _clean_node(cluster: Cluster) -> None:
    """What a real node leaves once its processes stopped: shims, mounts, the bridge, cgroups."""
    files = _node_files(cluster)
    if not files.root.exists():
        return
    left = kubeletnode.clean(files)
    if left:
        raise RuntimeError(f"the real node left these behind after stop: {left}")


def _port_base(state: Path) -> int:
    path = state / "port-base"
    return int(path.read_text()) if path.exists() else DEFAULT_PORT_BASE


def status(state: Path = DEFAULT_STATE) -> dict[str, int | None]:
    cluster = Cluster(state=state.resolve(), port_base=_port_base(state))
    return {name: _running(cluster, name) for name in PROCESSES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="localcluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE)
    parser.add_argument("--port-base", type=int, default=DEFAULT_PORT_BASE)
    parser.add_argument(
        "--node", choices=NODE_KINDS, default=NODE_AGENT,
        help="agent: the local node agent (fast); kubelet: kubelet + containerd + runc + CNI",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "up":
        start = time.monotonic()
        cluster = up(args.state, args.port_base, node=args.node)
        print(f"cluster ready in {time.monotonic() - start:.1f}s; export KUBECONFIG={cluster.kubeconfig}")
    elif args.command == "down":
        down(args.state)
        print("cluster stopped")
    else:
        for name, pid in status(args.state).items():
            print(f"{name:25} {'running (pid ' + str(pid) + ')' if pid else 'stopped'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
