"""Steering a workflow: `approve`, `reject`, `retry`, `complete` and `cancel` WF [STEP].

    kubectl vigil approve WF STEP --reason TEXT
    kubectl vigil reject WF STEP --reason TEXT
    kubectl vigil retry WF STEP [--reason TEXT]
    kubectl vigil complete WF STEP --output JSON [--reason TEXT]
    kubectl vigil cancel WF [--reason TEXT]             (cancel --workflow WF to skip the lookup)

People steer a Workflow only through its `spec.requests`, an append-only list
the operator turns into history inputs (vigil.kube.controllers.workflows). Each verb
appends one item signed with the caller's own identity, as the API server
knows it (a SelfSubjectReview): admission refuses an item whose `by` is not its
writer, so the CLI never guesses a name. The append is a JSON Patch whose first
operation tests the resourceVersion that was read, so "add to the list" and
"create the list" cannot race another writer; a failed test (a 422 after which
the workflow reads at a new resourceVersion) reads again and tries again. Whatever admission refuses (approve without the RBAC verb
`approve`, retry without `retry`, say) is printed as the API server says it, with a hint naming
the role that grants the verb, exit 1.

Then the verb waits (`--wait`, the default, up to `--timeout` seconds) until the
operator has recorded the request in `status.history` and says what it came
to: recorded as the input it asked for, or refused (`RequestRefused`, exit 1).
The pure parts — the item, the patch, reading the outcome from a history — are
functions of their inputs; the clock and the sleep are passed in.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from vigil.cli.cluster import Cluster, Identity, add_namespace_options
from vigil.cli.errors import BadInput, Contention, Refused, server_message
from vigil.cli.output import add_output_option, emit_as
from vigil.core.conditions import ConditionType
from vigil.core.ports import Conflict
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import INPUTS, Event, Record, records_from_data
from vigil.kube.kits.conflicts import retry_on_conflict
from vigil.model import GROUP, VERSION
from vigil.model.names import WORKFLOWS
from vigil.model.workflow import (
    MESSAGE_ACTION_VERBS,
    MESSAGE_APPROVE_VERB,
    MESSAGE_COMPLETE_APPROVAL_VERB,
    REQUEST_GROUPS_MAX_ITEMS,
    RequestAction,
    WorkflowRequest,
    check_json_text,
)

#: Conditional appends tried before giving up on a workflow that keeps changing.
#: How long a verb waits for the operator to record its request, by default (seconds).
DEFAULT_WAIT_SECONDS = 30.0
#: Between two reads of the workflow while waiting (seconds): a person is waiting, the
#: operator records a request within one pass.
POLL_SECONDS = 0.5
REQUEST_ID_PREFIX = "r-"
#: Random base32 characters in a request id: 50 bits, so two people never pick the same one.
REQUEST_ID_RANDOM_CHARS = 10
JSON_PATCH = "application/json-patch+json"
APPROVER_ROLE_HINT = (
    "a RoleBinding to the chart's <release>-workflow-approver ClusterRole grants it"
)
EDITOR_ROLE_HINT = (
    "the built-in edit role grants it (the chart's <release>-edit ClusterRole is aggregated into it)"
)

#: The command-line argument a request field comes from, for messages about it.
ARGUMENT_OF = {"step": "STEP", "reason": "--reason", "output": "--output", "by": "user name"}
#: How each action reads once it is done: "approved step S of workflow/W".
DONE = {
    RequestAction.APPROVE: "approved {target}",
    RequestAction.REJECT: "rejected {target}",
    RequestAction.RETRY: "retry requested for {target}",
    RequestAction.COMPLETE: "completed {target} by hand",
    RequestAction.CANCEL: "cancel requested for {target}",
}


@dataclasses.dataclass(frozen=True)
class Ask:
    """What the user asked of which workflow, before it becomes a request item."""

    action: RequestAction
    workflow: str
    namespace: str
    step: str | None = None
    reason: str | None = None
    output: str | None = None

    @property
    def target(self) -> str:
        where = f"workflow/{self.workflow}"
        return where if self.step is None else f"step {self.step} of {where}"

    def describe(self) -> str:
        """The request in words: "approve step publish of workflow/video-1"."""
        return f"{self.action} {self.target}"

    def done(self) -> str:
        """What happened, in words: "approved step publish of workflow/video-1"."""
        return DONE[self.action].format(target=self.target)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the operator recorded for one request: the input, a refusal, and what followed."""

    recorded: Record
    refusal: Record | None
    followed: tuple[Record, ...]


# --- the request item -------------------------------------------------------------------------


def new_request_id(random_bytes: Callable[[int], bytes] = secrets.token_bytes) -> str:
    """`r-` and 10 random lowercase base32 characters: a DNS label, unique in practice."""
    text = base64.b32encode(random_bytes(8)).decode().rstrip("=").lower()
    return REQUEST_ID_PREFIX + text[:REQUEST_ID_RANDOM_CHARS]


def checked_output(text: str) -> str:
    """`--output` as given, if it is one strict JSON value; BadInput saying why not."""
    try:
        return check_json_text(text)
    except ValueError as err:
        raise BadInput(f"--output: {err}") from None


def request_item(ask: Ask, *, identity: Identity, request_id: str, at: datetime) -> dict[str, Any]:
    """The `spec.requests` item for `ask`, signed by `identity`; BadInput if the CRD would refuse it."""
    item: dict[str, Any] = {"id": request_id, "action": str(ask.action)}
    if ask.step is not None:
        item["step"] = ask.step
    item["by"] = identity.username
    if identity.groups:
        item["byGroups"] = list(identity.groups[:REQUEST_GROUPS_MAX_ITEMS])
    if ask.reason:
        item["reason"] = ask.reason
    if ask.output is not None:
        item["output"] = checked_output(ask.output)
    item["at"] = format_rfc3339(at)
    try:
        WorkflowRequest.model_validate(item)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "request"
        raise BadInput(f"{ARGUMENT_OF.get(field, field)}: {first['msg']}") from None
    return item


def append_patch(obj: Mapping[str, Any], item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A JSON Patch that appends `item` to spec.requests only if `obj` is still current."""
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]}
    spec = obj.get("spec") or {}
    if "requests" in spec:
        return [test, {"op": "add", "path": "/spec/requests/-", "value": dict(item)}]
    return [test, {"op": "add", "path": "/spec/requests", "value": [dict(item)]}]


def known_steps(obj: Mapping[str, Any]) -> list[str] | None:
    """The workflow's step ids: the pinned definition's, else the inline spec's; None if unknown yet."""
    pinned = (obj.get("status") or {}).get("definition") or {}
    steps = pinned.get("steps") or (obj.get("spec") or {}).get("steps")
    return None if steps is None else [str(step.get("id")) for step in steps]


def check_step(obj: Mapping[str, Any], ask: Ask) -> None:
    """BadInput if the workflow's definition is known and has no step `ask.step`."""
    steps = known_steps(obj)
    if ask.step is None or steps is None or ask.step in steps:
        return
    raise BadInput(
        f'workflow "{ask.workflow}" in namespace "{ask.namespace}" has no step "{ask.step}" '
        f"(its steps: {', '.join(steps)})"
    )


# --- appending --------------------------------------------------------------------------------


def _changed_since(cluster: Cluster, ask: Ask, version: str) -> bool:
    """Whether the workflow's resourceVersion is no longer `version`.

    A failed JSON Patch test is a bare 422 ("the server rejected our request due to an error
    in our request"), as is any other invalid patch: reading again tells the two apart.
    """
    return str(cluster.workflow(ask.workflow, ask.namespace)["metadata"]["resourceVersion"]) != version


def refusal_by_admission(err: ApiException) -> Refused:
    message = server_message(err)
    hint = ""
    if MESSAGE_APPROVE_VERB in message or MESSAGE_COMPLETE_APPROVAL_VERB in message:
        hint = f" ({APPROVER_ROLE_HINT})"
    elif any(words in message for words in MESSAGE_ACTION_VERBS.values()):
        hint = f" ({EDITOR_ROLE_HINT})"
    return Refused(f"the API server refused the request: {message}{hint}")


def append_request(cluster: Cluster, ask: Ask, item: Mapping[str, Any]) -> None:
    """Append `item` to the workflow's spec.requests with a resourceVersion-tested JSON Patch."""

    def append() -> None:
        obj = cluster.workflow(ask.workflow, ask.namespace)
        check_step(obj, ask)
        version = str(obj["metadata"]["resourceVersion"])
        try:
            cluster.custom.patch_namespaced_custom_object(
                GROUP, VERSION, ask.namespace, WORKFLOWS, ask.workflow, append_patch(obj, item),
                _content_type=JSON_PATCH,
            )  # fmt: skip
        except ApiException as err:
            if err.status == 409 or (err.status == 422 and _changed_since(cluster, ask, version)):
                raise Conflict(version) from err  # the resourceVersion test failed: read again, append again
            if err.status == 403:
                raise refusal_by_admission(err) from None
            raise

    try:
        retry_on_conflict(append)
    except Conflict:
        raise Contention(f'workflow "{ask.workflow}" in namespace "{ask.namespace}" kept changing; try again') from None


# --- waiting for the operator -----------------------------------------------------------------


def outcome_of(history: Sequence[Mapping[str, Any]], request_id: str) -> Outcome | None:
    """What the history says became of request `request_id`; None if it is not recorded yet."""
    records = records_from_data(history)
    index = next(
        (i for i, r in enumerate(records) if r.is_input and r.detail.get("request") == request_id), None
    )
    if index is None:
        return None
    record, refusal, followed = records[index], None, []
    for later in records[index + 1 :]:
        if later.event in INPUTS:
            break
        if later.event is Event.REQUEST_REFUSED and later.detail.get("request") == request_id:
            refusal = later
        else:
            followed.append(later)
    return Outcome(record, refusal, tuple(followed))


def invalid_message(obj: Mapping[str, Any]) -> str | None:
    """The message of a true Invalid condition: the operator acts on no request then."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == ConditionType.INVALID and condition.get("status") == "True":
            return str(condition.get("message") or "(no message)")
    return None


def wait_recorded(
    read: Callable[[], Mapping[str, Any]],
    request_id: str,
    *,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome | None:
    """Read the workflow until its history records `request_id`; None after `timeout` seconds.

    Refused at once if the workflow is Invalid: the operator records nothing until it is fixed.
    """
    deadline = clock() + timeout
    while True:
        obj = read()
        found = outcome_of((obj.get("status") or {}).get("history") or [], request_id)
        if found is not None:
            return found
        invalid = invalid_message(obj)
        if invalid is not None:
            raise Refused(f"the workflow is Invalid, so the operator acts on no request: {invalid}")
        if clock() >= deadline:
            return None
        sleep(POLL_SECONDS)


def _record_text(record: Record) -> str:
    return str(record.event) if record.step is None else f"{record.event} {record.step}"


def report(ask: Ask, request_id: str, outcome: Outcome) -> list[str]:
    """What the operator made of the request, in lines; Refused if it turned it down."""
    if outcome.refusal is not None:
        detail = outcome.refusal.detail
        why = str(detail.get("reason") or "Refused")
        if detail.get("message"):
            why += f": {detail['message']}"
        raise Refused(f"request {request_id} ({ask.describe()}) was refused by the operator: {why}")
    lines = [f"{ask.done()} (recorded as {outcome.recorded.event})"]
    if outcome.followed:
        lines.append("then: " + ", ".join(_record_text(record) for record in outcome.followed))
    return lines


def not_recorded(ask: Ask, request_id: str, timeout: float) -> Refused:
    return Refused(
        f"request {request_id} ({ask.describe()}) is in spec.requests, but the operator has not "
        f"recorded it within {timeout:g}s (is it running?); it acts on it when it next passes: "
        f"`kubectl vigil timeline {ask.workflow} --events` shows it then"
    )


# --- the verbs --------------------------------------------------------------------------------


def run(cluster: Cluster, ask: Ask, *, wait: bool, timeout: float, output: str = "table") -> int:
    """Append the request for `ask`, then (with `wait`) print what the operator made of it
    (as text, or for `output` json/yaml as data)."""
    if ask.output is not None:
        checked_output(ask.output)  # before any call: a typo costs no round trip
    request_id = new_request_id()
    item = request_item(ask, identity=cluster.whoami(), request_id=request_id, at=datetime.now(UTC))
    append_request(cluster, ask, item)
    data: dict[str, Any] = {
        "namespace": ask.namespace, "workflow": ask.workflow, "step": ask.step, "action": str(ask.action),
        "requestId": request_id, "recorded": None, "followed": [],
    }  # fmt: skip
    if not wait:
        text = f"requested: {ask.describe()} (request {request_id}; not waiting for the operator)"
        return emit_as(output, data, text)
    outcome = wait_recorded(
        lambda: cluster.workflow(ask.workflow, ask.namespace), request_id, timeout=timeout
    )
    if outcome is None:
        raise not_recorded(ask, request_id, timeout)
    lines = report(ask, request_id, outcome)
    data["recorded"] = str(outcome.recorded.event)
    data["followed"] = [_record_text(record) for record in outcome.followed]
    return emit_as(output, data, "\n".join(lines))


def ask_from(args: argparse.Namespace, action: RequestAction, *, workflow: str, namespace: str) -> Ask:
    return Ask(
        action=action,
        workflow=workflow,
        namespace=namespace,
        step=getattr(args, "step", None),
        reason=args.reason,
        output=args.output if action is RequestAction.COMPLETE else None,  # complete's --output: the step's
    )


def request(
    args: argparse.Namespace, action: RequestAction, *, workflow: str, cluster: Cluster | None = None
) -> int:
    """Run one verb on the workflow named `workflow` (retry and cancel come here from interventions)."""
    cluster = cluster or Cluster()
    ask = ask_from(args, action, workflow=workflow, namespace=cluster.namespace(args.namespace))
    output = "table" if action is RequestAction.COMPLETE else args.output
    return run(cluster, ask, wait=args.wait, timeout=args.timeout, output=output)


def _command(action: RequestAction) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        return request(args, action, workflow=args.workflow)

    return command


def add_wait_options(parser: argparse.ArgumentParser) -> None:
    """--wait/--no-wait and --timeout: whether and how long to wait for the operator."""
    parser.add_argument(
        "--wait", action=argparse.BooleanOptionalAction, default=True,
        help="wait until the operator has recorded the request, and say what it came to (default)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_WAIT_SECONDS, metavar="SECONDS",
        help=f"how long to wait (default {DEFAULT_WAIT_SECONDS:g})",
    )  # fmt: skip


def add_parsers(sub: Any) -> None:
    """Register approve, reject and complete; retry and cancel share their verbs with executions."""
    verbs = [
        (RequestAction.APPROVE, "approve a step waiting for approval"),
        (RequestAction.REJECT, "reject a step waiting for approval (the step fails)"),
        (RequestAction.COMPLETE, "complete a step by hand, with its output"),
    ]
    for action, help_text in verbs:
        parser = sub.add_parser(str(action), help=help_text)
        parser.add_argument("workflow", help="a Workflow")
        parser.add_argument("step", help="the step's id")
        decision = action in (RequestAction.APPROVE, RequestAction.REJECT)
        parser.add_argument("--reason", required=decision, help="why, for the record")
        if action is RequestAction.COMPLETE:
            parser.add_argument("--output", required=True, metavar="JSON", help="the step's output (JSON text)")
        else:
            add_output_option(parser)
        add_wait_options(parser)
        add_namespace_options(parser)
        parser.set_defaults(func=_command(action))
