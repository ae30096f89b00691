"""`kubectl vigil` as a real kubectl plugin, against the local control plane.

kubectl finds the installed `kubectl-vigil` console script on PATH and hands it
the arguments; the plugin reads the cluster from KUBECONFIG. Covered: the
trigger ledger printed by `occurrences` from a status written here (no operator
involved), `next` computed from a job fetched from the cluster, and a job that
does not exist.
"""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import GROUP, PLURAL, VERSION, create_job
from vigil.cli.main import EXIT_BAD_INPUT

SCRIPTS = Path(sysconfig.get_path("scripts"))  # where the venv installed `kubectl-vigil`
NEVER_SOON = "0 0 1 1 *"  # yearly: nothing fires while the test runs, whatever operators are about
LEDGER = [
    {
        "nominal": "2026-04-01T02:00:00Z",
        "fireAt": "2026-04-01T02:00:04Z",
        "outcome": "Fired",
        "executionId": "ex-0a1b2c3d4e5f",
        "at": "2026-04-01T02:00:04Z",
    },
    {
        "nominal": "2026-04-02T02:00:00Z",
        "outcome": "Missed",
        "at": "2026-04-02T09:30:00Z",
        "reason": "older than catchUpWindow 6h",
    },
    {
        "nominal": "2026-04-03T02:00:00Z",
        "outcome": "Superseded",
        "at": "2026-04-02T10:00:00Z",
        "reason": "schedule changed",
    },
]


def kubectl_plugin(cluster: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl vigil ARGS` with the plugin found on PATH, as a user would run it."""
    plugin = SCRIPTS / "kubectl-vigil"
    assert plugin.exists(), f"{plugin} is not installed (pip install -e .)"
    env = {**cluster.env, "PATH": f"{SCRIPTS}:{cluster.env['PATH']}"}
    return subprocess.run(
        [str(cluster.bin / "kubectl"), "vigil", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def write_ledger(cluster: KubeCluster, namespace: str, name: str, ledger: list[dict[str, Any]]) -> None:
    cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": {"occurrences": ledger}}
    )


def rows(stdout: str, *, header: str) -> list[list[str]]:
    lines = stdout.splitlines()
    assert lines and lines[0].split() == header.split(), stdout
    return [line.split(maxsplit=4) for line in lines[1:]]


@pytest.fixture
def job(cluster: KubeCluster, namespace: str) -> str:
    name = "nightly"
    create_job(cluster, namespace, name, cron=NEVER_SOON, timezone="UTC")
    return name


def test_occurrences_prints_the_ledger_one_row_per_occurrence(
    cluster: KubeCluster, namespace: str, job: str
) -> None:
    write_ledger(cluster, namespace, job, LEDGER)

    proc = kubectl_plugin(cluster, "occurrences", job, "-n", namespace)

    assert proc.returncode == 0, proc.stderr
    assert rows(proc.stdout, header="NOMINAL OUTCOME EXECUTION AT REASON") == [
        ["2026-04-01T02:00:00Z", "Fired", "ex-0a1b2c3d4e5f", "2026-04-01T02:00:04Z"],
        ["2026-04-02T02:00:00Z", "Missed", "-", "2026-04-02T09:30:00Z", "older than catchUpWindow 6h"],
        ["2026-04-03T02:00:00Z", "Superseded", "-", "2026-04-02T10:00:00Z", "schedule changed"],
    ]


def test_occurrences_of_a_job_with_an_empty_ledger_prints_only_the_header(
    cluster: KubeCluster, namespace: str, job: str
) -> None:
    proc = kubectl_plugin(cluster, "occurrences", job, "-n", namespace)

    assert proc.returncode == 0, proc.stderr
    assert rows(proc.stdout, header="NOMINAL OUTCOME EXECUTION AT REASON") == []


def test_next_reads_the_job_from_the_cluster(cluster: KubeCluster, namespace: str, job: str) -> None:
    proc = kubectl_plugin(cluster, "next", job, "-n", namespace, "--from", "2026-06-01T00:00:00Z", "--count", "2")

    assert proc.returncode == 0, proc.stderr
    nominal = [row[0] for row in rows(proc.stdout, header="NOMINAL (UTC) FIRE AT (UTC) LOCAL (UTC) PERIOD START (UTC)")]
    assert nominal == ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"]


def test_a_job_that_does_not_exist_exits_2_naming_it(cluster: KubeCluster, namespace: str) -> None:
    proc = kubectl_plugin(cluster, "occurrences", "no-such-job", "-n", namespace)

    assert proc.returncode == EXIT_BAD_INPUT
    assert "no-such-job" in proc.stderr
    assert namespace in proc.stderr
    assert "Traceback" not in proc.stderr


def test_kubectl_completes_the_plugins_verbs_through_kubectl_complete_vigil(cluster: KubeCluster) -> None:
    """kubectl (1.26+) completes `kubectl vigil <TAB>` by running `kubectl_complete-vigil`, found on
    PATH beside the plugin: asked as a shell asks it (`kubectl __complete ...`)."""
    env = {**cluster.env, "PATH": f"{SCRIPTS}:{cluster.env['PATH']}"}

    def offered(*words: str) -> list[str]:
        ran = subprocess.run([str(cluster.bin / "kubectl"), "__complete", "vigil", *words],
                             env=env, capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        return [line.split("\t")[0] for line in ran.stdout.splitlines() if line and not line.startswith(":")]

    assert offered("queue", "st") == ["stats"]
    assert offered("su") == ["suspend"]
    assert {"json", "yaml", "table"} == set(offered("run", "nightly", "-o", ""))

