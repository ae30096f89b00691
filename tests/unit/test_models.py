"""The resource models: good specs parse, and every kind of bad input is rejected naming its field.

Covers the duration grammar (parser, formatter, the Duration type), the ScheduledJob, Workflow,
WorkflowDefinition and ScheduleBucket specs (one named row per bad input), the workflow graph
checks (unknown ids, self-dependency, cycles), and status parsing.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from vigil.model import (
    CatchUpPolicy,
    Duration,
    OnFailure,
    OnTimeout,
    PositiveDuration,
    Priority,
    ScheduleBucketSpec,
    ScheduleBucketStatus,
    ScheduledJobSpec,
    ScheduledJobStatus,
    StepType,
    WorkflowDefinitionSpec,
    WorkflowSpec,
    WorkflowStatus,
    describe_validation_error,
    find_cycle,
    format_duration,
    parse_duration,
)

Spec = dict[str, Any]

POD_TEMPLATE: Spec = {
    "spec": {"containers": [{"name": "main", "image": "example/reconcile:1", "args": ["--date"]}]}
}

#: The reference's nightly reconciliation job.
RECONCILE_DAILY: Spec = {
    "cron": "0 2 * * *",
    "timezone": "Europe/London",
    "expectedMaxInterval": "26h",
    "payloadTemplate": {"date": "{{ periodStart | date }}"},
    "template": POD_TEMPLATE,
}


def pod_step(step_id: str, *depends_on: str) -> Spec:
    step: Spec = {"id": step_id, "type": "pod", "template": POD_TEMPLATE}
    if depends_on:
        step["dependsOn"] = list(depends_on)
    return step


#: The reference's video_publish workflow: probe -> encode_480 -> approve.
VIDEO_PUBLISH: Spec = {
    "steps": [
        pod_step("probe"),
        pod_step("encode_480", "probe"),
        {
            "id": "approve",
            "type": "approval",
            "dependsOn": ["encode_480"],
            "approval": {"approvers": ["group:editors"]},
            "timeout": "72h",
            "onTimeout": "escalate",
        },
    ],
    "onFailure": "compensate",
}

DEFINITION: Spec = {"versions": [{"version": 7, "steps": VIDEO_PUBLISH["steps"]}]}

BUCKET: Spec = {
    "minute": "2026-08-01T02:00:00Z",
    "shard": 0,
    "occurrences": [
        {
            "key": "0b4f-uid@2026-08-01T02:00:00Z",
            "namespace": "finance",
            "name": "reconcile-daily",
            "uid": "0b4f-uid",
            "generation": 3,
            "nominal": "2026-08-01T02:00:00Z",
            "fireAt": "2026-08-01T02:00:17Z",
        }
    ],
}


def errors_of(model: type[BaseModel], spec: Spec) -> str:
    """The problems reported for ``spec``, one ``spec.<field>: <message>`` line each."""
    with pytest.raises(ValidationError) as caught:
        model.model_validate(spec)
    return "\n".join(describe_validation_error(caught.value))


# --------------------------------------------------------------------------------------------
# Durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("90s", timedelta(seconds=90), id="seconds"),
        pytest.param("15m", timedelta(minutes=15), id="minutes"),
        pytest.param("26h", timedelta(hours=26), id="hours"),
        pytest.param("1h30m", timedelta(hours=1, minutes=30), id="compound"),
        pytest.param("7d", timedelta(days=7), id="days"),
        pytest.param("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4), id="all-units"),
        pytest.param("0s", timedelta(0), id="zero"),
        pytest.param("90m", timedelta(minutes=90), id="unnormalised"),
    ],
)
def test_parse_duration_accepts_the_grammar(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("-5m", "negative durations are not allowed: '-5m'", id="negative"),
        pytest.param("5x", "invalid duration '5x'", id="unknown-unit"),
        pytest.param("30m1h", "invalid duration '30m1h'", id="units-out-of-order"),
        pytest.param("1h1h", "invalid duration '1h1h'", id="repeated-unit"),
        pytest.param("1.5h", "invalid duration '1.5h'", id="decimal"),
        pytest.param("1h 30m", "invalid duration '1h 30m'", id="space"),
        pytest.param("", "invalid duration ''", id="empty"),
        pytest.param("10", "invalid duration '10'", id="no-unit"),
        pytest.param("1h\n", "invalid duration '1h\\n'", id="trailing-newline"),
        pytest.param("9" * 40 + "s", "longer than 32 characters", id="too-long"),
        pytest.param("9999999999999d", "too large", id="overflow"),
    ],
)
def test_parse_duration_rejects_text_outside_the_grammar(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(text)
    assert message in str(caught.value)


@given(st.integers(min_value=0, max_value=10**9))
def test_format_duration_is_the_inverse_of_parse(seconds: int) -> None:
    delta = timedelta(seconds=seconds)
    assert parse_duration(format_duration(delta)) == delta


def test_format_duration_writes_the_canonical_form() -> None:
    assert format_duration(timedelta(minutes=90)) == "1h30m"
    assert format_duration(timedelta(0)) == "0s"


def test_duration_keeps_the_text_it_was_written_as() -> None:
    duration = Duration("90m")
    assert duration == timedelta(hours=1, minutes=30)
    assert str(duration) == "90m"
    assert pickle.loads(pickle.dumps(duration)).text == "90m"
    assert copy.deepcopy(duration).text == "90m"


def test_positive_duration_rejects_zero() -> None:
    with pytest.raises(ValueError, match="'0h0m' must be greater than zero"):
        PositiveDuration("0h0m")


# --------------------------------------------------------------------------------------------
# Good specs


def test_reconcile_daily_parses_with_defaults_filled_in() -> None:
    spec = ScheduledJobSpec.model_validate(RECONCILE_DAILY)
    assert spec.cron == "0 2 * * *"
    assert spec.timezone == "Europe/London"
    assert spec.expected_max_interval == timedelta(hours=26)
    assert spec.payload_template == {"date": "{{ periodStart | date }}"}
    assert spec.recurring
    assert spec.catch_up_policy is CatchUpPolicy.ALL
    assert spec.catch_up_window == timedelta(minutes=5)
    assert spec.priority is Priority.NORMAL
    assert spec.retry.max_attempts == 3
    assert spec.retry.backoff.initial == timedelta(seconds=10)
    assert spec.jitter is None


def test_a_spec_writes_back_what_was_written() -> None:
    spec = ScheduledJobSpec.model_validate({**RECONCILE_DAILY, "catchUpWindow": "90m"})
    assert spec.model_dump(mode="json", exclude_unset=True) == {
        **RECONCILE_DAILY,
        "catchUpWindow": "90m",
    }


@pytest.mark.parametrize(
    "schedule",
    [
        pytest.param({"runAt": "2026-08-01T02:00:00Z"}, id="one-off"),
        pytest.param({"runAt": "2026-08-01T03:00:00+01:00"}, id="one-off-with-offset"),
        pytest.param({"every": "15m"}, id="interval"),
        pytest.param({"cron": "@daily"}, id="macro"),
        pytest.param({"cron": "*/5 9-17 * * mon-fri"}, id="ranges-and-names"),
    ],
)
def test_each_schedule_kind_parses(schedule: Spec) -> None:
    base = {key: value for key, value in RECONCILE_DAILY.items() if key != "cron"}
    spec = ScheduledJobSpec.model_validate({**base, **schedule})
    assert spec.recurring == ("runAt" not in schedule)


def test_a_suspended_job_with_a_reason_parses() -> None:
    spec = ScheduledJobSpec.model_validate(
        {**RECONCILE_DAILY, "suspend": True, "suspendReason": "INC-42", "suspendedBy": "alice"}
    )
    assert spec.suspend and spec.suspended_by == "alice"


def test_video_publish_parses() -> None:
    spec = WorkflowSpec.model_validate(VIDEO_PUBLISH)
    assert spec.steps is not None
    assert [step.id for step in spec.steps] == ["probe", "encode_480", "approve"]
    approve = spec.steps[2]
    assert approve.type is StepType.APPROVAL
    assert approve.timeout == timedelta(hours=72)
    assert approve.on_timeout is OnTimeout.ESCALATE
    assert spec.on_failure is OnFailure.COMPENSATE


def test_a_scheduled_job_can_start_a_workflow() -> None:
    base = {key: value for key, value in RECONCILE_DAILY.items() if key != "template"}
    spec = ScheduledJobSpec.model_validate({**base, "workflowTemplate": VIDEO_PUBLISH})
    assert spec.workflow_template is not None


def test_a_workflow_can_reference_a_definition() -> None:
    spec = WorkflowSpec.model_validate({"definitionRef": {"name": "video-publish", "version": 7}})
    assert spec.definition_ref is not None and spec.definition_ref.version == 7


def test_a_wait_step_parses() -> None:
    spec = WorkflowSpec.model_validate(
        {"steps": [{"id": "cool-off", "type": "wait", "wait": {"duration": "7d"}}]}
    )
    assert spec.steps is not None and spec.steps[0].wait is not None


def test_a_definition_finds_its_versions() -> None:
    spec = WorkflowDefinitionSpec.model_validate(DEFINITION)
    assert spec.version(7) is not None
    assert spec.version(8) is None


def test_a_bucket_parses() -> None:
    spec = ScheduleBucketSpec.model_validate(BUCKET)
    assert spec.occurrences[0].fire_at == datetime(2026, 8, 1, 2, 0, 17, tzinfo=UTC)
    assert spec.occurrences[0].schedule_hash == "" and not spec.occurrences[0].resume
    status = ScheduleBucketStatus.model_validate(
        {"fired": {"k": {"at": "2026-08-01T02:00:18.250Z", "outcome": "Suspended", "reason": "x"}}}
    )
    assert status.fired["k"].outcome == "Suspended"


def test_status_parses_and_ignores_fields_it_does_not_know() -> None:
    status = ScheduledJobStatus.model_validate(
        {
            "observedGeneration": 2,
            "schedule": "0 2 * * * Europe/London",
            "nextRun": "2026-08-02T01:00:00Z",
            "occurrences": [{"nominal": "2026-08-01T01:00:00Z", "outcome": "Missed"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Scheduled"}],
            "chain": {"lastNominal": "2026-08-01T01:00:00Z", "scheduleHash": "ab12"},
            "somethingNewer": {"x": 1},
        }
    )
    assert status.next_run == datetime(2026, 8, 2, 1, 0, tzinfo=UTC)
    assert status.conditions[0].status == "True"
    assert status.chain is not None and status.chain.schedule_hash == "ab12"
    workflow = WorkflowStatus.model_validate(
        {"phase": "Running", "steps": {"probe": {"state": "Succeeded"}}, "history": [{"event": "x"}]}
    )
    assert workflow.steps["probe"] == {"state": "Succeeded"}


# --------------------------------------------------------------------------------------------
# Bad specs: each row names the field (or fields) in its message

Edit = Callable[[Spec], None]


def with_changes(base: Spec, edit: Edit) -> Spec:
    spec = copy.deepcopy(base)
    edit(spec)
    return spec


def setting(**values: Any) -> Edit:
    return lambda spec: spec.update(values)


def removing(*keys: str) -> Edit:
    def edit(spec: Spec) -> None:
        for key in keys:
            del spec[key]

    return edit


def replacing(key: str, **values: Any) -> Edit:
    def edit(spec: Spec) -> None:
        del spec[key]
        spec.update(values)

    return edit


def at(path: str, value: Any) -> Edit:
    """Set a nested value: ``at("retry.backoff.factor", 0.5)``, ``at("steps.1.id", "x")``."""

    def edit(spec: Spec) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


def dropping(path: str) -> Edit:
    def edit(spec: Spec) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[int(last) if isinstance(node, list) else last]

    return edit


SCHEDULED_JOB_ERRORS = [
    ("unknown-timezone", setting(timezone="Mars/Olympus"), "spec.timezone: unknown time zone 'Mars/Olympus'"),
    ("host-local-timezone", setting(timezone="localtime"), "spec.timezone: unknown time zone 'localtime'"),
    ("timezone-wrong-case", setting(timezone="europe/london"), "spec.timezone: unknown time zone"),
    ("cron-six-fields", setting(cron="0 0 2 * * *"), "spec.cron: invalid cron expression '0 0 2 * * *': expected 5 fields (minute hour day-of-month month day-of-week), got 6"),
    ("cron-four-fields", setting(cron="0 2 * *"), "spec.cron: invalid cron expression '0 2 * *': expected 5 fields"),
    ("cron-tab-separated", setting(cron="0\t2 * * *"), "spec.cron: invalid cron expression '0\\t2 * * *': fields must be separated by spaces"),
    ("timezone-with-space", setting(timezone="Europe London"), "spec.timezone: unknown time zone 'Europe London'"),
    ("cron-out-of-range", setting(cron="61 * * * *"), "spec.cron: invalid cron expression '61 * * * *': minute value 61 is outside 0-59"),
    ("cron-unknown-macro", setting(cron="@reboot"), "spec.cron: unknown cron macro '@reboot'"),
    ("cron-uppercase-macro", setting(cron="@DAILY"), "spec.cron: unknown cron macro '@DAILY'"),
    ("cron-last-day", setting(cron="0 0 L * *"), "spec.cron: invalid cron expression '0 0 L * *': day-of-month value 'L' is not a number"),
    ("cron-leading-space", setting(cron=" 0 2 * * *"), "spec.cron: invalid cron expression ' 0 2 * * *': fields must be separated by spaces"),
    ("cron-never-fires", setting(cron="0 0 31 2 *"), "spec.cron: invalid cron expression '0 0 31 2 *': it names no date that exists"),
    ("cron-list", setting(cron=["0 2 * * *"]), "spec.cron: Input should be a valid string"),
    ("bad-duration", setting(expectedMaxInterval="26x"), "spec.expectedMaxInterval: invalid duration '26x'"),
    ("duration-not-a-string", setting(expectedMaxInterval=3600), "spec.expectedMaxInterval: a duration must be a string"),
    ("negative-duration", replacing("cron", every="-5m"), "spec.every: negative durations are not allowed: '-5m'"),
    ("zero-interval", replacing("cron", every="0s"), "spec.every: duration '0s' must be greater than zero"),
    ("negative-jitter", setting(jitter="-1s"), "spec.jitter: negative durations are not allowed"),
    ("negative-retention", at("retention.succeeded", -1), "spec.retention.succeeded: Input should be greater than or equal to 0"),
    ("huge-retention", at("retention.failed", 1001), "spec.retention.failed: Input should be less than or equal to 1000"),
    ("misspelt-retention", at("retention.success", 3), "spec.retention.success: Extra inputs are not permitted"),
    ("jitter-longer-than-every", replacing("cron", every="1m", jitter="10m"), "spec: jitter (10m) must not be longer than the interval (every is 1m)"),
    ("jitter-longer-than-cron", setting(cron="*/5 * * * *", jitter="10m"), "spec: jitter (10m) must not be longer than the interval (cron '*/5 * * * *' fires 5m apart at the closest)"),
    ("expected-interval-below-every", replacing("cron", every="2h", expectedMaxInterval="30m"), "spec: expectedMaxInterval (30m) must be at least the interval (every is 2h)"),
    ("expected-interval-below-cron", setting(expectedMaxInterval="1h"), "spec: expectedMaxInterval (1h) must be at least the interval (cron '0 2 * * *' fires 1d apart at the closest)"),
    ("zero-timeout", setting(timeout="0m"), "spec.timeout: duration '0m' must be greater than zero"),
    ("zero-catch-up-window", setting(catchUpWindow="0s"), "spec.catchUpWindow: duration '0s' must be greater than zero"),
    ("cron-and-run-at", setting(runAt="2026-08-01T02:00:00Z"), "spec: exactly one of runAt, cron or every must be set (found: runAt, cron)"),
    ("cron-and-every", setting(every="1h"), "spec: exactly one of runAt, cron or every must be set (found: cron, every)"),
    ("no-schedule", removing("cron"), "spec: exactly one of runAt, cron or every must be set (found: none)"),
    ("run-at-without-offset", replacing("cron", runAt="2026-08-01T02:00:00"), "spec.runAt: expected an RFC 3339 date-time with a UTC offset"),
    ("run-at-date-only", replacing("cron", runAt="2026-08-01"), "spec.runAt: expected an RFC 3339 date-time"),
    ("run-at-number", replacing("cron", runAt=1785549600), "spec.runAt: expected an RFC 3339 date-time"),
    ("payload-and-template", setting(payload={"date": "2026-07-31"}), "spec: at most one of payload or payloadTemplate may be set"),
    ("payload-not-an-object", setting(payloadTemplate=None, payload=[1, 2]), "spec.payload: Input should be a valid dictionary"),
    ("bad-payload-template", at("payloadTemplate.date", "{{ periodStart | }}"), "spec.payloadTemplate: invalid template '{{ periodStart | }}'"),
    ("nested-bad-payload-template", at("payloadTemplate.dates", ["{% if %}"]), "spec.payloadTemplate: invalid template '{% if %}'"),
    ("template-nesting-too-deep", at("payloadTemplate.x", "{{ " * 200), "spec.payloadTemplate: invalid template '{{ {{ {{ {{ {{ {{ {{ {{ {{ {{ {{ {{ {{ {'...: it nests too deeply"),
    ("template-too-long", at("payloadTemplate.x", "x" * 40_000), "spec.payloadTemplate: a template is 40000 characters long; the limit is 32768"),
    ("bad-idempotency-key", setting(idempotencyKey="reconcile:{{ periodStart"), "spec.idempotencyKey: invalid template"),
    ("idempotency-key-too-long", setting(idempotencyKey="k" * 254), "spec.idempotencyKey: String should have at most 253 characters"),
    ("catch-up-limit-zero", setting(catchUpLimit=0), "spec.catchUpLimit: Input should be greater than or equal to 1"),
    ("catch-up-limit-huge", setting(catchUpLimit=10_001), "spec.catchUpLimit: Input should be less than or equal to 10000"),
    ("unknown-catch-up-policy", setting(catchUpPolicy="Some"), "spec.catchUpPolicy: Input should be 'All', 'Latest' or 'None'"),
    ("unknown-concurrency-policy", setting(concurrencyPolicy="Queue"), "spec.concurrencyPolicy: Input should be 'Allow', 'Forbid' or 'Replace'"),
    ("unknown-priority", setting(priority="urgent"), "spec.priority: Input should be 'high', 'normal' or 'low'"),
    ("unknown-dst-gap", at("daylightSaving.gap", "Jump"), "spec.daylightSaving.gap: Input should be 'Shift' or 'Skip'"),
    ("unknown-dst-overlap", at("daylightSaving.overlap", "Thrice"), "spec.daylightSaving.overlap: Input should be 'Once' or 'Twice'"),
    ("no-attempts", at("retry.maxAttempts", 0), "spec.retry.maxAttempts: Input should be greater than or equal to 1"),
    ("too-many-attempts", at("retry.maxAttempts", 101), "spec.retry.maxAttempts: Input should be less than or equal to 100"),
    ("backoff-factor-below-one", at("retry.backoff.factor", 0.5), "spec.retry.backoff.factor: Input should be greater than or equal to 1"),
    ("backoff-max-below-initial", at("retry.backoff", {"initial": "5m", "max": "1m"}), "spec.retry.backoff: backoff max (1m) must not be shorter than initial (5m)"),
    ("suspend-without-reason", setting(suspend=True), "spec: suspendReason is required when suspend is true"),
    ("suspend-with-empty-reason", setting(suspend=True, suspendReason=""), "spec: suspendReason is required when suspend is true"),
    ("misspelt-field", setting(expectedMaxIntervall="26h"), "spec.expectedMaxIntervall: Extra inputs are not permitted"),
    ("template-and-workflow", setting(workflowTemplate=VIDEO_PUBLISH), "spec: exactly one of template, workflowTemplate or task must be set"),
    ("missing-template", removing("template"), "spec: exactly one of template, workflowTemplate or task must be set"),
    ("template-and-task", setting(task={"queue": "reports", "name": "build"}), "spec: exactly one of template, workflowTemplate or task must be set"),
    ("task-without-queue", replacing("template", task={"name": "build"}), "spec.task.queue: Field required"),
    ("task-without-name", replacing("template", task={"queue": "reports"}), "spec.task.name: Field required"),
    ("task-empty-name", replacing("template", task={"queue": "reports", "name": ""}), "spec.task.name: String should have at least 1 character"),
    ("task-bad-queue-name", replacing("template", task={"queue": "Reports!", "name": "build"}), "spec.task.queue: String should match pattern"),
    ("task-priority-beyond-smallint", replacing("template", task={"queue": "reports", "name": "build", "priority": 40000}), "spec.task.priority: Input should be less than or equal to 32767"),
    ("task-no-attempts", replacing("template", task={"queue": "reports", "name": "build", "maxAttempts": 0}), "spec.task.maxAttempts: Input should be greater than or equal to 1"),
    ("task-unknown-field", replacing("template", task={"queue": "reports", "name": "build", "queues": "x"}), "spec.task.queues: Extra inputs are not permitted"),
    ("template-without-containers", at("template.spec", {"restartPolicy": "Never"}), "spec.template.spec.containers: Field required"),
    ("template-with-no-containers", at("template.spec.containers", []), "spec.template.spec.containers: List should have at least 1 item"),
    ("container-without-image", at("template.spec.containers", [{"name": "main"}]), "spec.template.spec.containers[0].image: Field required"),
    ("template-unknown-field", at("template.podSpec", {}), "spec.template.podSpec: Extra inputs are not permitted"),
    ("freshness-without-max-age", setting(freshness={"configMap": {"name": "report", "key": "at"}}), "spec.freshness.maxAge: Field required"),
    ("freshness-bad-config-map", setting(freshness={"configMap": {"name": "Report!", "key": "at"}, "maxAge": "2d"}), "spec.freshness.configMap.name: String should match pattern"),
    ("workflow-template-with-cycle", replacing("template", workflowTemplate={"steps": [pod_step("a", "b"), pod_step("b", "a")]}), "spec.workflowTemplate.steps: steps form a cycle: a -> b -> a"),
    ("workflow-template-repeating-a-step-id", replacing("template", workflowTemplate={"steps": [pod_step("a"), pod_step("a")]}), "spec.workflowTemplate.steps: duplicate step id 'a'"),
]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [pytest.param(edit, expected, id=name) for name, edit, expected in SCHEDULED_JOB_ERRORS],
)
def test_a_bad_scheduled_job_is_rejected_naming_the_field(edit: Edit, expected: str) -> None:
    assert expected in errors_of(ScheduledJobSpec, with_changes(RECONCILE_DAILY, edit))


WORKFLOW_ERRORS = [
    ("cycle", at("steps.0.dependsOn", ["approve"]), "spec.steps: steps form a cycle: probe -> approve -> encode_480 -> probe"),
    ("two-step-cycle", setting(steps=[pod_step("a", "b"), pod_step("b", "a")]), "spec.steps: steps form a cycle: a -> b -> a"),
    ("unknown-depends-on", at("steps.1.dependsOn", ["probe", "prob"]), "spec.steps: step 'encode_480' dependsOn unknown step(s): prob"),
    ("self-dependency", at("steps.0.dependsOn", ["probe"]), "spec.steps[0]: step 'probe': a step cannot depend on itself"),
    ("duplicate-step-id", at("steps.2.id", "probe"), "spec.steps: duplicate step id 'probe'"),
    ("pod-step-without-template", dropping("steps.0.template"), "spec.steps[0]: step 'probe': template is required on pod steps"),
    ("approval-step-without-approval", dropping("steps.2.approval"), "spec.steps[2]: step 'approve': approval is required on approval steps"),
    ("template-on-approval-step", at("steps.2.template", POD_TEMPLATE), "spec.steps[2]: step 'approve': template is required on pod steps and allowed on no other type"),
    ("wait-step-without-wait", setting(steps=[{"id": "w", "type": "wait"}]), "spec.steps[0]: step 'w': wait is required on wait steps"),
    ("wait-with-duration-and-until", setting(steps=[{"id": "w", "type": "wait", "wait": {"duration": "1h", "until": "2026-08-01T00:00:00Z"}}]), "spec.steps[0].wait: exactly one of duration or until must be set"),
    ("wait-with-neither", setting(steps=[{"id": "w", "type": "wait", "wait": {}}]), "spec.steps[0].wait: exactly one of duration or until must be set"),
    ("escalate-on-pod-step", at("steps.0.onTimeout", "escalate"), "spec.steps[0]: step 'probe': onTimeout escalate and approve apply only to approval steps"),
    ("unknown-step-type", at("steps.0.type", "lambda"), "spec.steps[0].type: Input should be 'pod', 'approval', 'wait' or 'task'"),
    ("uppercase-step-id", at("steps.0.id", "Probe"), "spec.steps[0].id: String should match pattern"),
    ("step-id-too-long", at("steps.0.id", "p" * 64), "spec.steps[0].id: String should have at most 63 characters"),
    ("unknown-on-timeout", at("steps.2.onTimeout", "panic"), "spec.steps[2].onTimeout: Input should be 'fail', 'skip', 'escalate' or 'approve'"),
    ("unknown-on-error", at("steps.0.onError", "ignore"), "spec.steps[0].onError: Input should be 'retry', 'skip', 'fail' or 'compensate'"),
    ("unknown-on-failure", setting(onFailure="retry"), "spec.onFailure: Input should be 'fail' or 'compensate'"),
    ("bad-step-timeout", at("steps.2.timeout", "3 days"), "spec.steps[2].timeout: invalid duration '3 days'"),
    ("approval-without-approvers", at("steps.2.approval.approvers", []), "spec.steps[2].approval.approvers: List should have at least 1 item"),
    ("zero-escalation-delay", at("steps.2.approval.escalation", [{"after": "0s", "approvers": ["group:leads"]}]), "spec.steps[2].approval.escalation[0].after: duration '0s' must be greater than zero"),
    ("no-steps", setting(steps=[]), "spec.steps: List should have at least 1 item"),
    ("steps-and-definition", setting(definitionRef={"name": "video-publish", "version": 7}), "spec: exactly one of steps or definitionRef must be set"),
    ("neither-steps-nor-definition", removing("steps"), "spec: exactly one of steps or definitionRef must be set"),
    ("definition-version-zero", replacing("steps", definitionRef={"name": "video-publish", "version": 0}), "spec.definitionRef.version: Input should be greater than or equal to 1"),
    ("parameter-not-a-string", setting(parameters={"retries": 3}), "spec.parameters.retries: Input should be a valid string"),
    ("too-many-steps", setting(steps=[pod_step(f"s{index}") for index in range(201)]), "spec.steps: List should have at most 200 items"),
]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [pytest.param(edit, expected, id=name) for name, edit, expected in WORKFLOW_ERRORS],
)
def test_a_bad_workflow_is_rejected_naming_the_field(edit: Edit, expected: str) -> None:
    assert expected in errors_of(WorkflowSpec, with_changes(VIDEO_PUBLISH, edit))


DEFINITION_ERRORS = [
    ("no-versions", setting(versions=[]), "spec.versions: List should have at least 1 item"),
    ("duplicate-version", at("versions", DEFINITION["versions"] * 2), "spec.versions: duplicate version 7"),
    ("version-zero", at("versions.0.version", 0), "spec.versions[0].version: Input should be greater than or equal to 1"),
    ("version-without-steps", dropping("versions.0.steps"), "spec.versions[0].steps: Field required"),
    ("version-with-cycle", at("versions.0.steps", [pod_step("a", "a")]), "spec.versions[0].steps[0]: step 'a': a step cannot depend on itself"),
]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [pytest.param(edit, expected, id=name) for name, edit, expected in DEFINITION_ERRORS],
)
def test_a_bad_definition_is_rejected_naming_the_field(edit: Edit, expected: str) -> None:
    assert expected in errors_of(WorkflowDefinitionSpec, with_changes(DEFINITION, edit))


BUCKET_ERRORS = [
    ("minute-with-seconds", setting(minute="2026-08-01T02:00:30Z"), "spec.minute: minute must be a whole minute in UTC"),
    ("minute-not-utc", setting(minute="2026-08-01T03:00:00+01:00"), "spec.minute: minute must be a whole minute in UTC"),
    ("negative-shard", setting(shard=-1), "spec.shard: Input should be greater than or equal to 0"),
    ("duplicate-key", at("occurrences", BUCKET["occurrences"] * 2), "spec.occurrences: duplicate occurrence key '0b4f-uid@2026-08-01T02:00:00Z'"),
    ("occurrence-without-fire-time", dropping("occurrences.0.fireAt"), "spec.occurrences[0].fireAt: Field required"),
]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [pytest.param(edit, expected, id=name) for name, edit, expected in BUCKET_ERRORS],
)
def test_a_bad_bucket_is_rejected_naming_the_field(edit: Edit, expected: str) -> None:
    assert expected in errors_of(ScheduleBucketSpec, with_changes(BUCKET, edit))


# --------------------------------------------------------------------------------------------
# The step graph


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        pytest.param({"a": [], "b": ["a"], "c": ["a", "b"]}, None, id="diamond-free-dag"),
        pytest.param({"a": ["a"]}, ["a", "a"], id="self-loop"),
        pytest.param({"a": ["b"], "b": ["c"], "c": ["a"]}, ["a", "b", "c", "a"], id="three-cycle"),
        pytest.param({"x": [], "a": ["b"], "b": ["x", "a"]}, ["a", "b", "a"], id="cycle-beside-a-dag"),
        pytest.param({"a": ["missing"]}, None, id="unknown-ids-ignored"),
    ],
)
def test_find_cycle(graph: dict[str, list[str]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle


def test_find_cycle_handles_deep_chains_without_recursion() -> None:
    chain = {f"s{index}": [f"s{index + 1}"] for index in range(5000)}
    chain["s5000"] = ["s0"]
    found = find_cycle(chain)
    assert found is not None and found[0] == found[-1] == "s0" and len(found) == 5002
