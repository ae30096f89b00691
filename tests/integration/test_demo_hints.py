"""The demo's printed approve command works as printed, against a real API server.

`scripts/demo.sh` prints the command that approves the video-publish workflow
as an editor. Here that exact command line (read from the script, split as a
shell splits it) runs as a kubectl plugin on a cluster holding what the demo
applies: `scripts/demo-editor.yaml` (group `editors` may approve) and a
workflow whose approval step is the example's own (`group:editors`). One pass
of the operator's workflow engine, between the append and the answer, records
it: exit 0, "approved …". The same command without its identity — the hint the
demo used to print — is refused by the operator (`NotAnApprover`), which is the
failure this guards against.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import KubeCluster
from tests.integration.test_cli_workflows import (
    WallClock,
    answered_after_one_pass,
    create_workflow,
    get_workflow,
)
from vigil.cli.errors import EXIT_API_FAILURE
from vigil.kube.controllers.workflowapi import WorkflowApi
from vigil.kube.controllers.workflows import WorkflowEngine

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scripts" / "demo.sh"
HINT = re.compile(r'^approve_hint="(kubectl vigil .*)"$', re.M)


def printed_hint() -> list[str]:
    """The approve command the demo prints, as words after `kubectl vigil`."""
    found = HINT.search(DEMO.read_text())
    assert found is not None, "scripts/demo.sh no longer sets approve_hint"
    words = shlex.split(found.group(1))
    assert words[:2] == ["kubectl", "vigil"]
    return words[2:]


def example_approval_step() -> dict[str, Any]:
    """The video-publish example's approval step, with nothing before it to wait for."""
    example = yaml.safe_load((REPO / "manifests" / "examples" / "video-publish.yaml").read_text())
    step = next(s for s in example["spec"]["steps"] if s["type"] == "approval")
    return {key: value for key, value in step.items() if key != "dependsOn"}


@pytest.fixture
def engine(cluster: KubeCluster) -> WorkflowEngine:
    return WorkflowEngine(WorkflowApi(cluster.api), clock=WallClock(), events=None)


@pytest.fixture
def waiting(cluster: KubeCluster, namespace: str, engine: WorkflowEngine) -> str:
    """video-publish in `namespace`, its approval step waiting, the demo's editor RBAC applied."""
    cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "scripts" / "demo-editor.yaml"))
    step = example_approval_step()
    create_workflow(cluster, namespace, "video-publish", [step])
    engine.reconcile(namespace, "video-publish")
    phase = get_workflow(cluster, namespace, "video-publish")["status"]["steps"][step["id"]]["phase"]
    assert phase == "Running"
    return str(step["id"])


def test_the_printed_approve_command_approves_as_an_editor(
    cluster: KubeCluster, namespace: str, engine: WorkflowEngine, waiting: str
) -> None:
    hint = printed_hint()
    assert hint[hint.index("approve") + 1 : hint.index("approve") + 3] == ["video-publish", waiting]

    approved = answered_after_one_pass(cluster, engine, namespace, "video-publish", *hint)

    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines()[0] == f"approved step {waiting} of workflow/video-publish (recorded as Approved)"
    decided = get_workflow(cluster, namespace, "video-publish")["status"]["steps"][waiting]
    assert decided["phase"] == "Succeeded", decided


def test_the_old_hint_without_an_editor_identity_is_refused(
    cluster: KubeCluster, namespace: str, engine: WorkflowEngine, waiting: str
) -> None:
    hint = printed_hint()
    verb = hint.index("approve")
    refused = answered_after_one_pass(cluster, engine, namespace, "video-publish", *hint[verb:])

    assert refused.returncode == EXIT_API_FAILURE, refused.stdout
    assert "NotAnApprover" in refused.stderr
