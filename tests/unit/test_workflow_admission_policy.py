"""The workflow-requests admission policy: one copy, in step with the model, rendered by the chart.

Covers, without a cluster, helm/vigil/files/admission/workflow-requests.yaml (the only copy of the
ValidatingAdmissionPolicy and its binding): what it matches, that its messages are the model's
constants, that every request action the model knows is checked against an RBAC verb (approve and
reject against `approve`, retry, complete and cancel against their own, complete of an approval
step against `approve` too), that the request fields it reads exist in the Workflow CRD; and that the chart renders it under the release's name behind
`admission.workflowRequests.enabled`, strict in its values schema, and that manifests/install.yaml
carries it. Its behaviour against a real API server is tests/integration/test_workflow_admission.py.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_packaging import CHART, INSTALL_MANIFEST, NAMESPACE, RELEASE, find_helm
from vigil.model import APPROVAL_ACTIONS, WORKFLOW
from vigil.model.crdgen import crd_for
from vigil.model.workflow import (
    MESSAGE_ACTION_VERBS,
    MESSAGE_APPROVE_VERB,
    MESSAGE_BY_IS_WRITER,
    MESSAGE_COMPLETE_APPROVAL_VERB,
    MESSAGE_GROUPS_OF_WRITER,
    RequestAction,
)

POLICY_FILE = CHART / "files" / "admission" / "workflow-requests.yaml"
POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"


def policy_and_binding() -> tuple[dict[str, Any], dict[str, Any]]:
    document = yaml.safe_load(POLICY_FILE.read_text(encoding="utf-8"))
    assert document["kind"] == "List"
    policy, binding = document["items"]
    return policy, binding


def expressions(policy: dict[str, Any]) -> list[str]:
    spec = policy["spec"]
    return [variable["expression"] for variable in spec["variables"]] + [
        text
        for validation in spec["validations"]
        for text in (validation["expression"], validation["messageExpression"])
    ]


# --------------------------------------------------------------------------------------------
# The file


def test_the_policy_matches_workflow_writes_but_not_their_status() -> None:
    policy, binding = policy_and_binding()
    assert (policy["apiVersion"], policy["kind"]) == ("admissionregistration.k8s.io/v1", POLICY_KIND)
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule == {
        "apiGroups": ["vigil.dev"],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["workflows"],
    }
    assert (binding["apiVersion"], binding["kind"]) == ("admissionregistration.k8s.io/v1", BINDING_KIND)
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


#: Each validation, in order: the model's words, where the message points, the verb it checks.
REFUSALS = [
    (MESSAGE_BY_IS_WRITER, "].by: ", None),
    (MESSAGE_GROUPS_OF_WRITER, "].byGroups: every entry ", None),
    (MESSAGE_APPROVE_VERB, "]: ", "approve"),
    (MESSAGE_COMPLETE_APPROVAL_VERB, "]: ", "approve"),
    (MESSAGE_ACTION_VERBS["complete"], "]: ", "complete"),
    (MESSAGE_ACTION_VERBS["retry"], "]: ", "retry"),
    (MESSAGE_ACTION_VERBS["cancel"], "]: ", "cancel"),
]


def test_each_refusal_says_the_models_words_and_names_the_field() -> None:
    policy, _ = policy_and_binding()
    validations = policy["spec"]["validations"]
    assert [validation["reason"] for validation in validations] == ["Forbidden"] * len(REFUSALS)
    for validation, (words, field, verb) in zip(validations, REFUSALS, strict=True):
        assert words in validation["message"] and validation["message"].startswith("spec.requests: ")
        assert validation["messageExpression"].startswith('"spec.requests[" + ')
        message = " ".join(validation["messageExpression"].split())
        assert f'"{field}{words}' in message, message
        checked = re.findall(r"check\('(\w+)'\)", validation["expression"])
        assert checked == ([verb] if verb else []), validation["expression"]


def variable(policy: dict[str, Any], name: str) -> str:
    return str(next(v for v in policy["spec"]["variables"] if v["name"] == name)["expression"])


def test_every_action_of_the_model_is_checked_against_a_verb() -> None:
    policy, _ = policy_and_binding()
    decisions = variable(policy, "decisions")
    assert set(re.findall(r"r\.action == '(\w+)'", decisions)) == {action.value for action in APPROVAL_ACTIONS}
    steering = {
        re.findall(r"r\.action == '(\w+)'", variable(policy, name))[0]
        for name in ("retries", "completions", "cancels")
    }
    assert steering | set(APPROVAL_ACTIONS) == set(RequestAction)
    authorizer = variable(policy, "workflowAuthorizer")
    assert "resource('workflows')" in authorizer and ".name(request.name)" in authorizer


def test_a_completion_decides_an_approval_step_when_its_type_is_approval_or_unknown() -> None:
    """Both places a step's type can be: the inline steps, and the definition pinned in status."""
    policy, _ = policy_and_binding()
    steps = variable(policy, "approvalSteps")
    assert "object.spec.steps.filter(s, s.type == 'approval')" in steps
    assert "variables.pinned.filter(s, s.type == 'approval')" in steps
    assert "object.status.definition.steps" in variable(policy, "pinned")
    assert "!variables.typesKnown" in variable(policy, "approvalCompletions")


def test_every_request_field_the_policy_reads_is_in_the_crd() -> None:
    policy, _ = policy_and_binding()
    spec = crd_for(WORKFLOW)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    item_fields = set(spec["properties"]["requests"]["items"]["properties"])
    read = {field for text in expressions(policy) for field in re.findall(r"\br\.(\w+)", text)}
    assert read and read <= item_fields, read - item_fields
    assert all("spec.requests" in text for text in expressions(policy)[:2])


# --------------------------------------------------------------------------------------------
# The chart


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    binary = find_helm()
    if binary is None or not os.access(binary, os.X_OK):
        pytest.fail(f"no helm binary (found {binary}): build it with `make binaries` or set HELM")
    home = tmp_path_factory.mktemp("helm-home")
    environment = {**os.environ} | {
        variable: str(home / variable.lower())
        for variable in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")
    }
    return binary, environment


def render(helm: tuple[Path, dict[str, str]], *args: str, release: str = RELEASE) -> subprocess.CompletedProcess[str]:
    binary, environment = helm
    return subprocess.run(
        [str(binary), "template", release, str(CHART), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )


def admission_objects(text: str) -> dict[str, dict[str, Any]]:
    return {
        item["kind"]: item
        for item in yaml.safe_load_all(text)
        if item and item["kind"] in (POLICY_KIND, BINDING_KIND)
        and item["metadata"]["name"].endswith("workflow-requests")
    }


@pytest.mark.parametrize(
    ("release", "name"),
    [
        pytest.param(RELEASE, "vigil-workflow-requests", id="default-release"),
        pytest.param("batch", "batch-vigil-workflow-requests", id="other-release"),
    ],
)
def test_the_chart_renders_the_file_under_the_releases_name(
    helm: tuple[Path, dict[str, str]], release: str, name: str
) -> None:
    result = render(helm, release=release)
    assert result.returncode == 0, result.stderr
    rendered = admission_objects(result.stdout)
    policy, binding = policy_and_binding()
    assert rendered[POLICY_KIND]["metadata"]["name"] == name
    assert rendered[POLICY_KIND]["spec"] == policy["spec"]
    assert rendered[BINDING_KIND]["metadata"]["name"] == name
    assert rendered[BINDING_KIND]["spec"] == {**binding["spec"], "policyName": name}
    labels = rendered[POLICY_KIND]["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == release
    assert labels["app.kubernetes.io/component"] == "admission"


def test_the_policy_can_be_turned_off(helm: tuple[Path, dict[str, str]]) -> None:
    result = render(helm, "--set", "admission.workflowRequests.enabled=false")
    assert result.returncode == 0, result.stderr
    assert admission_objects(result.stdout) == {}


def test_a_misspelt_admission_value_fails_on_the_schema(helm: tuple[Path, dict[str, str]]) -> None:
    result = render(helm, "--set", "admission.workflowRequests.enable=false")
    assert result.returncode != 0
    assert "enable" in result.stderr


def test_the_plain_install_carries_the_policy() -> None:
    installed = admission_objects(INSTALL_MANIFEST.read_text(encoding="utf-8"))
    policy, _ = policy_and_binding()
    assert installed[POLICY_KIND]["spec"] == policy["spec"]
    assert installed[BINDING_KIND]["spec"]["policyName"] == installed[POLICY_KIND]["metadata"]["name"]
