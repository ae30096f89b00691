"""The Workflow request model, the definition-version rule and the workflow template, without a cluster.

Covers ``spec.requests`` (good requests parse; one named row per bad one, each naming its
field), the Python twins of the admission checks (``added_requests``, ``check_requests_unchanged``,
``check_requests_kept``, ``check_definition_update``), the split of the Workflow spec into the workflow template a
ScheduledJob holds plus the requests (with its ttlAfterFinished, a duration), and what the generated CRDs
say about all three.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from vigil.model import (
    REQUESTS_MAX_ITEMS,
    SCHEDULED_JOB,
    WORKFLOW,
    WORKFLOW_DEFINITION,
    RequestAction,
    ScheduledJobSpec,
    WorkflowDefinitionSpec,
    WorkflowRequest,
    WorkflowSpec,
    WorkflowTemplate,
    added_requests,
    check_definition_update,
    check_requests_unchanged,
    describe_validation_error,
)
from vigil.model.crdgen import crd_for
from vigil.model.workflow import (
    MESSAGE_REQUESTS_APPEND_ONLY,
    MESSAGE_REQUESTS_TEXT,
    check_requests_kept,
)

Spec = dict[str, Any]

POD_TEMPLATE: Spec = {"spec": {"containers": [{"name": "main", "image": "example/encode:1"}]}}
STEPS: list[Spec] = [
    {"id": "render", "type": "pod", "template": POD_TEMPLATE},
    {"id": "approve", "type": "approval", "dependsOn": ["render"], "approval": {"approvers": ["group:editors"]}},
]
APPROVAL: Spec = {
    "id": "approve-1",
    "action": "approve",
    "step": "approve",
    "by": "alice",
    "byGroups": ["editors"],
    "reason": "render checked",
    "at": "2026-08-01T10:00:00Z",
}
WORKFLOW_SPEC: Spec = {"steps": STEPS, "requests": [APPROVAL]}


def errors_of(model: type[BaseModel], spec: Spec) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(spec)
    return "\n".join(describe_validation_error(caught.value))


def with_request(**changes: Any) -> Spec:
    """WORKFLOW_SPEC whose one request has ``changes`` (None removes a field)."""
    item = {**APPROVAL, **changes}
    return {**WORKFLOW_SPEC, "requests": [{k: v for k, v in item.items() if v is not None}]}


def requests(*items: Spec) -> list[WorkflowRequest]:
    return [WorkflowRequest.model_validate(item) for item in items]


# --------------------------------------------------------------------------------------------
# Good requests


def test_a_workflow_with_requests_parses_and_writes_back_what_was_written() -> None:
    spec = WorkflowSpec.model_validate(WORKFLOW_SPEC)
    (approval,) = spec.requests
    assert approval.action is RequestAction.APPROVE
    assert approval.by_groups == ["editors"]
    assert approval.at is not None and approval.at.utcoffset() is not None
    assert spec.model_dump(mode="json", exclude_defaults=True)["requests"] == [
        {**APPROVAL, "at": "2026-08-01T10:00:00Z"}
    ]


def test_requests_default_to_an_empty_list() -> None:
    assert WorkflowSpec.model_validate({"steps": STEPS}).requests == []


@pytest.mark.parametrize(
    "item",
    [
        pytest.param({"id": "cancel-1", "action": "cancel", "by": "bob"}, id="cancel-without-step"),
        pytest.param({"id": "cancel-2", "action": "cancel", "step": "render", "by": "bob"}, id="cancel-of-a-step"),
        pytest.param({"id": "retry-1", "action": "retry", "step": "render", "by": "bob"}, id="retry"),
        pytest.param({"id": "reject-1", "action": "reject", "step": "approve", "by": "system:serviceaccount:ci:bot"}, id="reject-by-service-account"),
        pytest.param({"id": "complete-1", "action": "complete", "step": "render", "by": "bob", "output": '{"renditions": [480, 720]}'}, id="complete-object"),
        pytest.param({"id": "complete-2", "action": "complete", "step": "render", "by": "bob", "output": '"done"'}, id="complete-string"),
        pytest.param({"id": "complete-3", "action": "complete", "step": "render", "by": "bob"}, id="complete-without-output"),
    ],
)
def test_good_requests_parse(item: Spec) -> None:
    (request,) = requests(item)
    assert request.model_dump(exclude_defaults=True) == item


# --------------------------------------------------------------------------------------------
# Bad requests, one row each

Edit = Callable[[Spec], Spec]

BAD_REQUESTS: list[Any] = [
    pytest.param(with_request(step=None), "spec.requests[0]: request 'approve-1': step is required unless action is cancel", id="approve-without-step"),
    pytest.param(with_request(action="retry", output="{}"), "spec.requests[0]: request 'approve-1': output is allowed only with action complete", id="output-on-retry"),
    pytest.param(with_request(action="complete", output="{'a': 1}"), "spec.requests[0].output: not valid JSON: Expecting property name enclosed in double quotes", id="output-not-json"),
    pytest.param(with_request(action="complete", output="NaN"), "spec.requests[0].output: not valid JSON: NaN is not JSON", id="output-nan"),
    pytest.param(with_request(action="complete", output='"' + "x" * 4095 + '"'), "spec.requests[0].output: String should have at most 4096 characters", id="output-too-long"),
    pytest.param(with_request(action="resume"), "spec.requests[0].action: Input should be 'approve', 'reject', 'retry', 'complete' or 'cancel'", id="unknown-action"),
    pytest.param(with_request(id="Approve_1"), "spec.requests[0].id: String should match pattern", id="id-not-a-dns-label"),
    pytest.param(with_request(id="a" * 64), "spec.requests[0].id: String should have at most 63 characters", id="id-too-long"),
    pytest.param(with_request(by=None), "spec.requests[0].by: Field required", id="by-missing"),
    pytest.param(with_request(by=""), "spec.requests[0].by: String should have at least 1 character", id="by-empty"),
    pytest.param(with_request(by="u" * 254), "spec.requests[0].by: String should have at most 253 characters", id="by-too-long"),
    pytest.param(with_request(byGroups=[f"g{n}" for n in range(51)]), "spec.requests[0].byGroups: List should have at most 50 items", id="too-many-groups"),
    pytest.param(with_request(reason="r" * 1025), "spec.requests[0].reason: String should have at most 1024 characters", id="reason-too-long"),
    pytest.param(with_request(at="2026-08-01 10:00"), "spec.requests[0].at: expected an RFC 3339 date-time", id="at-not-rfc3339"),
    pytest.param(with_request(step="Approve"), "spec.requests[0].step: String should match pattern", id="step-not-a-step-id"),
    pytest.param(with_request(approvedBy="alice"), "spec.requests[0].approvedBy: Extra inputs are not permitted", id="unknown-field"),
    pytest.param({**WORKFLOW_SPEC, "requests": [APPROVAL, APPROVAL]}, "spec.requests: duplicate request id 'approve-1'", id="duplicate-id"),
    pytest.param(
        {**WORKFLOW_SPEC, "requests": [{**APPROVAL, "id": f"r{n}"} for n in range(REQUESTS_MAX_ITEMS + 1)]},
        f"spec.requests: List should have at most {REQUESTS_MAX_ITEMS} items",
        id="too-many-requests",
    ),
]


@pytest.mark.parametrize(("spec", "expected"), BAD_REQUESTS)
def test_a_bad_request_is_rejected_naming_its_field(spec: Spec, expected: str) -> None:
    assert expected in errors_of(WorkflowSpec, spec)


# --------------------------------------------------------------------------------------------
# Twins of the admission checks


def test_added_requests_are_all_on_create_and_only_new_ids_on_update() -> None:
    approval, cancel = requests(APPROVAL, {"id": "cancel-1", "action": "cancel", "by": "bob"})
    assert added_requests(None, [approval, cancel]) == [approval, cancel]
    assert added_requests([approval], [approval, cancel]) == [cancel]
    assert added_requests([approval, cancel], [cancel]) == []
    readded = approval.model_copy(update={"by": "bob"})
    assert added_requests([cancel], [cancel, readded]) == [readded], "removed and written again: new"


def test_requests_may_be_appended_but_neither_changed_nor_removed() -> None:
    approval, cancel = requests(APPROVAL, {"id": "cancel-1", "action": "cancel", "by": "bob"})
    check_requests_unchanged([approval], [approval, cancel])
    check_requests_kept([approval], [approval, cancel])
    changed = approval.model_copy(update={"reason": "second thoughts"})
    with pytest.raises(ValueError, match=r"^request approve-1 cannot be changed once written; append a new request \(with a new id\) instead$"):
        check_requests_unchanged([approval, cancel], [changed, cancel])
    for erased, missing in (([cancel], "approve-1"), ([], "approve-1, cancel-1")):
        with pytest.raises(ValueError, match=rf"^requests cannot be removed: .* \(missing: {missing}\)$"):
            check_requests_kept([approval, cancel], erased)


def definition(*versions: tuple[int, list[str]]) -> WorkflowDefinitionSpec:
    return WorkflowDefinitionSpec.model_validate(
        {
            "versions": [
                {"version": number, "steps": [{"id": step, "type": "pod", "template": POD_TEMPLATE} for step in steps]}
                for number, steps in versions
            ]
        }
    )


@pytest.mark.parametrize(
    ("after", "missing"),
    [
        pytest.param(definition((1, ["probe"])), "encode", id="removed"),
        pytest.param(definition((1, ["probe", "encode-480"])), "encode", id="renamed"),
        pytest.param(definition((1, ["notify"]), (2, ["probe"])), "probe, encode", id="both-removed"),
    ],
)
def test_a_definition_version_cannot_lose_a_step(after: WorkflowDefinitionSpec, missing: str) -> None:
    before = definition((1, ["probe", "encode"]))
    with pytest.raises(ValueError) as caught:
        check_definition_update(before, after)
    assert str(caught.value) == (
        f"version 1: steps cannot be removed or renamed; add a new version (missing: {missing})"
    )


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(definition((1, ["probe", "encode", "notify"])), id="step-added"),
        pytest.param(definition((1, ["encode", "probe"])), id="steps-reordered"),
        pytest.param(definition((1, ["probe", "encode"]), (2, ["probe"])), id="version-added"),
        pytest.param(definition((2, ["probe"])), id="version-deleted"),
    ],
)
def test_a_definition_grows_freely(after: WorkflowDefinitionSpec) -> None:
    check_definition_update(definition((1, ["probe", "encode"])), after)


# --------------------------------------------------------------------------------------------
# The workflow template of a ScheduledJob


def test_a_workflow_spec_is_a_workflow_template_plus_requests() -> None:
    assert issubclass(WorkflowSpec, WorkflowTemplate)
    assert set(WorkflowSpec.model_fields) - set(WorkflowTemplate.model_fields) == {"requests"}


def test_a_scheduled_job_workflow_template_has_no_requests() -> None:
    spec = {"cron": "0 2 * * *", "workflowTemplate": copy.deepcopy(WORKFLOW_SPEC)}
    assert "spec.workflowTemplate.requests: Extra inputs are not permitted" in errors_of(ScheduledJobSpec, spec)
    del spec["workflowTemplate"]["requests"]
    parsed = ScheduledJobSpec.model_validate(spec)
    assert type(parsed.workflow_template) is WorkflowTemplate
    assert parsed.template is None


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        pytest.param({"onFailure": "compensate"}, "spec.workflowTemplate: exactly one of steps or definitionRef must be set", id="neither"),
        pytest.param({"steps": STEPS, "definitionRef": {"name": "d", "version": 1}}, "spec.workflowTemplate: exactly one of steps or definitionRef must be set", id="both"),
    ],
)
def test_a_workflow_template_runs_steps_or_a_definition(template: Spec, expected: str) -> None:
    assert expected in errors_of(ScheduledJobSpec, {"cron": "0 2 * * *", "workflowTemplate": template})


@pytest.mark.parametrize(
    ("ttl", "expected"),
    [
        pytest.param("1 day", "ttlAfterFinished: invalid duration '1 day'", id="words"),
        pytest.param("-1h", "ttlAfterFinished: negative durations are not allowed", id="negative"),
        pytest.param("1.5h", "ttlAfterFinished: invalid duration '1.5h'", id="decimal"),
        pytest.param(3600, "ttlAfterFinished: a duration must be a string", id="a-number"),
    ],
)
def test_a_bad_ttl_after_finished_is_refused_naming_the_field(ttl: object, expected: str) -> None:
    assert f"spec.{expected}" in errors_of(WorkflowSpec, {"steps": STEPS, "ttlAfterFinished": ttl})
    template = {"steps": STEPS, "ttlAfterFinished": ttl}
    assert f"spec.workflowTemplate.{expected}" in errors_of(
        ScheduledJobSpec, {"cron": "0 2 * * *", "workflowTemplate": template}
    )


def test_ttl_after_finished_is_a_duration_on_both_and_zero_is_allowed() -> None:
    assert str(WorkflowSpec.model_validate({"steps": STEPS, "ttlAfterFinished": "0s"}).ttl_after_finished) == "0s"
    for schema in (spec_schema(WORKFLOW), spec_schema(SCHEDULED_JOB)["properties"]["workflowTemplate"]):
        assert schema["properties"]["ttlAfterFinished"]["pattern"] == "^([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$"


def test_a_workflow_template_may_reference_a_definition_with_parameters() -> None:
    spec = ScheduledJobSpec.model_validate(
        {
            "every": "1h",
            "workflowTemplate": {"definitionRef": {"name": "video-publish", "version": 7}, "parameters": {"quality": "480"}},
        }
    )
    assert spec.workflow_template is not None
    assert spec.workflow_template.definition_ref is not None
    assert spec.workflow_template.parameters == {"quality": "480"}


# --------------------------------------------------------------------------------------------
# What the CRDs say


def spec_schema(kind: Any) -> dict[str, Any]:
    schema: dict[str, Any] = crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_requests_are_a_map_keyed_by_id_whose_items_are_immutable() -> None:
    schema = spec_schema(WORKFLOW)["properties"]["requests"]
    assert (schema["x-kubernetes-list-type"], schema["x-kubernetes-list-map-keys"]) == ("map", ["id"])
    assert schema["maxItems"] == REQUESTS_MAX_ITEMS
    list_rules = [rule["message"] for rule in schema["x-kubernetes-validations"]]
    assert list_rules == [MESSAGE_REQUESTS_APPEND_ONLY, MESSAGE_REQUESTS_TEXT]
    item = schema["items"]
    assert item["required"] == ["id", "action", "by"]
    assert item["properties"]["action"]["enum"] == ["approve", "reject", "retry", "complete", "cancel"]
    assert item["properties"]["output"]["maxLength"] == 4096  # a step output is at most 4 KiB
    assert item["properties"]["byGroups"]["x-kubernetes-list-type"] == "set"
    rules = {rule["rule"]: rule for rule in item["x-kubernetes-validations"]}
    assert rules["self == oldSelf"]["messageExpression"] == (
        "'request ' + self.id + ' cannot be changed once written; append a new request (with a new id) instead'"
    )
    assert rules["self.action == 'cancel' || has(self.step)"]["fieldPath"] == ".step"
    assert rules["!has(self.output) || self.action == 'complete'"]["reason"] == "FieldValueForbidden"


def test_a_definition_version_keeps_its_steps_by_a_transition_rule() -> None:
    item = spec_schema(WORKFLOW_DEFINITION)["properties"]["versions"]["items"]
    (rule,) = item["x-kubernetes-validations"]
    assert rule == {
        "rule": "sets.contains(self.steps.map(t, t.id), oldSelf.steps.map(s, s.id))",
        "message": "steps cannot be removed or renamed; add a new version",
        "messageExpression": "'version %d: steps cannot be removed or renamed; add a new version'.format([self.version])",
    }


def test_a_scheduled_job_workflow_template_is_the_template_without_requests() -> None:
    spec = spec_schema(SCHEDULED_JOB)
    template = spec["properties"]["workflowTemplate"]
    assert set(template["properties"]) == {"steps", "onFailure", "parameters", "definitionRef", "ttlAfterFinished"}
    assert template["x-kubernetes-validations"][0]["message"] == "exactly one of steps or definitionRef must be set"
    messages = [rule["message"] for rule in spec["x-kubernetes-validations"]]
    assert "exactly one of template, workflowTemplate or task must be set" in messages


def test_an_unknown_on_exhausted_outcome_is_rejected_naming_the_field() -> None:
    steps = copy.deepcopy(STEPS)
    steps[1].update(onTimeout="escalate", approval={"approvers": ["group:editors"], "onExhausted": "later"})
    message = errors_of(WorkflowSpec, {"steps": steps})
    assert "spec.steps[1].approval.onExhausted" in message and "'fail', 'skip' or 'approve'" in message
    approval = spec_schema(WORKFLOW)["properties"]["steps"]["items"]["properties"]["approval"]
    assert approval["properties"]["onExhausted"]["enum"] == ["fail", "skip", "approve"]
