"""Running real operator processes against the local control plane, and killing them.

Each `OperatorFleet` gets its own operator namespace (its buckets and Lease),
so tests never share state. Processes are `vigil operator` exactly as the
Deployment runs it, with the Deployment's identity: the fleet installs the
chart's own ServiceAccount, ClusterRole, Role and bindings (rendered by `helm
template` from helm/vigil, as a release named after the fleet's namespace) and
the operators authenticate with that ServiceAccount's token, so a verb missing
from the chart fails a test with a 403. Only the timings are shortened (a 3 s
Lease) so failovers fit in a test.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import REPO, KubeCluster
from tests.waiting import wait_for

LEASE_NAME = "vigil-leader"
CHART = REPO / "helm" / "vigil"
#: The chart's templates that make the operator's identity and permissions.
IDENTITY_TEMPLATES = ("templates/serviceaccount.yaml", "templates/rbac.yaml")


class ChartIdentity:
    """The chart's ServiceAccount and RBAC for one release, applied, and a kubeconfig with its token."""

    def __init__(self, cluster: KubeCluster, *, release: str, namespace: str, workdir: Path) -> None:
        self.cluster = cluster
        shows = [arg for template in IDENTITY_TEMPLATES for arg in ("--show-only", template)]
        rendered = cluster.helm("template", release, str(CHART), "--namespace", namespace, *shows).stdout
        self.objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
        self.service_account = next(o["metadata"]["name"] for o in self.objects if o["kind"] == "ServiceAccount")
        cluster.kubectl("apply", "-f", "-", input=rendered)
        self.kubeconfig = cluster.token_kubeconfig(namespace, self.service_account, workdir / "operator.kubeconfig")

    def remove(self) -> None:
        """Delete the cluster-scoped objects; the namespaced ones go with the fleet's namespace."""
        for obj in self.objects:
            if "namespace" not in obj["metadata"]:
                self.cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")


@dataclasses.dataclass
class OperatorProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        self.proc.wait(timeout=30)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def merged(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`config` with each section's keys updated from `overrides` (a copy; sections are mappings)."""
    out = {section: dict(values) if isinstance(values, dict) else values for section, values in config.items()}
    for section, values in overrides.items():
        out.setdefault(section, {}).update(values)
    return out


class OperatorFleet:
    def __init__(self, cluster: KubeCluster, workdir: Path, **overrides: Any) -> None:
        self.cluster = cluster
        self.namespace = f"vigil-{uuid.uuid4().hex[:8]}"
        self.workdir = workdir
        self.processes: list[OperatorProcess] = []
        self._count = 0
        cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
        self.identity = ChartIdentity(cluster, release=self.namespace, namespace=self.namespace, workdir=workdir)
        config: dict[str, Any] = {
            "namespace": self.namespace,
            "leaderElection": {"leaseDurationSeconds": 3, "renewPeriodSeconds": 1},
            "trigger": {"tickMilliseconds": 100, "rescanSeconds": 5},
            "http": {"metricsPort": 0, "apiPort": 0, "healthPort": 0},
            "history": {"dsn": f"sqlite:///{workdir}/history.db"},
        }
        self.settings = merged(config, overrides)
        self.config = workdir / "operator.yaml"
        self.config.write_text(yaml.safe_dump(self.settings))

    def start(self, command: str = "operator", *, kubeconfig: Path | None = None, **overrides: Any) -> OperatorProcess:
        """Start `vigil operator` (or `vigil watchdog`, the watchdog's own Deployment) with this fleet's
        config, or with that config plus `overrides` for this one process (say, its own metrics port),
        authenticating as the chart's ServiceAccount through `kubeconfig` (default: the fleet's)."""
        self._count += 1
        name = f"op-{self._count}" if command == "operator" else f"{command}-{self._count}"
        log = self.workdir / f"{name}.log"
        config = self.config
        if overrides:
            config = self.workdir / f"{name}.yaml"
            config.write_text(yaml.safe_dump(merged(self.settings, overrides)))
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "vigil", command, "--config", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.cluster.env, "KUBECONFIG": str(kubeconfig or self.identity.kubeconfig), "POD_NAME": name},
                start_new_session=True,
            )
        op = OperatorProcess(name=name, proc=proc, log=log)
        self.processes.append(op)
        return op

    def holder(self) -> str | None:
        try:
            lease = self.cluster.coordination.read_namespaced_lease(LEASE_NAME, self.namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        holder: str | None = lease.spec.holder_identity
        return holder

    def leader(self, timeout: float = 60) -> OperatorProcess:
        """The live process holding the Lease, waiting for one to take it."""

        def probe() -> OperatorProcess | None:
            holder = self.holder()
            return next((p for p in self.processes if p.name == holder and p.alive), None)

        return wait_for(probe, timeout=timeout, what="an operator to hold the Lease")

    def stop(self) -> None:
        for op in self.processes:
            op.kill()
        self.identity.remove()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log.read_text(errors='replace')[-4000:]}" for p in self.processes)

    def finish(self, request: Any) -> None:
        """A fixture's teardown: stop every process, print their logs when the test failed
        (`request.node.rep_call`, set by the integration conftest), and clear the namespace."""
        self.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(self.logs())
        self.cluster.clear_namespace(self.namespace)
