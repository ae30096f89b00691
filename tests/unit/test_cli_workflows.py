"""The pure parts of the workflow verbs of `kubectl vigil`: requests, their outcome, and `timeline`.

Requests: an id is `r-` and ten base32 characters; the item each verb appends
(action, step, the caller's name and groups, reason, output, time) passes the
CRD's own model, and what it would refuse — output that is not JSON, a reason
too long, a step id that cannot be one — is refused first, naming the argument.
The append is a JSON Patch that tests the resourceVersion; a failed test (a
422 after which the workflow reads at a new version) or a 409 reads again, a
403 from admission becomes one line with a hint, and a workflow that keeps
changing gives up. The outcome of a request is read from a history recorded by
the pure orchestrator (tests/unit/workflowsim.py): recorded, refused, and what
it led to; waiting polls with an injected clock and gives up after the timeout.
Timeline: one row per step in definition order — retries, waits, who is
awaited, who approved or rejected and why (refused requests never count),
completion and retry by hand, escalation, approval on timeout, compensation,
cancellation — a header line, the not-yet-started workflow, and `--events`.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from tests.unit.workflowsim import T0, World
from vigil.cli import interventions, main, workflows
from vigil.cli.cluster import Cluster, Identity
from vigil.cli.errors import EXIT_BAD_INPUT, BadInput, Contention, Refused
from vigil.cli.tables import cell, human_duration
from vigil.cli.timeline import (
    EVENT_COLUMNS,
    STEP_COLUMNS,
    events_lines,
    read_workflow,
    step_rows,
    timeline_lines,
)
from vigil.cli.workflows import (
    POLL_SECONDS,
    Ask,
    append_patch,
    append_request,
    new_request_id,
    outcome_of,
    report,
    request_item,
    wait_recorded,
)
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import Event
from vigil.kube.kits.conflicts import CONFLICT_TRIES
from vigil.model.workflow import (
    MESSAGE_APPROVE_VERB,
    REQUEST_GROUPS_MAX_ITEMS,
    RequestAction,
    WorkflowRequest,
)
from vigil.model.workflowspec import definition_of

UID = "7d0c4a8e-0000-4000-8000-0000000000aa"
ALICE = Identity("alice", ("editors", "system:authenticated"))
REQUEST_ID = re.compile(r"^r-[a-z2-7]{10}$")
POD = {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}
FAST_RETRY = {"maxAttempts": 2, "backoff": {"initial": "1s", "max": "2s"}}


# --- request ids and items --------------------------------------------------------------------


def test_a_request_id_is_r_and_ten_base32_characters_from_the_random_bytes() -> None:
    assert new_request_id(lambda n: bytes(n)) == "r-aaaaaaaaaa"
    assert new_request_id(lambda n: b"\xff" * n) == "r-7777777777"
    ids = {new_request_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(REQUEST_ID.match(request_id) for request_id in ids)


def ask(action: RequestAction, step: str | None = "review", **fields: Any) -> Ask:
    return Ask(action=action, workflow="video-1", namespace="media", step=step, **fields)


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        pytest.param(
            ask(RequestAction.APPROVE, reason="checked the 480p render"),
            {"action": "approve", "step": "review", "reason": "checked the 480p render"},
            id="approve",
        ),
        pytest.param(
            ask(RequestAction.REJECT, reason="too dark"),
            {"action": "reject", "step": "review", "reason": "too dark"},
            id="reject",
        ),
        pytest.param(ask(RequestAction.RETRY, step="encode"), {"action": "retry", "step": "encode"}, id="retry"),
        pytest.param(
            ask(RequestAction.COMPLETE, step="encode", output='{"url": "s3://x"}', reason="by hand"),
            {"action": "complete", "step": "encode", "output": '{"url": "s3://x"}', "reason": "by hand"},
            id="complete",
        ),
        pytest.param(ask(RequestAction.CANCEL, step=None, reason="wrong cut"), {"action": "cancel", "reason": "wrong cut"}, id="cancel"),
    ],
)
def test_each_verb_makes_an_item_signed_by_the_caller(asked: Ask, expected: dict[str, Any]) -> None:
    item = request_item(asked, identity=ALICE, request_id="r-abcdefghij", at=T0)

    assert item == {
        "id": "r-abcdefghij", **expected, "by": "alice", "byGroups": ["editors", "system:authenticated"],
        "at": "2026-11-01T12:00:00Z",
    }  # fmt: skip
    WorkflowRequest.model_validate(item)  # what the CRD's model accepts


def test_an_item_claims_no_groups_when_the_caller_has_none_and_at_most_the_crds_limit() -> None:
    alone = request_item(ask(RequestAction.RETRY), identity=Identity("bob"), request_id="r-1", at=T0)
    crowded = Identity("carol", tuple(f"group-{n}" for n in range(REQUEST_GROUPS_MAX_ITEMS + 5)))
    many = request_item(ask(RequestAction.RETRY), identity=crowded, request_id="r-2", at=T0)

    assert "byGroups" not in alone
    assert many["byGroups"] == list(crowded.groups[:REQUEST_GROUPS_MAX_ITEMS])


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        pytest.param(ask(RequestAction.COMPLETE, output="{url: x}"), "--output: not valid JSON", id="output-not-json"),
        pytest.param(ask(RequestAction.COMPLETE, output="NaN"), "--output: not valid JSON", id="output-nan"),
        pytest.param(ask(RequestAction.COMPLETE, output=""), "--output: not valid JSON", id="output-empty"),
        pytest.param(ask(RequestAction.APPROVE, reason="x" * 1025), "--reason: String should have at most 1024", id="reason-too-long"),
        pytest.param(ask(RequestAction.RETRY, step="Encode 480"), "STEP: String should match pattern", id="step-not-an-id"),
    ],
)
def test_what_the_crd_would_refuse_is_refused_first_naming_the_argument(asked: Ask, message: str) -> None:
    with pytest.raises(BadInput, match=re.escape(message)):
        request_item(asked, identity=ALICE, request_id="r-abcdefghij", at=T0)


def test_requests_read_as_what_was_asked_and_what_was_done() -> None:
    assert ask(RequestAction.APPROVE).describe() == "approve step review of workflow/video-1"
    assert ask(RequestAction.APPROVE).done() == "approved step review of workflow/video-1"
    assert ask(RequestAction.COMPLETE, step="encode").done() == "completed step encode of workflow/video-1 by hand"
    assert ask(RequestAction.RETRY, step="encode").done() == "retry requested for step encode of workflow/video-1"
    assert ask(RequestAction.CANCEL, step=None).done() == "cancel requested for workflow/video-1"


# --- appending --------------------------------------------------------------------------------


def workflow_object(version: str, *, requests: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"steps": [{"id": "encode"}, {"id": "review"}]}
    if requests is not None:
        spec["requests"] = requests
    return {"metadata": {"name": "video-1", "namespace": "media", "resourceVersion": version}, "spec": spec}


ITEM = {"id": "r-abcdefghij", "action": "approve", "step": "review", "by": "alice"}


def test_the_patch_tests_the_resource_version_then_appends_or_creates_the_list() -> None:
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}

    assert append_patch(workflow_object("41", requests=[]), ITEM) == [
        test, {"op": "add", "path": "/spec/requests/-", "value": ITEM},
    ]  # fmt: skip
    assert append_patch(workflow_object("41"), ITEM) == [
        test, {"op": "add", "path": "/spec/requests", "value": [ITEM]},
    ]  # fmt: skip


class FakeWorkflows:
    """Reads of one Workflow in the order given (the last repeats); each patch answered in turn."""

    def __init__(self, reads: list[dict[str, Any]], answers: list[ApiException | None]) -> None:
        self.reads = reads
        self.answers = answers
        self.patches: list[list[dict[str, Any]]] = []
        self.content_types: list[str] = []

    def workflow(self, name: str, namespace: str) -> dict[str, Any]:
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]

    @property
    def custom(self) -> FakeWorkflows:
        return self

    def patch_namespaced_custom_object(self, *args: Any, _content_type: str) -> None:
        self.patches.append(args[-1])
        self.content_types.append(_content_type)
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer


def refused(status: int, message: str) -> ApiException:
    error = ApiException(status=status, reason="Refused")
    error.body = json.dumps({"kind": "Status", "message": message, "code": status})
    return error


BARE_422 = "the server rejected our request due to an error in our request"  # a failed test op


def test_an_append_is_one_json_patch() -> None:
    api = FakeWorkflows([workflow_object("7")], [None])

    append_request(cast(Cluster, api), ask(RequestAction.APPROVE), ITEM)

    assert api.patches == [append_patch(workflow_object("7"), ITEM)]
    assert api.content_types == ["application/json-patch+json"]


def test_a_failed_version_test_reads_again_and_appends_to_what_it_finds() -> None:
    someone_else = {"id": "r-zzzzzzzzzz", "action": "cancel", "by": "bob"}
    api = FakeWorkflows(
        [workflow_object("7"), workflow_object("8", requests=[someone_else])],  # the 422 is followed by a read
        [refused(422, BARE_422), None],
    )

    append_request(cast(Cluster, api), ask(RequestAction.APPROVE), ITEM)

    assert [patch[0]["value"] for patch in api.patches] == ["7", "8"]
    assert api.patches[1][1] == {"op": "add", "path": "/spec/requests/-", "value": ITEM}


def test_a_422_on_an_unchanged_workflow_is_not_a_conflict() -> None:
    invalid = refused(422, 'Workflow.vigil.dev "video-1" is invalid: spec.requests: Too many')
    api = FakeWorkflows([workflow_object("7")], [invalid])

    with pytest.raises(ApiException) as info:
        append_request(cast(Cluster, api), ask(RequestAction.APPROVE), ITEM)
    assert info.value is invalid
    assert len(api.patches) == 1


def test_admission_refusing_an_approval_becomes_one_line_with_a_hint() -> None:
    message = (
        'workflows.vigil.dev "video-1" is forbidden: ValidatingAdmissionPolicy ... denied request: '
        f"spec.requests[r-abcdefghij]: {MESSAGE_APPROVE_VERB} (user bob, workflow media/video-1)"
    )
    api = FakeWorkflows([workflow_object("7")], [refused(403, message)])

    with pytest.raises(Refused) as info:
        append_request(cast(Cluster, api), ask(RequestAction.APPROVE), ITEM)
    assert str(info.value) == (
        f"the API server refused the request: {message} "
        "(a RoleBinding to the chart's <release>-workflow-approver ClusterRole grants it)"
    )


def test_an_append_gives_up_on_a_workflow_that_keeps_changing() -> None:
    api = FakeWorkflows([workflow_object("7")], [refused(409, "conflict")] * CONFLICT_TRIES)

    with pytest.raises(Contention, match="kept changing"):
        append_request(cast(Cluster, api), ask(RequestAction.APPROVE), ITEM)
    assert len(api.patches) == CONFLICT_TRIES


def test_a_step_the_workflow_does_not_have_is_refused_before_any_write() -> None:
    api = FakeWorkflows([workflow_object("7")], [])

    with pytest.raises(BadInput, match=r'has no step "publish" \(its steps: encode, review\)'):
        append_request(cast(Cluster, api), ask(RequestAction.RETRY, step="publish"), ITEM)
    assert api.patches == []


# --- the outcome ------------------------------------------------------------------------------


def pod_step(step_id: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "pod", "dependsOn": list(deps), "template": POD, "retry": FAST_RETRY, **extra}


def approval_step(step_id: str, *deps: str, approvers: list[str], **extra: Any) -> dict[str, Any]:
    approval = {"approvers": approvers, **extra.pop("approval", {})}
    return {"id": step_id, "type": "approval", "dependsOn": list(deps), "approval": approval, **extra}


def wait_step(step_id: str, *deps: str, duration: str) -> dict[str, Any]:
    return {"id": step_id, "type": "wait", "dependsOn": list(deps), "wait": {"duration": duration}}


VIDEO = [
    pod_step("encode"),
    approval_step("review", "encode", approvers=["group:editors"], timeout="1h"),
    wait_step("cool", "review", duration="10m"),
]


def pinned(steps: list[dict[str, Any]], on_failure: str = "fail") -> dict[str, Any]:
    return {"source": {"inline": True}, "steps": steps, "onFailure": on_failure}


def world_of(steps: list[dict[str, Any]]) -> World:
    return World(definition_of(pinned(steps), uid=UID))


def object_of(world: World, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The Workflow as the operator leaves it: the pinned definition and the recorded history."""
    return {
        "metadata": {"name": "video-1", "namespace": "media", "uid": UID, "resourceVersion": "9"},
        "spec": {"steps": steps},
        "status": {"definition": pinned(steps), "history": [record.to_data() for record in world.history]},
    }


def encoded(world: World) -> None:
    """encode fails once, then succeeds after its backoff: the review waits."""
    world.tick(4)
    world.pod_result("encode", ok=False)
    world.run_until_timer()
    world.tick(6)
    world.pod_result("encode", output={"url": "s3://media/video-1.mp4"})


def history(world: World) -> list[dict[str, Any]]:
    return [record.to_data() for record in world.history]


def test_an_outcome_is_the_recorded_input_and_the_decisions_it_led_to() -> None:
    world = world_of(VIDEO)
    encoded(world)
    world.request(Event.APPROVED, "review", request="r-1", by="alice", byGroups=["editors"], reason="ok")
    world.request(Event.CANCEL_REQUESTED, None, request="r-2", by="bob")

    first = outcome_of(history(world), "r-1")
    second = outcome_of(history(world), "r-2")

    assert first is not None and second is not None
    assert (first.recorded.event, first.refusal) == (Event.APPROVED, None)
    assert [(r.event, r.step) for r in first.followed] == [(Event.STEP_STARTED, "cool")]  # not r-2's
    assert [r.event for r in second.followed] == [Event.STEP_CANCELLED, Event.WORKFLOW_CANCELLED]
    assert outcome_of(history(world), "r-3") is None


def test_a_refused_request_reports_the_operators_reason_and_fails() -> None:
    world = world_of(VIDEO)
    encoded(world)
    world.request(Event.APPROVED, "review", request="r-1", by="mallory", byGroups=["interns"], reason="lgtm")
    asked = ask(RequestAction.APPROVE, reason="lgtm")

    outcome = outcome_of(history(world), "r-1")

    assert outcome is not None and outcome.refusal is not None
    with pytest.raises(Refused) as info:
        report(asked, "r-1", outcome)
    assert str(info.value) == (
        "request r-1 (approve step review of workflow/video-1) was refused by the operator: "
        "NotAnApprover: mallory is not among the approvers of step review (group:editors)"
    )


def test_an_accepted_request_reports_what_happened_and_what_followed() -> None:
    world = world_of(VIDEO)
    encoded(world)
    world.request(Event.APPROVED, "review", request="r-1", by="alice", byGroups=["editors"])

    outcome = outcome_of(history(world), "r-1")

    assert outcome is not None
    assert report(ask(RequestAction.APPROVE), "r-1", outcome) == [
        "approved step review of workflow/video-1 (recorded as Approved)",
        "then: StepStarted cool",
    ]


class FakeTime:
    """A monotonic clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def reads(*objects: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    queue = list(objects)
    return lambda: queue.pop(0) if len(queue) > 1 else queue[0]


def test_waiting_reads_until_the_request_is_recorded() -> None:
    world = world_of(VIDEO)
    encoded(world)
    before = object_of(world, VIDEO)
    world.request(Event.APPROVED, "review", request="r-1", by="alice", byGroups=["editors"])
    fake = FakeTime()

    outcome = wait_recorded(
        reads(before, before, object_of(world, VIDEO)), "r-1", timeout=30, clock=fake.clock, sleep=fake.sleep
    )

    assert outcome is not None and outcome.recorded.event is Event.APPROVED
    assert fake.slept == [POLL_SECONDS, POLL_SECONDS]


def test_waiting_gives_up_after_the_timeout() -> None:
    world = world_of(VIDEO)
    fake = FakeTime()

    outcome = wait_recorded(reads(object_of(world, VIDEO)), "r-1", timeout=3, clock=fake.clock, sleep=fake.sleep)

    assert outcome is None
    assert sum(fake.slept) == 3


def test_waiting_stops_at_once_on_an_invalid_workflow() -> None:
    obj = {"status": {"conditions": [{"type": "Invalid", "status": "True", "message": "spec.steps: a cycle"}]}}

    with pytest.raises(Refused, match=r"the workflow is Invalid, so the operator acts on no request: spec\.steps: a cycle"):
        wait_recorded(reads(obj), "r-1", timeout=30, clock=FakeTime().clock, sleep=FakeTime().sleep)


# --- the verbs' arguments ---------------------------------------------------------------------


def test_retry_with_a_step_and_cancel_with_workflow_are_workflow_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[RequestAction, str, str | None, str | None, bool, float]] = []

    def fake_request(args: argparse.Namespace, action: RequestAction, *, workflow: str, cluster: Any = None) -> int:
        calls.append((action, workflow, getattr(args, "step", None), args.reason, args.wait, args.timeout))
        return 0

    monkeypatch.setattr(workflows, "request", fake_request)

    assert main.main(["retry", "video-1", "encode", "--reason", "fixed", "--no-wait"]) == 0
    assert main.main(["cancel", "--workflow", "video-1", "--timeout", "5"]) == 0
    assert calls == [
        (RequestAction.RETRY, "video-1", "encode", "fixed", False, 30.0),
        (RequestAction.CANCEL, "video-1", None, None, True, 5.0),
    ]


def test_a_reason_for_an_executions_retry_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["retry", "ex-abc", "--reason", "why"]) == EXIT_BAD_INPUT
    assert "--reason goes with a workflow step" in capsys.readouterr().err


def test_cancel_takes_job_or_workflow_not_both() -> None:
    with pytest.raises(SystemExit) as info:
        main.parser().parse_args(["cancel", "x", "--job", "--workflow"])
    assert info.value.code == EXIT_BAD_INPUT
    assert interventions.cmd_cancel is main.parser().parse_args(["cancel", "x"]).func


# --- timeline ---------------------------------------------------------------------------------


def table(obj: dict[str, Any], *, now: Any) -> dict[str, dict[str, str]]:
    """The timeline's rows by step, each cell as printed."""
    rows = step_rows(read_workflow(obj), now=now)
    return {row[0]: dict(zip(STEP_COLUMNS[1:], (cell(v) for v in row[1:]), strict=True)) for row in rows}


def test_a_running_workflow_shows_retries_who_is_awaited_and_what_waits() -> None:
    world = world_of(VIDEO)
    encoded(world)
    encode_done = world.now
    now = encode_done + timedelta(seconds=30)

    steps = table(object_of(world, VIDEO), now=now)

    assert steps["encode"] == {
        "TYPE": "pod", "PHASE": "Succeeded", "ATTEMPTS": "2", "STARTED": "2026-11-01T12:00:00Z",
        "DURATION": f"{(encode_done - T0).total_seconds():.1f}s", "DETAIL": "last failure (attempt 1): ExitCode1",
    }  # fmt: skip
    assert steps["review"]["PHASE"] == "Running"
    assert steps["review"]["DURATION"] == "running for 30.0s"
    assert steps["review"]["DETAIL"] == "awaiting group:editors; deadline in 59m"
    assert steps["cool"] == {
        "TYPE": "wait", "PHASE": "Pending", "ATTEMPTS": "-", "STARTED": "-", "DURATION": "-", "DETAIL": "after review",
    }  # fmt: skip


def test_an_approval_names_who_decided_and_why_and_refused_requests_never_count() -> None:
    world = world_of(VIDEO)
    encoded(world)
    world.tick(20)
    world.request(Event.APPROVED, "review", request="r-1", by="mallory", byGroups=["interns"], reason="lgtm")
    world.request(Event.APPROVED, "cool", request="r-2", by="alice", byGroups=["editors"], reason="early")
    world.request(Event.APPROVED, "review", request="r-3", by="alice", byGroups=["editors"], reason="checked the 480p render")

    steps = table(object_of(world, VIDEO), now=world.now + timedelta(minutes=1))

    assert steps["review"]["PHASE"] == "Succeeded"
    assert steps["review"]["DURATION"] == "20.0s"
    assert steps["review"]["DETAIL"] == "approved by alice: checked the 480p render"
    assert steps["cool"]["PHASE"] == "Running"
    assert steps["cool"]["DETAIL"] == f"until {format_rfc3339(world.now + timedelta(minutes=10))} (in 9m)"


def test_a_rejection_fails_the_step_and_the_workflow() -> None:
    world = world_of(VIDEO)
    encoded(world)
    world.tick(40)
    world.request(Event.REJECTED, "review", request="r-1", by="bob", byGroups=["editors"], reason="too dark")
    obj = object_of(world, VIDEO)

    steps = table(obj, now=world.now)
    header = timeline_lines(obj, now=world.now + timedelta(hours=2))[0]

    assert steps["review"]["PHASE"] == "Failed"
    assert steps["review"]["DETAIL"] == "rejected by bob: too dark"
    assert steps["cool"]["PHASE"] == "Pending"
    took = f"{(world.now - T0).total_seconds():.1f}s"
    assert header == (
        "workflow media/video-1: Failed (step review failed), started 2026-11-01T12:00:00Z (2h ago), "
        f"finished {format_rfc3339(world.now)} (took {took}), progress 2/3"
    )


def test_a_retry_and_a_completion_by_hand_say_who_and_why() -> None:
    world = world_of(VIDEO)
    world.tick(4)
    world.pod_result("encode", ok=False)
    world.run_until_timer()
    world.pod_result("encode", ok=False)  # attempts exhausted: the workflow fails
    world.tick(60)
    world.request(Event.RETRY_REQUESTED, "encode", request="r-1", by="alice", reason="network fixed")
    retried = table(object_of(world, VIDEO), now=world.now)
    world.tick(10)
    world.request(Event.COMPLETED_MANUALLY, "encode", request="r-2", by="carol", reason="uploaded by hand", output={"url": "x"})

    steps = table(object_of(world, VIDEO), now=world.now)

    assert retried["encode"]["PHASE"] == "Running"
    assert retried["encode"]["ATTEMPTS"] == "3"
    assert retried["encode"]["DETAIL"] == "last failure (attempt 2): ExitCode1; retried by hand by alice: network fixed"
    assert steps["encode"]["PHASE"] == "Succeeded"
    assert steps["encode"]["DURATION"] == "10.0s"  # the timeout (and the duration) count afresh after a retry
    assert steps["encode"]["DETAIL"] == (
        "completed by hand by carol: uploaded by hand; last failure (attempt 2): ExitCode1; "
        "retried by hand by alice: network fixed"
    )


def test_an_escalated_approval_and_an_approval_on_timeout() -> None:
    steps_data = [
        approval_step(
            "review", approvers=["user:alice"], timeout="10m", onTimeout="escalate",
            approval={"escalation": [{"after": "5m", "approvers": ["group:leads"]}]},
        ),
        approval_step("legal", approvers=["user:lee"], timeout="1m", onTimeout="approve"),
    ]  # fmt: skip
    world = world_of(steps_data)
    world.run_until_timer()  # legal: approved on timeout
    world.run_until_timer()  # review: escalated

    steps = table(object_of(world, steps_data), now=world.now)

    assert steps["legal"]["PHASE"] == "Succeeded"
    assert steps["legal"]["DETAIL"] == "approved on timeout"
    assert steps["review"]["PHASE"] == "Running"
    assert steps["review"]["DETAIL"] == "awaiting user:alice, group:leads; escalated to level 1; deadline in 5m"


def test_a_cancelled_workflow_shows_who_cancelled_and_the_compensation() -> None:
    steps_data = [pod_step("charge", compensate=POD), pod_step("ship", "charge")]
    world = world_of(steps_data)
    world.tick(2)
    world.pod_result("charge")
    world.tick(3)
    world.request(Event.CANCEL_REQUESTED, None, request="r-1", by="carol", reason="order withdrawn")
    world.tick(5)
    world.pod_result("charge")  # the compensation
    obj = object_of(world, steps_data)

    steps = table(obj, now=world.now)
    header = timeline_lines(obj, now=world.now)[0]

    assert steps["charge"]["PHASE"] == "Succeeded"
    assert steps["charge"]["DETAIL"] == "compensation Succeeded"
    assert steps["ship"]["PHASE"] == "Cancelled"
    assert steps["ship"]["DETAIL"] == "Cancelled"
    assert steps["ship"]["DURATION"] == "3.0s"
    assert header.startswith("workflow media/video-1: Cancelled (cancel requested by carol), started ")


def test_the_timeline_prints_a_header_and_a_row_per_step_in_definition_order() -> None:
    world = world_of(VIDEO)
    encoded(world)

    now = world.now + timedelta(minutes=3)

    lines = timeline_lines(object_of(world, VIDEO), now=now)

    assert lines[0] == (
        f"workflow media/video-1: Running, started 2026-11-01T12:00:00Z ({human_duration(now - T0)} ago), "
        "progress 1/3, current: review"
    )
    assert lines[1] == ""
    assert lines[2].split() == STEP_COLUMNS
    assert [line.split()[0] for line in lines[3:]] == ["encode", "review", "cool"]


def test_a_workflow_not_started_yet_shows_its_inline_steps_pending() -> None:
    obj = {"metadata": {"name": "video-1", "namespace": "media", "uid": UID}, "spec": {"steps": VIDEO}}

    lines = timeline_lines(obj, now=T0)

    assert lines[0] == "workflow media/video-1: Pending, not started by the operator yet"
    assert [line.split()[:3] for line in lines[3:]] == [
        ["encode", "pod", "Pending"], ["review", "approval", "Pending"], ["cool", "wait", "Pending"],
    ]  # fmt: skip
    assert events_lines(obj, now=T0)[-1] == "no history yet"


def test_a_workflow_by_reference_not_started_yet_has_no_steps_to_show() -> None:
    obj = {"metadata": {"name": "video-1", "namespace": "media"}, "spec": {"definitionRef": {"name": "video", "version": 2}}}

    assert timeline_lines(obj, now=T0)[1] == "its steps are known once the operator pins its definition"


def test_true_conditions_get_a_line_under_the_header() -> None:
    world = world_of(VIDEO)
    obj = object_of(world, VIDEO)
    obj["status"]["conditions"] = [
        {"type": "Stuck", "status": "True", "reason": "PastExpectedDuration", "message": "running past expectedDuration: encode"},
        {"type": "Invalid", "status": "False", "reason": "Valid", "message": ""},
    ]

    assert timeline_lines(obj, now=T0)[1] == "Stuck: running past expectedDuration: encode"


def test_an_unreadable_history_is_bad_input_naming_the_workflow() -> None:
    world = world_of(VIDEO)
    obj = object_of(world, VIDEO)
    obj["status"]["history"].append({"event": "Exploded", "at": "2026-11-01T12:00:00Z"})

    with pytest.raises(BadInput, match=r'workflow "video-1" in namespace "media" cannot be read: .*Exploded'):
        timeline_lines(obj, now=T0)


def test_events_list_every_record_with_its_details() -> None:
    world = world_of(VIDEO)
    encoded(world)
    long_output = {"url": "s3://media/" + "v" * 80}
    world.request(Event.COMPLETED_MANUALLY, "review", request="r-1", by="carol", reason="signed on paper", output=long_output)

    lines = events_lines(object_of(world, VIDEO), now=world.now)

    columns, *rows = lines[2:]
    assert columns.split() == EVENT_COLUMNS
    assert len(rows) == len(world.history)
    assert rows[0].split() == ["2026-11-01T12:00:00Z", "WorkflowStarted", "-", "-", "-"]
    completed = next(row for row in rows if "CompletedManually" in row)
    detail = completed.split("   ")[-1]
    assert detail.startswith('request=r-1 by=carol reason="signed on paper" output={"url":"s3://media/vvv')
    assert detail.endswith("…")
    assert len(detail.split("output=")[1]) == 60
