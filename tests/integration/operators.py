"""Running real operator processes against the local control plane, and killing them.

Each `OperatorFleet` gets its own operator namespace (its buckets and Lease),
so tests never share state. Processes are `vigil operator` exactly as the
Deployment runs it; only the timings are shortened (a 3 s Lease) so failovers
fit in a test.
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

from tests.integration.conftest import KubeCluster
from tests.waiting import wait_for

LEASE_NAME = "vigil-leader"


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


class OperatorFleet:
    def __init__(self, cluster: KubeCluster, workdir: Path, **overrides: Any) -> None:
        self.cluster = cluster
        self.namespace = f"vigil-{uuid.uuid4().hex[:8]}"
        self.workdir = workdir
        self.processes: list[OperatorProcess] = []
        self._count = 0
        cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
        config: dict[str, Any] = {
            "namespace": self.namespace,
            "leaderElection": {"leaseDurationSeconds": 3, "renewPeriodSeconds": 1},
            "trigger": {"tickMilliseconds": 100, "rescanSeconds": 5},
            "http": {"metricsPort": 0, "apiPort": 0},
            "history": {"dsn": f"sqlite:///{workdir}/history.db"},
        }
        for section, values in overrides.items():
            config.setdefault(section, {}).update(values)
        self.config = workdir / "operator.yaml"
        self.config.write_text(yaml.safe_dump(config))

    def start(self, command: str = "operator") -> OperatorProcess:
        """Start `vigil operator` (or `vigil watchdog`, the watchdog's own Deployment) with this fleet's config."""
        self._count += 1
        name = f"op-{self._count}" if command == "operator" else f"{command}-{self._count}"
        log = self.workdir / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "vigil.cli.main", command, "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.cluster.env, "POD_NAME": name},
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

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log.read_text(errors='replace')[-4000:]}" for p in self.processes)
