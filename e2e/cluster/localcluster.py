"""Start and stop a real Kubernetes control plane on loopback, for tests and the demo.

No machine here has a container engine, so `kind` cannot run; instead the real
binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) are built
from source by `build.sh` beside this file and started here as local processes,
together with the local node agent (`e2e/nodeagent.py`) that plays the kubelet.
Admission, CRD schemas, status subresources, resourceVersion conflicts, Leases,
watches, RBAC and garbage collection are all the real thing.

    python -m e2e.cluster.localcluster up   [--state DIR] [--port-base N]
    python -m e2e.cluster.localcluster down [--state DIR]
    python -m e2e.cluster.localcluster status [--state DIR]

`up` is idempotent: a cluster already running in the state directory is reused.
`down` stops every process it started (SIGTERM, then SIGKILL) and checks none is
left. Everything lives in the state directory: `kubeconfig`, `logs/`, `pki/`,
`etcd/`, `pids/`.
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
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_STATE = REPO / ".cluster" / "default"
DEFAULT_PORT_BASE = 16000
NODE_NAME = "vigil-node"
SERVICE_CIDR = "10.96.0.0/16"
_CHILDREN: list[subprocess.Popen[bytes]] = []
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


def bin_dir() -> Path:
    """Build (if needed) and return the directory holding the control plane binaries."""
    out = subprocess.run(
        [str(REPO / "e2e" / "cluster" / "build.sh")],
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


def _write_kubeconfig(cluster: Cluster) -> None:
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
                    "client-certificate": str(pki / "admin.crt"),
                    "client-key": str(pki / "admin.key"),
                },
            }
        ],
        "contexts": [
            {"name": "vigil-local", "context": {"cluster": "vigil-local", "user": "vigil-admin"}}
        ],
        "current-context": "vigil-local",
    }
    cluster.kubeconfig.write_text(json.dumps(config, indent=2))


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


def _start_apiserver(cluster: Cluster, bins: Path, *, audit: bool) -> None:
    pki = cluster.pki
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
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",  # it refuses loopback, and nothing here routes to it
            "--profiling=false",
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
            f"--kubeconfig={cluster.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            "--v=1",
        ],
    )


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


PROCESSES = ("node-agent", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")


def up(state: Path = DEFAULT_STATE, port_base: int = DEFAULT_PORT_BASE, *, audit: bool = False) -> Cluster:
    """Start every component not already running and wait until a pod could run.

    `audit=True` has the API server write an audit log (`Cluster.audit_log`, AUDIT_POLICY) when it
    starts here; an API server already running keeps the flags it was started with.
    """
    cluster = Cluster(state=state.resolve(), port_base=port_base)
    fresh = not any(_running(cluster, name) for name in PROCESSES)
    if fresh and (cluster.state / "etcd").exists():
        shutil.rmtree(cluster.state / "etcd")  # a stopped cluster restarts empty
        shutil.rmtree(cluster.state / "node", ignore_errors=True)
    bins = bin_dir()
    cluster.state.mkdir(parents=True, exist_ok=True)
    (cluster.state / "bin").unlink(missing_ok=True)
    (cluster.state / "bin").symlink_to(bins)
    (cluster.state / "port-base").write_text(str(port_base))
    _make_pki(cluster.pki)
    _write_kubeconfig(cluster)
    _start_etcd(cluster, bins)
    _start_apiserver(cluster, bins, audit=audit)
    _wait("the API server to be ready", lambda: _api_ready(cluster), cluster)
    _start_controllers(cluster, bins)
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


def down(state: Path = DEFAULT_STATE) -> None:
    """Stop every process of the cluster in dependency order; leave none behind."""
    cluster = Cluster(state=state.resolve(), port_base=_port_base(state))
    # Anything else started beside the cluster (an operator, say) goes first.
    extra = sorted(p.stem for p in cluster.pids.glob("*.pid") if p.stem not in PROCESSES) if cluster.pids.exists() else []
    for name in (*extra, *PROCESSES):
        pid = _running(cluster, name)
        if pid:
            _stop_pid(pid, grace_s=10)
        (cluster.pids / f"{name}.pid").unlink(missing_ok=True)
    for proc in _CHILDREN:  # reap what this process started, so no zombie or warning is left
        if proc.poll() is None and not _pid_alive(proc.pid):
            proc.wait(timeout=5)
    left = [name for name in (*extra, *PROCESSES) if _running(cluster, name)]
    if left:
        raise RuntimeError(f"processes still running after stop: {left}")


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
    args = parser.parse_args(argv)
    if args.command == "up":
        start = time.monotonic()
        cluster = up(args.state, args.port_base)
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
