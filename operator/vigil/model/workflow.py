"""The Workflow and WorkflowDefinition resources: a DAG of steps, and versioned DAGs to start from.

A Workflow is one instance of a DAG. Its steps have stable ids (never positions: history is
keyed by step id, so a renamed step is a different step). What the API server can check — the
shape of each step, unique ids, a pod step having a pod template — is a CEL rule or schema
constraint here; what it cannot — that every ``dependsOn`` names a step and that the steps form
no cycle — is a pydantic validator, reported by the operator as an ``Invalid`` condition.

``spec.requests`` is how people steer a running workflow (approve, reject, retry, complete,
cancel): an append-only list written by ``kubectl vigil approve|reject|...``. Three layers guard
it. The CRD makes each item immutable once written (a transition rule correlated by the item's
``id``) and the list append-only (transition rules keeping every old id, and the list itself);
the ValidatingAdmissionPolicy in ``helm/vigil/files/admission/workflow-requests.yaml`` checks
that a new item's ``by`` and ``byGroups`` are the writer's own and that each action comes from
someone holding its RBAC verb (``approve`` for approve and reject, and for a complete of an
approval step; ``retry``, ``complete``, ``cancel``); the models here check what neither can
(``output`` is JSON). :func:`added_requests`, :func:`check_requests_unchanged` and
:func:`check_requests_kept` are the Python twins of the policy's and the transition rules' view
of an update.

A WorkflowDefinition's versions are immutable in the one way that matters to running
workflows: a step, once in a version, is never removed or renamed there (a transition rule;
:func:`check_definition_update` is its twin). Adding steps or versions is fine.

The status is mostly the orchestrator's data (pinned definition, history, folded step states),
kept as free-form objects so that its format can evolve without a CRD change.

Sizes. A Workflow is one etcd object, refused past 1.5 MB, so every list and string that grows
has a bound: the spec's by ``maxItems``/``maxLength`` (and the requests' text by a total, a CEL
rule); the status's by the engine, which keeps at most :data:`HISTORY_MAX_ITEMS` history entries
and moves older ones, and large step outputs, to the history database with a checkpoint of
their folded state and a digest in their place (:mod:`vigil.core.checkpoint`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from vigil.core.workflow import (
    OUTPUT_MAX_BYTES,
    ErrorAction,
    FailureAction,
    StepKind,
    TimeoutAction,
)
from vigil.core.workflow import WorkflowPhase as CoreWorkflowPhase
from vigil.core.workflowpass import HISTORY_MAX_ITEMS
from vigil.model.common import (
    AGE_COLUMN,
    DNS_LABEL_PATTERN,
    CelRule,
    Condition,
    Duration,
    ObjectName,
    PodTemplate,
    PositiveDuration,
    PrinterColumn,
    ResourceKind,
    RetryPolicy,
    SpecModel,
    StatusModel,
    Timestamp,
    cel_rules,
    conditions_field,
)
from vigil.model.names import WORKFLOW_DEFINITIONS, WORKFLOWS
from vigil.model.steps import BLOCKS
from vigil.model.steps.approval import APPROVERS_MAX_ITEMS as APPROVERS_MAX_ITEMS
from vigil.model.steps.approval import ESCALATION_MAX_ITEMS as ESCALATION_MAX_ITEMS
from vigil.model.steps.approval import Approval as Approval
from vigil.model.steps.approval import Approver as Approver
from vigil.model.steps.approval import Escalation as Escalation
from vigil.model.steps.approval import Exhausted as Exhausted
from vigil.model.steps.task import TaskCall as TaskCall
from vigil.model.steps.wait import MESSAGE_WAIT_DURATION_OR_UNTIL as MESSAGE_WAIT_DURATION_OR_UNTIL
from vigil.model.steps.wait import Wait as Wait

#: Most steps one workflow may have.
STEPS_MAX_ITEMS = 200
#: Most versions one WorkflowDefinition keeps. Workflows copy their version into status at
#: start, so old versions can be deleted at any time; the bound also keeps the CEL cost
#: estimate (versions x steps x escalations) within the API server's budget.
DEFINITION_VERSIONS_MAX_ITEMS = 50

#: A step id: lowercase letters, digits, '-' and '_', starting and ending with a letter or digit.
#: Underscores are allowed (``encode_480``); anything that puts a step id into a Kubernetes name
#: must map them.
STEP_ID_PATTERN = r"^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"
STEP_ID_MAX_LENGTH = 63

StepId = Annotated[str, StringConstraints(pattern=STEP_ID_PATTERN, max_length=STEP_ID_MAX_LENGTH)]

#: Most requests one workflow may hold. Bounds the object's size (a request's output may be
#: 32 KiB) and the CEL cost of the immutability rule and the admission policy.
REQUESTS_MAX_ITEMS = 500
#: Longest request id; ids are DNS labels, so a CLI can derive them from names and time.
REQUEST_ID_MAX_LENGTH = 63
#: Longest user or group name in a request (Kubernetes user names are at most this long in
#: practice: a service account's is ``system:serviceaccount:<ns>:<name>``).
REQUEST_USER_MAX_LENGTH = 253
#: Most groups one request may claim.
REQUEST_GROUPS_MAX_ITEMS = 50
#: Longest reason text.
REQUEST_REASON_MAX_LENGTH = 1024
#: Longest ``output`` (JSON text) of a complete request: a step output is at most 4 KiB (a pod's
#: termination message), and the operator keeps no more of it.
REQUEST_OUTPUT_MAX_LENGTH = OUTPUT_MAX_BYTES
#: Most characters of ``output`` and ``reason`` over all requests of a workflow together: with
#: the per-item bounds, the whole list stays far below etcd's object limit.
REQUESTS_TEXT_MAX_LENGTH = 128 * 1024
#: Most parameters of a workflow, and the longest value (they reach each pod's environment).
PARAMETERS_MAX_ITEMS = 64
PARAMETER_VALUE_MAX_LENGTH = 4096

MESSAGE_STEPS_OR_DEFINITION = "exactly one of steps or definitionRef must be set"
MESSAGE_SELF_DEPENDENCY = "a step cannot depend on itself"
MESSAGE_ESCALATE_NEEDS_APPROVAL = "onTimeout escalate and approve apply only to approval steps"
MESSAGE_REQUEST_NEEDS_STEP = "step is required unless action is cancel"
MESSAGE_OUTPUT_ONLY_ON_COMPLETE = "output is allowed only with action complete"
_IMMUTABLE_REASON = "cannot be changed once written; append a new request (with a new id) instead"
MESSAGE_REQUEST_IMMUTABLE = f"a request {_IMMUTABLE_REASON}"
MESSAGE_DEFINITION_STEPS_KEPT = "steps cannot be removed or renamed; add a new version"

# What the workflow-requests ValidatingAdmissionPolicy says (the policy file carries the same
# words, and a test holds them together): the CLI can recognise a refusal by them.
#: ``by`` of a new request is not the writer's user name.
MESSAGE_BY_IS_WRITER = "must be the user name of whoever writes the request"
#: A ``byGroups`` entry of a new request is not one of the writer's groups.
MESSAGE_GROUPS_OF_WRITER = "must be a group of whoever writes the request"
#: A new approve or reject request from someone without the ``approve`` verb.
MESSAGE_APPROVE_VERB = (
    "approving or rejecting a step needs the 'approve' verb on workflows.vigil.dev"
)
#: A new complete request for an approval step from someone without the ``approve`` verb.
MESSAGE_COMPLETE_APPROVAL_VERB = (
    "completing an approval step needs the 'approve' verb on workflows.vigil.dev"
)
#: A new retry, complete or cancel request from someone without the verb of that name.
MESSAGE_ACTION_VERBS = {
    "retry": "retrying a step needs the 'retry' verb on workflows.vigil.dev",
    "complete": "completing a step needs the 'complete' verb on workflows.vigil.dev",
    "cancel": "cancelling needs the 'cancel' verb on workflows.vigil.dev",
}
#: A write that removes a request (or the whole list).
MESSAGE_REQUESTS_APPEND_ONLY = (
    "requests cannot be removed: the list is append-only, so it keeps who asked for what"
)


# The step and workflow policies are the core's own enums (``vigil.core.workflow``), so the
# spec and the orchestrator cannot disagree on a value.
#: What a step does.
StepType = StepKind
#: What happens when a step's timeout passes.
OnTimeout = TimeoutAction
#: What happens when a step fails.
OnError = ErrorAction
#: What happens when the workflow fails.
OnFailure = FailureAction
#: Where a workflow is in its life.
WorkflowPhase = CoreWorkflowPhase


def _type_block_rule(step_type: StepType, block: str) -> CelRule:
    """A step of ``step_type`` has ``block``, and no other step type has it."""
    return CelRule(
        rule=f"(self.type == '{step_type}') == has(self.{block})",
        message=f"{block} is required on {step_type} steps and allowed on no other type",
        field_path=f".{block}",
    )


#: Which block each step type needs (and no other type may carry).
STEP_TYPE_BLOCKS = {step_type: block.field for step_type, block in BLOCKS.items()}

_STEP_RULES = cel_rules(
    *(_type_block_rule(step_type, block) for step_type, block in STEP_TYPE_BLOCKS.items()),
    CelRule(
        rule="!has(self.dependsOn) || !(self.id in self.dependsOn)",
        message=MESSAGE_SELF_DEPENDENCY,
        field_path=".dependsOn",
    ),
    CelRule(
        rule="!(self.onTimeout in ['escalate', 'approve']) || self.type == 'approval'",
        message=MESSAGE_ESCALATE_NEEDS_APPROVAL,
        field_path=".onTimeout",
    ),
)


class Step(SpecModel, json_schema_extra=_STEP_RULES):
    """One step of a workflow: a pod to run, an approval to wait for, a timer, or a task on a
    TaskQueue."""

    id: StepId = Field(
        description="The step's stable name: history and status are keyed by it, so renaming a "
        "step makes it a different step. Lowercase letters, digits, '-' and '_'."
    )
    depends_on: list[StepId] = Field(
        default_factory=list,
        max_length=STEPS_MAX_ITEMS,
        description="Ids of the steps that must finish (succeed or be skipped) before this one "
        "starts.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    type: StepType = Field(
        description="pod runs `template`; approval waits for a decision; wait is a timer; task "
        "runs `task` on a TaskQueue (needs the operator's queue.dsn)."
    )
    template: PodTemplate | None = Field(default=None, description="The pod to run (pod steps).")
    approval: Approval | None = Field(default=None, description="Who approves (approval steps).")
    wait: Wait | None = Field(default=None, description="What to wait for (wait steps).")
    task: TaskCall | None = Field(
        default=None,
        description="The task to run on a TaskQueue of the workflow's namespace (task steps): each "
        "attempt is an attempt of one queue execution whose id and idempotency key are the "
        "step's execution id; its end is the step's result.",
    )
    retry: RetryPolicy | None = Field(
        default=None,
        description="Retries of a failing pod or task step; unset means the defaults (3 attempts, "
        "backoff 10s doubling up to 10m).",
    )
    timeout: PositiveDuration | None = Field(
        default=None,
        description="How long the step may take, from when it starts (all attempts, or the "
        "whole wait for an approval), before onTimeout applies.",
    )
    on_timeout: OnTimeout = Field(
        default=OnTimeout.FAIL,
        description="When the timeout passes: fail the step, skip it, escalate the approval to "
        "the next level, or approve it (the last two for approval steps only).",
    )
    on_error: OnError = Field(
        default=OnError.RETRY,
        description="When the step fails: retry it (per `retry`; once attempts run out it "
        "fails the workflow), skip it and carry on, fail the workflow at once, or compensate "
        "(run the compensate pods of the finished steps, as onFailure: compensate does).",
    )
    compensate: PodTemplate | None = Field(
        default=None,
        description="A pod that compensates for this step's effects (a business event, not an "
        "undo), run when the workflow is compensated after this step succeeded.",
    )
    expected_duration: PositiveDuration | None = Field(
        default=None,
        description="How long the step normally takes; the watchdog reports a step running "
        "much longer.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        for step_type, block in STEP_TYPE_BLOCKS.items():
            if (self.type == step_type) != (getattr(self, block) is not None):
                raise ValueError(
                    f"step {self.id!r}: {block} is required on {step_type} steps "
                    "and allowed on no other type"
                )
        if self.id in self.depends_on:
            raise ValueError(f"step {self.id!r}: {MESSAGE_SELF_DEPENDENCY}")
        escalating = self.on_timeout in (OnTimeout.ESCALATE, OnTimeout.APPROVE)
        if escalating and self.type != StepType.APPROVAL:
            raise ValueError(f"step {self.id!r}: {MESSAGE_ESCALATE_NEEDS_APPROVAL}")
        return self


def find_cycle(dependencies: dict[str, list[str]]) -> list[str] | None:
    """A cycle in the graph ``step -> dependsOn`` as ``[a, b, ..., a]``, or None.

    Deterministic: steps are explored in the order given, so the same spec always reports the
    same cycle. Ids missing from ``dependencies`` are ignored (reported elsewhere).
    """
    finished: set[str] = set()
    for start in dependencies:
        if start in finished:
            continue
        path: list[str] = [start]
        on_path = {start}
        pending = [iter(dependencies[start])]
        while pending:
            child = next(pending[-1], None)
            if child is None:
                pending.pop()
                finished.add(path[-1])
                on_path.discard(path.pop())
            elif child in on_path:
                return [*path[path.index(child) :], child]
            elif child in dependencies and child not in finished:
                path.append(child)
                on_path.add(child)
                pending.append(iter(dependencies[child]))
    return None


def check_step_graph(steps: Sequence[Step]) -> None:
    """Raise ValueError unless step ids are unique, dependencies known and acyclic."""
    dependencies: dict[str, list[str]] = {}
    for step in steps:
        if step.id in dependencies:
            raise ValueError(f"duplicate step id {step.id!r}")
        dependencies[step.id] = list(step.depends_on)
    for step in steps:
        unknown = [name for name in step.depends_on if name not in dependencies]
        if unknown:
            raise ValueError(f"step {step.id!r} dependsOn unknown step(s): {', '.join(unknown)}")
    cycle = find_cycle(dependencies)
    if cycle is not None:
        raise ValueError(f"steps form a cycle: {' -> '.join(cycle)}")


#: The graph checks of :func:`check_step_graph`, in words, for the reference docs.
_GRAPH_CHECKS = (
    "Every `dependsOn` names a step of the same workflow.",
    "The steps form no cycle; the error names it, e.g. `steps form a cycle: a -> b -> a`.",
    "Step ids are unique (a WorkflowDefinition's also at admission, as its steps are keyed by id).",
)


#: A WorkflowDefinition's steps are keyed by id, so the API server refuses a duplicate id.
KEYED_STEPS = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]}
#: A workflow's (and a workflowTemplate's) steps are one atomic value. The API server checks the
#: whole object on every status write, and it tracks a keyed list's owners field by field: a
#: status write of a 10-step workflow cost it 11-12 ms with keyed steps and 9 ms atomic (its own
#: CPU, 200 writes). A duplicate id is then the operator's to report: Invalid, naming it.
ATOMIC_STEPS = {"x-kubernetes-list-type": "atomic"}


def steps_field(*, required: bool, list_type: dict[str, Any]) -> Any:
    """The ``steps`` field; ``list_type``: KEYED_STEPS or ATOMIC_STEPS."""
    return Field(
        default=... if required else None,
        min_length=1,
        max_length=STEPS_MAX_ITEMS,
        description="The steps. Order does not matter: dependsOn decides what runs when.",
        json_schema_extra=list_type,
    )


class DefinitionRef(SpecModel):
    """Which version of which WorkflowDefinition (in the workflow's namespace) to run."""

    name: ObjectName = Field(description="The WorkflowDefinition's name.")
    version: int = Field(ge=1, description="The definition version to pin.")


_STEPS_OR_DEFINITION_RULE = CelRule(
    rule="has(self.steps) != has(self.definitionRef)", message=MESSAGE_STEPS_OR_DEFINITION
)
_WORKFLOW_RULES = cel_rules(_STEPS_OR_DEFINITION_RULE)
# The list's own rule keeps every old id (items are immutable, so every old item); this one
# keeps the list itself, which a write may leave out altogether.
_WORKFLOW_SPEC_RULES = cel_rules(
    _STEPS_OR_DEFINITION_RULE,
    CelRule(
        rule="has(self.requests) || !has(oldSelf.requests) || size(oldSelf.requests) == 0",
        message=MESSAGE_REQUESTS_APPEND_ONLY,
        field_path=".requests",
    ),
)
MESSAGE_REQUESTS_TEXT = (
    f"the requests' output and reason may hold at most {REQUESTS_TEXT_MAX_LENGTH} characters together"
)
_REQUESTS_RULES = cel_rules(
    CelRule(
        rule="sets.contains(self.map(r, r.id), oldSelf.map(r, r.id))",
        message=MESSAGE_REQUESTS_APPEND_ONLY,
    ),
    CelRule(
        rule="self.map(r, (has(r.output) ? size(r.output) : 0) + (has(r.reason) ? size(r.reason) : 0)).sum()"
        f" <= {REQUESTS_TEXT_MAX_LENGTH}",
        message=MESSAGE_REQUESTS_TEXT,
    ),
)


class RequestAction(StrEnum):
    """What a request asks of the workflow."""

    APPROVE = "approve"
    REJECT = "reject"
    RETRY = "retry"
    COMPLETE = "complete"
    CANCEL = "cancel"


#: The actions that decide an approval step: they need the ``approve`` verb on the workflow.
APPROVAL_ACTIONS = frozenset({RequestAction.APPROVE, RequestAction.REJECT})

RequestId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=REQUEST_ID_MAX_LENGTH, pattern=DNS_LABEL_PATTERN),
]
UserName = Annotated[str, StringConstraints(min_length=1, max_length=REQUEST_USER_MAX_LENGTH)]


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def check_json_text(text: str) -> str:
    """Raise ValueError unless ``text`` is one JSON value (object, array, string, number, ...).

    Strict JSON: Python's extensions ``NaN`` and ``Infinity`` are refused too.
    """
    try:
        json.loads(text, parse_constant=_refuse_constant)
    except ValueError as error:
        raise ValueError(f"not valid JSON: {error}") from None
    return text


_REQUEST_RULES = cel_rules(
    CelRule(
        rule="self.action == 'cancel' || has(self.step)",
        message=MESSAGE_REQUEST_NEEDS_STEP,
        field_path=".step",
        reason="FieldValueRequired",
    ),
    CelRule(
        rule="!has(self.output) || self.action == 'complete'",
        message=MESSAGE_OUTPUT_ONLY_ON_COMPLETE,
        field_path=".output",
        reason="FieldValueForbidden",
    ),
    CelRule(
        rule="self == oldSelf",
        message=MESSAGE_REQUEST_IMMUTABLE,
        message_expression=f"'request ' + self.id + ' {_IMMUTABLE_REASON}'",
    ),
)


class WorkflowRequest(SpecModel, json_schema_extra=_REQUEST_RULES):
    """One lever pulled by a person: approve or reject an approval step, retry a failed step,
    complete a step by hand, or cancel. Written by `kubectl vigil` (approve, reject, retry,
    complete, cancel); immutable once written. Admission checks that `by` and `byGroups` are
    the writer's own and that the writer holds the action's RBAC verb on the workflow."""

    id: RequestId = Field(
        description="The request's unique id (a DNS label, at most 63 characters). The "
        "operator acts on each id once."
    )
    action: RequestAction = Field(
        description="approve or reject an approval step (needs the `approve` verb on "
        "workflows.vigil.dev); retry a failed step (the `retry` verb); complete a step by hand "
        "with an output (the `complete` verb, and `approve` too for an approval step); cancel "
        "the workflow (the `cancel` verb).",
    )
    step: StepId | None = Field(
        default=None,
        description="The id of the step the request acts on. Required unless action is cancel.",
    )
    by: UserName = Field(
        description="Who made the request: must be exactly the Kubernetes user name of whoever "
        "writes it (checked at admission)."
    )
    by_groups: list[UserName] = Field(
        default_factory=list,
        max_length=REQUEST_GROUPS_MAX_ITEMS,
        description="Groups the author acts as, e.g. for approval steps whose approvers name a "
        "group: each must be one of the writer's Kubernetes groups (checked at admission).",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    reason: Annotated[str, StringConstraints(max_length=REQUEST_REASON_MAX_LENGTH)] | None = (
        Field(default=None, description="Why, for the record.")
    )
    output: Annotated[str, StringConstraints(max_length=REQUEST_OUTPUT_MAX_LENGTH)] | None = (
        Field(
            default=None,
            description="The step's output as JSON text (complete only). Text that is not JSON "
            "makes the workflow Invalid.",
        )
    )
    at: Timestamp | None = Field(
        default=None, description="When the request was made (informational; set by the CLI)."
    )

    @field_validator("output")
    @classmethod
    def _output_is_json(cls, output: str | None) -> str | None:
        return None if output is None else check_json_text(output)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.action != RequestAction.CANCEL and self.step is None:
            raise ValueError(f"request {self.id!r}: {MESSAGE_REQUEST_NEEDS_STEP}")
        if self.output is not None and self.action != RequestAction.COMPLETE:
            raise ValueError(f"request {self.id!r}: {MESSAGE_OUTPUT_ONLY_ON_COMPLETE}")
        return self


def added_requests(
    old: Sequence[WorkflowRequest] | None, new: Sequence[WorkflowRequest]
) -> list[WorkflowRequest]:
    """The requests of ``new`` whose id is not in ``old``: what the admission policy checks.

    ``old`` is None on create. A request removed and written again with the same id counts as
    new (and is checked again), exactly as the policy sees it.
    """
    known = {request.id for request in old or ()}
    return [request for request in new if request.id not in known]


def check_requests_kept(old: Sequence[WorkflowRequest], new: Sequence[WorkflowRequest]) -> None:
    """Raise ValueError if a request of ``old`` (by id) is missing from ``new``.

    The twin of the CRD's append-only transition rules: requests may be appended, never
    removed.
    """
    kept = {request.id for request in new}
    missing = [request.id for request in old if request.id not in kept]
    if missing:
        raise ValueError(f"{MESSAGE_REQUESTS_APPEND_ONLY} (missing: {', '.join(missing)})")


def check_requests_unchanged(
    old: Sequence[WorkflowRequest], new: Sequence[WorkflowRequest]
) -> None:
    """Raise ValueError if a request in both ``old`` and ``new`` (by id) differs.

    The twin of the CRD's transition rule on each item: requests may be appended, never
    changed.
    """
    before = {request.id: request for request in old}
    for request in new:
        previous = before.get(request.id)
        if previous is not None and previous != request:
            raise ValueError(f"request {request.id} {_IMMUTABLE_REASON}")


class WorkflowTemplate(SpecModel, json_schema_extra=_WORKFLOW_RULES):
    """A DAG of steps to run once, given inline (steps) or by reference (definitionRef): a
    Workflow's spec without its requests, and what a ScheduledJob's workflowTemplate holds. The
    definition is copied into status when the workflow starts, so later edits of a
    WorkflowDefinition never touch running instances."""

    steps: list[Step] | None = steps_field(required=False, list_type=ATOMIC_STEPS)
    on_failure: OnFailure = Field(
        default=OnFailure.FAIL,
        description="When the workflow fails: just fail, or first run the compensate pods of "
        "the steps that succeeded, in reverse dependency order.",
    )
    parameters: dict[str, Annotated[str, StringConstraints(max_length=PARAMETER_VALUE_MAX_LENGTH)]] = Field(
        default_factory=dict,
        max_length=PARAMETERS_MAX_ITEMS,
        description="Named values for the workflow, made available to its steps' pods.",
    )
    definition_ref: DefinitionRef | None = Field(
        default=None, description="Run a version of a WorkflowDefinition instead of inline steps."
    )
    ttl_after_finished: Duration | None = Field(
        default=None,
        description="How long the workflow stays after it finished (Succeeded, Failed, "
        "Compensated or Cancelled), e.g. 1h or 7d; then it is deleted with its step pods, once "
        "its whole history is in the history database, which keeps it. Unset: the operator's "
        "default (the chart's workflows.ttlAfterFinished, 24h). 0s keeps it forever.",
    )

    @field_validator("steps")
    @classmethod
    def _valid_graph(cls, steps: list[Step] | None) -> list[Step] | None:
        if steps is not None:
            check_step_graph(steps)
        return steps

    @model_validator(mode="after")
    def _steps_or_definition(self) -> Self:
        if (self.steps is None) == (self.definition_ref is None):
            raise ValueError(MESSAGE_STEPS_OR_DEFINITION)
        return self


class WorkflowSpec(WorkflowTemplate, json_schema_extra=_WORKFLOW_SPEC_RULES):
    """A DAG of steps to run once, given inline (steps) or by reference (definitionRef), and the
    requests people have made of it. The definition is copied into status when the workflow
    starts, so later edits of a WorkflowDefinition never touch running instances."""

    requests: list[WorkflowRequest] = Field(
        default_factory=list,
        max_length=REQUESTS_MAX_ITEMS,
        description="Approvals, rejections, retries, manual completions and cancellations, "
        "appended by `kubectl vigil approve|reject|retry|complete|cancel`. Append-only: an "
        "item cannot be changed or removed once written, so the spec keeps who asked for what.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["id"],
            **_REQUESTS_RULES,
        },
    )

    @field_validator("requests")
    @classmethod
    def _unique_request_ids(cls, requests: list[WorkflowRequest]) -> list[WorkflowRequest]:
        seen: set[str] = set()
        for request in requests:
            if request.id in seen:
                raise ValueError(f"duplicate request id {request.id!r}")
            seen.add(request.id)
        return requests


class WorkflowStatus(StatusModel):
    """What the orchestrator knows about the workflow. `history` is the record of truth; the
    rest can be rebuilt from it."""

    # One field to the API server, as a bucket's markers are: the engine is its one writer and
    # writes it whole. Tracked field by field (each step, each key of the pinned definition),
    # every write had the API server rebuild that tracking: a 10-step workflow's status write
    # cost it about 17 ms of CPU, and 14 ms as one field.
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-map-type": "atomic"})

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation last acted on."
    )
    phase: WorkflowPhase | None = Field(default=None, description="Where the workflow is.")
    definition: dict[str, Any] | None = Field(
        default=None,
        description="The definition pinned at start (steps, onFailure, and where it came from).",
    )
    history: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=HISTORY_MAX_ITEMS,
        description="The append-only record of what happened, as plain data; the workflow's "
        "state is a fold over the checkpoint and it. The most recent entries only: older ones "
        "are in the history database (historyMirrored counts those written there).",
    )
    checkpoint: dict[str, Any] | None = Field(
        default=None,
        description="The state the oldest history entries fold into, once they left the status "
        "for the history database: seq (how many), digest (SHA-256 chained over them) and state.",
    )
    history_mirrored: int | None = Field(
        default=None,
        ge=0,
        description="How many history entries, from the first, are written to the history "
        "database.",
    )
    steps: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        max_length=STEPS_MAX_ITEMS,
        description="The folded state of each step, by step id.",
    )
    progress: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        default=None, description="Finished steps out of all steps, e.g. 3/6."
    )
    current: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        default=None, description="The step(s) running or waiting now."
    )
    started_at: Timestamp | None = Field(default=None, description="When the workflow started.")
    finished_at: Timestamp | None = Field(default=None, description="When it finished.")
    conditions: list[Condition] = conditions_field()


WORKFLOW = ResourceKind(
    kind="Workflow",
    plural=WORKFLOWS,
    short_names=("vwf",),
    spec_model=WorkflowSpec,
    status_model=WorkflowStatus,
    description="A Workflow runs a DAG of steps (pods, approvals, timers) once, durably: it "
    "resumes after any operator restart without re-running finished steps.",
    printer_columns=(
        PrinterColumn(name="Phase", json_path=".status.phase", description="Where it is."),
        PrinterColumn(name="Progress", json_path=".status.progress", description="Steps done."),
        PrinterColumn(name="Current", json_path=".status.current", description="Running now."),
        AGE_COLUMN,
    ),
    operator_checks=(
        *_GRAPH_CHECKS,
        "`requests[].output` is JSON text.",
        "Request ids are unique (also enforced at admission, as the list is keyed by id).",
    ),
)


# A transition rule: the versions list is keyed by `version`, so oldSelf is the same version as
# it was. Written with the sets library rather than `all(exists(...))`: the API server estimates
# the nested loop at 200 x 200 comparisons per version and refuses it (6.8x over budget), while
# sets.contains is estimated linearly. The message is formatted with `format` because the cost
# of `string(int)` is estimated as unbounded.
_VERSION_RULES = cel_rules(
    CelRule(
        rule="sets.contains(self.steps.map(t, t.id), oldSelf.steps.map(s, s.id))",
        message=MESSAGE_DEFINITION_STEPS_KEPT,
        message_expression=f"'version %d: {MESSAGE_DEFINITION_STEPS_KEPT}'.format([self.version])",
    )
)


class DefinitionVersion(SpecModel, json_schema_extra=_VERSION_RULES):
    """One version of a workflow definition. Workflows pin a version when they start; within
    a version, steps may be added but never removed or renamed: add a new version instead."""

    version: int = Field(ge=1, description="The version number, referenced by definitionRef.")
    steps: list[Step] = steps_field(required=True, list_type=KEYED_STEPS)
    on_failure: OnFailure = Field(
        default=OnFailure.FAIL, description="The workflow's onFailure for this version."
    )

    @field_validator("steps")
    @classmethod
    def _valid_graph(cls, steps: list[Step]) -> list[Step]:
        check_step_graph(steps)
        return steps


class WorkflowDefinitionSpec(SpecModel):
    """Named, versioned workflow DAGs. Workflows pin one version when they start; add a new
    version rather than editing one that running workflows may use."""

    versions: list[DefinitionVersion] = Field(
        min_length=1,
        max_length=DEFINITION_VERSIONS_MAX_ITEMS,
        description="The versions, each with its steps.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["version"],
        },
    )

    @field_validator("versions")
    @classmethod
    def _unique_versions(cls, versions: list[DefinitionVersion]) -> list[DefinitionVersion]:
        seen: set[int] = set()
        for entry in versions:
            if entry.version in seen:
                raise ValueError(f"duplicate version {entry.version}")
            seen.add(entry.version)
        return versions

    def version(self, number: int) -> DefinitionVersion | None:
        """The version numbered ``number``, if this definition has it."""
        return next((entry for entry in self.versions if entry.version == number), None)


def check_definition_update(old: WorkflowDefinitionSpec, new: WorkflowDefinitionSpec) -> None:
    """Raise ValueError if a version in both ``old`` and ``new`` lost a step id.

    The twin of the CRD's transition rule on each version: steps may be added to a version,
    and versions added or deleted, but a step is never removed from or renamed in a version.
    """
    for before in old.versions:
        after = new.version(before.version)
        if after is None:
            continue
        kept = {step.id for step in after.steps}
        missing = [step.id for step in before.steps if step.id not in kept]
        if missing:
            raise ValueError(
                f"version {before.version}: {MESSAGE_DEFINITION_STEPS_KEPT} "
                f"(missing: {', '.join(missing)})"
            )


class WorkflowDefinitionStatus(StatusModel):
    """What the operator reports about a definition."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation last checked."
    )
    conditions: list[Condition] = conditions_field()


WORKFLOW_DEFINITION = ResourceKind(
    kind="WorkflowDefinition",
    plural=WORKFLOW_DEFINITIONS,
    short_names=("vwfd",),
    spec_model=WorkflowDefinitionSpec,
    status_model=WorkflowDefinitionStatus,
    description="A WorkflowDefinition holds named, versioned workflow DAGs that Workflows "
    "(and ScheduledJobs' workflowTemplate) start from with definitionRef.",
    printer_columns=(AGE_COLUMN,),
    operator_checks=(*_GRAPH_CHECKS, "Version numbers are unique."),
)
