"""What every benchmark section stands on: a fresh local control plane, operators, watches.

* `fresh_cluster(name)` — a local control plane of its own for one section (`.cluster/bench/<name>`,
  port base 36000, one at a time), with Vigil's CRDs and an API server audit log
  (bench/audit.py), stopped when the section ends. The Vigil operator is cluster-wide, so an
  earlier section's thousands of objects, still being deleted, would otherwise be what it spends
  the measured minute on.
* `Bench.start_operator` — `vigil operator` as a local process, with the Deployment's identity:
  the chart's own ServiceAccount and RBAC (rendered by `helm template`) and a token of that
  ServiceAccount, so its API requests carry a user of their own in the audit log
  (`Bench.operator_user`) and a verb missing from the chart shows as a 403 in its log.
* `Arrivals` — receive times of objects on a watch in this process: when each was first seen,
  and optionally when each first satisfied a condition (a pod Succeeded).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch

from bench.audit import AuditLog
from e2e.cluster import localcluster

REPO = Path(__file__).resolve().parents[1]
STATE = REPO / ".cluster" / "bench"
PORT_BASE = int(os.environ.get("VIGIL_BENCH_PORT_BASE", "36000"))  # apart from the tests (26000) and the demo (16000)
GROUP, VERSION = "vigil.dev", "v1alpha1"
LEADER_LEASE = "vigil-leader"
CHART = REPO / "helm" / "vigil"
#: The chart's templates that make the operator's identity and permissions.
IDENTITY_TEMPLATES = ("templates/serviceaccount.yaml", "templates/rbac.yaml")
TOKEN_SECONDS = 6 * 3600  # longer than any section


def stop_process(proc: subprocess.Popen[bytes], pidfile: Path | None = None) -> None:
    """SIGTERM, then SIGKILL if it has not gone in 10 s (as a Deployment's grace period would)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    if pidfile is not None:
        pidfile.unlink(missing_ok=True)  # reaped: its pid may be reused, so `down` must not signal it


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def wait_until(deadline: datetime, done: Callable[[], bool], interval: float = 0.5) -> bool:
    while datetime.now(UTC) < deadline:
        if done():
            return True
        time.sleep(interval)
    return done()


def last_error(log: Path) -> str:
    """The operator log's last ERROR line (or its last line), for a report that says why."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"no log at {log}"
    errors = [line for line in lines if " ERROR " in line or " CRITICAL " in line]
    picked = f"last ERROR: {errors[-1]}" if errors else f"no ERROR; last line: {lines[-1] if lines else '(empty)'}"
    return f"{picked[:300]} (see {log.relative_to(REPO)})"


@dataclasses.dataclass
class Bench:
    api: client.ApiClient
    kubectl: Path
    env: dict[str, str]
    state: Path
    audit_log: Path | None = None  # the API server's audit log; by default where localcluster writes it
    _identities: dict[str, tuple[str, Path]] = dataclasses.field(default_factory=dict)

    @property
    def audit(self) -> AuditLog:
        return AuditLog(self.audit_log or self.state / "logs" / "audit.jsonl")

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.core.read_namespaced_service_account("default", name)
                return name
            except client.ApiException:
                time.sleep(0.2)
        raise RuntimeError(f"namespace {name} never got its default service account")

    def create_many(self, count: int, make: Callable[[int], None]) -> None:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(make, range(count)))

    def _identity(self, namespace: str) -> tuple[str, Path]:
        """The chart's ServiceAccount and RBAC as a release in `namespace`, and a kubeconfig with its token."""
        if namespace not in self._identities:
            helm = self.kubectl.parent / "helm"
            if not helm.exists():  # not a bench cluster (say, a section run on its own): helm from PATH
                helm = Path(shutil.which("helm") or "helm")
            shows = [arg for template in IDENTITY_TEMPLATES for arg in ("--show-only", template)]
            rendered = subprocess.run(
                [str(helm), "template", namespace, str(CHART), "--namespace", namespace, *shows],
                check=True, capture_output=True, text=True, env=self.env,
            ).stdout  # fmt: skip
            subprocess.run([str(self.kubectl), "apply", "-f", "-"], input=rendered, check=True,
                           capture_output=True, text=True, env=self.env)  # fmt: skip
            objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
            account = next(o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount")
            self._identities[namespace] = (account, self._token_kubeconfig(namespace, account))
        return self._identities[namespace]

    def _token_kubeconfig(self, namespace: str, account: str) -> Path:
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
        )
        token = self.core.create_namespaced_service_account_token(account, namespace, request).status.token
        admin = yaml.safe_load(Path(self.env["KUBECONFIG"]).read_text())["clusters"][0]["cluster"]
        ca = base64.b64encode(Path(admin["certificate-authority"]).read_bytes()).decode()
        path = self.state / f"{namespace}.kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": account,
            "clusters": [{"name": "local", "cluster": {"server": admin["server"], "certificate-authority-data": ca}}],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": account, "context": {"cluster": "local", "user": account, "namespace": namespace}}],
        }))  # fmt: skip
        return path

    def operator_user(self, namespace: str) -> str:
        """The API user of the operators whose namespace (settings `namespace:`) is `namespace`."""
        return f"system:serviceaccount:{namespace}:{self._identity(namespace)[0]}"

    def start_operator(self, name: str, settings: str) -> tuple[subprocess.Popen[bytes], Path]:
        """A Vigil operator (identity `name`) on this cluster, as the chart's ServiceAccount of the
        settings' `namespace`; its pid file lets `down` stop it too."""
        cfg = self.state / f"{name}.yaml"
        cfg.write_text(settings)
        _, kubeconfig = self._identity(yaml.safe_load(settings)["namespace"])
        with (self.state / "logs" / f"{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "vigil.cli.main", "operator", "--config", str(cfg)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**self.env, "KUBECONFIG": str(kubeconfig), "POD_NAME": name},
            )  # fmt: skip
        pidfile = self.state / "pids" / f"{name}.pid"
        pidfile.write_text(str(proc.pid))
        return proc, pidfile

    def lease_holder(self, namespace: str) -> str | None:
        try:
            lease = client.CoordinationV1Api(self.api).read_namespaced_lease(LEADER_LEASE, namespace)
        except client.ApiException:
            return None
        return lease.spec.holder_identity if lease.spec else None


@contextlib.contextmanager
def fresh_cluster(name: str) -> Iterator[Bench]:
    """A local control plane of its own for one measurement: empty when it starts, stopped after."""
    state = STATE / name
    localcluster.down(state)  # one an interrupted run left behind would otherwise be reused, not fresh
    shutil.rmtree(state / "logs", ignore_errors=True)  # this run's logs only
    for db in state.glob("*.db*"):  # and this run's history
        db.unlink()
    started = time.monotonic()
    try:
        cluster = localcluster.up(state, PORT_BASE, audit=True)
        kubectl = cluster.state / "bin" / "kubectl"
        for args in (["apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds")],
                     ["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"]):  # fmt: skip
            subprocess.run([str(kubectl), "--kubeconfig", str(cluster.kubeconfig), *args], check=True, capture_output=True)
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        print(f"  [fresh cluster {state.relative_to(REPO)} ready in {time.monotonic() - started:.0f}s, {load()}]")
        yield Bench(api=api, kubectl=kubectl, env=env, state=cluster.state, audit_log=cluster.audit_log)
    finally:
        localcluster.down(state)


class Arrivals:
    """Receive times (epoch seconds) of the first ADDED event per key, from a watch in a thread;
    with `done`, also the first event per key whose object satisfies it (`finished`), and
    `on_finished(key)` called then, on the watch's thread.

    Objects are handled as plain dicts (no model deserialisation: it costs milliseconds a pod,
    which would show up as lag). A watch that ends or breaks is resumed; errors are kept for the
    report.
    """

    def __init__(
        self,
        list_fn: Callable[..., Any],
        namespace: str,
        key: Callable[[dict[str, Any]], str | None],
        done: Callable[[dict[str, Any]], bool] | None = None,
        on_finished: Callable[[str], None] | None = None,
    ) -> None:
        self.seen: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.errors: list[str] = []
        self.listed = False  # the first list is in: every later change will be seen
        self._stop = threading.Event()
        self._on_finished = on_finished
        self._args = (list_fn, namespace, key, done)
        threading.Thread(target=self._run, daemon=True).start()

    def _note(self, obj: dict[str, Any], received: float, *, added: bool) -> None:
        _, _, key, done = self._args
        k = key(obj)
        if k is not None:
            if added:
                self.seen.setdefault(k, received)
            if done is not None and k not in self.finished and done(obj):
                self.finished[k] = received
                if self._on_finished is not None:
                    self._on_finished(k)

    def _list(self) -> str:
        """List once (what exists counts as seen now); the resourceVersion to watch from."""
        list_fn, namespace, _, _ = self._args
        listed = json.loads(list_fn(namespace, _preload_content=False).data)
        received = time.time()
        for obj in listed.get("items") or []:
            self._note(obj, received, added=True)
        self.listed = True
        return str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        list_fn, namespace, _, _ = self._args
        resource_version: str | None = None
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                if resource_version is None:
                    resource_version = self._list()
                kwargs = {"timeout_seconds": 60, "deserialize": False, "resource_version": resource_version}
                for event in w.stream(list_fn, namespace, **kwargs):
                    received = time.time()
                    obj = event.get("object") or {}
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._note(obj, received, added=event.get("type") == "ADDED")
                    if self._stop.is_set():
                        w.stop()
                        return
            except Exception as err:  # resumed below; a 410 starts again from a fresh list
                self.errors.append(f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")
                if isinstance(err, client.ApiException) and err.status == 410:
                    resource_version = None
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()

    def offsets(self, base: datetime) -> list[float]:
        return [t - base.timestamp() for t in self.seen.values()]

    def finished_offsets(self, base: datetime) -> list[float]:
        return [t - base.timestamp() for t in self.finished.values()]
