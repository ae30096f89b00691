"""Where a workflow stands: `timeline WF`, a row per step, and `timeline WF --events`, its history.

    kubectl vigil timeline WF [--events] [-n NS] [--api-url URL]

Both read `status.history`, the workflow's record of truth, and fold it with the
core's own `fold` over the pinned definition (`status.definition`): the state
shown is the state the operator acts on, not the summary it last wrote to
`status.steps`. Steps come in definition order. The details that state does
not keep — who approved and why, the last failure of a step that later
succeeded, a retry asked for by hand — are read from the step's records, and an
input the operator refused (the record right after it is its RequestRefused)
never counts. A workflow the operator has not started yet shows its inline
steps as Pending. Pure functions of the object and `now`.

A Workflow that is gone — deleted by its ttlAfterFinished once its whole history
was mirrored, or by hand — is read from the history database through the
operator's HTTP API (address and token as vigil.cli.operatorapi says): every
entry from the first, folded over the pinned definition that entry 0 carries.
The same table follows a first line saying it is FROM history. A history
mirrored before the database kept definitions cannot be folded: `--events`
still lists it. A name with neither an object nor history rows is an error, and
so is a history that cannot be asked (saying why).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from vigil.cli.cluster import Cluster, add_namespace_options
from vigil.cli.errors import BadInput, Refused
from vigil.cli.operatorapi import HistoryNotShown, WorkflowHistory, add_tls_options, operator_api
from vigil.cli.output import add_output_option, emit
from vigil.cli.tables import precise_duration, relative, render_table
from vigil.core.checkpoint import Checkpoint, resume
from vigil.core.conditions import ConditionType
from vigil.core.executions import format_time
from vigil.core.orchestrator import current, progress
from vigil.core.steps import spec_of
from vigil.core.workflow import (
    ACTIVE_PHASES,
    DONE_PHASES,
    Definition,
    Event,
    Record,
    StepDef,
    StepPhase,
    StepState,
    WorkflowState,
    fold,
    records_from_data,
)
from vigil.model.workflowspec import definition_of

STEP_COLUMNS = ["STEP", "TYPE", "PHASE", "ATTEMPTS", "STARTED", "DURATION", "DETAIL"]
EVENT_COLUMNS = ["TIME", "EVENT", "STEP", "ATTEMPT", "DETAIL"]
#: Longest value shown in an event's DETAIL (an output or a message can be kilobytes).
DETAIL_VALUE_MAX = 60
#: Conditions worth a line under the header when true.
SHOWN_CONDITIONS = (ConditionType.INVALID, ConditionType.STUCK)
DECISIONS = frozenset({Event.APPROVED, Event.REJECTED, Event.COMPLETED_MANUALLY})


@dataclasses.dataclass(frozen=True)
class Folded:
    """A Workflow object read: its definition (None if unknown yet), history and folded state."""

    name: str
    namespace: str
    pinned: bool
    definition: Definition | None
    records: list[Record]
    state: WorkflowState
    #: History entries before ``records``: folded into the status's checkpoint, and kept only in
    #: the history database.
    older: int = 0


def read_workflow(obj: Mapping[str, Any]) -> Folded:
    """Fold the object's history over its pinned definition (or inline steps, before it starts)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    pinned = status.get("definition")
    inline = {"steps": spec["steps"], "onFailure": spec.get("onFailure", "fail")} if spec.get("steps") else None
    raw = pinned or inline
    try:
        definition = None if raw is None else definition_of(raw, uid=str(meta.get("uid", "")))
        records = records_from_data(status.get("history") or []) if pinned else []
        checkpoint = Checkpoint.from_data(status.get("checkpoint")) if pinned else None
    except (KeyError, ValueError) as err:
        raise BadInput(
            f'workflow "{meta.get("name")}" in namespace "{meta.get("namespace")}" cannot be read: {err}'
        ) from None
    state = resume(definition, checkpoint, records) if definition is not None else WorkflowState()
    return Folded(
        name=str(meta.get("name")), namespace=str(meta.get("namespace")), pinned=bool(pinned),
        definition=definition, records=records, state=state, older=checkpoint.seq if checkpoint else 0,
    )  # fmt: skip


def read_mirrored(history: WorkflowHistory, *, namespace: str, name: str) -> Folded:
    """Fold a deleted workflow's mirrored history over the definition its entry 0 carries
    (every entry from the first is there: no checkpoint to resume from).

    The database keeps an entry's keys in an order of its own (JSONB's by length, SQLite's as
    written); the API server serves an object's sorted, so they are sorted here, and `--events`
    lists each entry's details in the order it did while the Workflow existed."""
    try:
        definition = None if history.definition is None else definition_of(history.definition, uid=history.uid)
        records = records_from_data(json.loads(json.dumps(entry, sort_keys=True)) for entry in history.entries)
    except (KeyError, ValueError) as err:
        raise BadInput(
            f'the history of workflow "{name}" in namespace "{namespace}" cannot be read: {err}'
        ) from None
    state = fold(definition, records) if definition is not None else WorkflowState()
    return Folded(
        name=name, namespace=namespace, pinned=definition is not None, definition=definition,
        records=records, state=state,
    )  # fmt: skip


# --- the header -------------------------------------------------------------------------------


def from_history_line(folded: Folded) -> str:
    """The first line of what is read from the history database: why, and how much of it."""
    count = f"{len(folded.records)} history entries from the history database"
    if folded.definition is None:
        return f"FROM history: the Workflow was deleted; {count}"
    if folded.state.finished:
        return f"FROM history: the Workflow was deleted (ttlAfterFinished); {count}"
    return f"FROM history: the Workflow was deleted before it finished; {count} (any recorded after them are lost)"


def header_lines(obj: Mapping[str, Any], folded: Folded, *, now: datetime) -> list[str]:
    """One line on the whole workflow, then one per true Invalid or Stuck condition."""
    state = folded.state
    why = [state.reason] if state.reason and state.reason != state.phase else []
    if state.cancel_requested and state.cancelled_by:
        why.append(f"cancel requested by {state.cancelled_by}")
    title = f"workflow {folded.namespace}/{folded.name}: {state.phase}"
    title += f" ({'; '.join(why)})" if why else ""
    parts = [title]
    if not folded.pinned:
        parts.append("not started by the operator yet")
    if state.started_at is not None:
        parts.append(f"started {format_time(state.started_at)} ({relative(state.started_at, now)})")
    if state.finished_at is not None and state.started_at is not None:
        took = precise_duration(state.finished_at - state.started_at)
        parts.append(f"finished {format_time(state.finished_at)} (took {took})")
    if folded.definition is not None and folded.pinned:
        parts.append(f"progress {progress(folded.definition, state)}")
        running = current(folded.definition, state)
        if running:
            parts.append(f"current: {running.replace(',', ', ')}")
    if folded.older:
        parts.append(f"{folded.older} older history entries in the history database")
    lines = [", ".join(parts)]
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") in SHOWN_CONDITIONS and condition.get("status") == "True":
            lines.append(f"{condition['type']}: {condition.get('message') or condition.get('reason')}")
    return lines


# --- a row per step ---------------------------------------------------------------------------


def accepted(records: Sequence[Record]) -> list[Record]:
    """The records that count: every input the operator refused is left out (with its refusal)."""
    kept: list[Record] = []
    for index, record in enumerate(records):
        refused = index + 1 < len(records) and records[index + 1].event is Event.REQUEST_REFUSED
        if record.event is Event.REQUEST_REFUSED or (record.is_input and refused):
            continue
        kept.append(record)
    return kept


def _said(record: Record | None) -> str:
    """The words `by alice: looks good` (with a leading space) from a person's request record."""
    if record is None:
        return ""
    reason = record.detail.get("reason")
    return f" by {record.detail.get('by') or '?'}" + (f": {reason}" if reason else "")


def _last(records: Sequence[Record], *events: Event) -> Record | None:
    found = [r for r in records if r.event in events and not r.detail.get("compensation")]
    return found[-1] if found else None


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _now_detail(step_def: StepDef, step: StepState, state: WorkflowState, *, now: datetime) -> list[str]:
    """What the step is waiting for now."""
    if step.phase is StepPhase.PENDING:
        waiting = [dep for dep in step_def.depends_on if state.steps[dep].phase not in DONE_PHASES]
        return [f"after {', '.join(waiting)}"] if waiting else []
    parts: list[str] = []
    if step.phase is StepPhase.RUNNING:
        parts += spec_of(step_def.kind).waiting_for(step)
    if step.phase is StepPhase.RUNNING and step.fire_at is not None:
        parts.append(f"until {format_time(step.fire_at)} ({relative(step.fire_at, now)})")
    if step.phase is StepPhase.BACKOFF and step.retry_at is not None:
        parts.append(f"attempt {step.attempt + 1} {relative(step.retry_at, now)}")
    if step.phase in ACTIVE_PHASES and step.deadline is not None:
        parts.append(f"deadline {relative(step.deadline, now)}")
    return parts


def _outcome_detail(step_def: StepDef, step: StepState, records: Sequence[Record]) -> list[str]:
    """How the step ended, and who had a hand in it."""
    decision = _last(records, *DECISIONS)
    if step.phase is StepPhase.SUCCEEDED and step.manual:
        return [f"completed by hand{_said(decision)}"]
    if step.phase is StepPhase.SUCCEEDED and step.decided_by == "timeout":
        return ["approved on timeout"]
    if step.phase is StepPhase.SUCCEEDED and decision is not None and decision.event is Event.APPROVED:
        return [f"approved{_said(decision)}"]
    if step.rejected and decision is not None and decision.event is Event.REJECTED:
        return [f"rejected{_said(decision)}"]
    if step.phase is StepPhase.FAILED:
        return [step.reason or "Failed"]
    if step.phase is StepPhase.SKIPPED:
        return [f"skipped: {step.reason}" if step.reason else "skipped"]
    if step.phase is StepPhase.CANCELLED:
        return [step.reason or "Cancelled"]
    return []


def _history_detail(step: StepState, records: Sequence[Record]) -> list[str]:
    """The last failed attempt, a retry by hand, and the compensation."""
    parts: list[str] = []
    failure = _last(records, Event.POD_FAILED, Event.TASK_FAILED)
    if failure is not None and not step.rejected:
        message = _one_line(failure.detail.get("message", ""))
        reason = str(failure.detail.get("reason", "Failed")) + (f": {message}" if message else "")
        parts.append(f"last failure (attempt {failure.attempt}): {reason}")
    retry = _last(records, Event.RETRY_REQUESTED)
    if retry is not None:
        parts.append(f"retried by hand{_said(retry)}")
    comp = step.compensation
    if comp is not None:
        tries = f" after {comp.attempt} attempts" if comp.attempt > 1 else ""
        why = f": {comp.reason}" if comp.phase is StepPhase.FAILED and comp.reason else ""
        parts.append(f"compensation {comp.phase}{tries}{why}")
    return parts


def step_detail(
    step_def: StepDef, step: StepState, state: WorkflowState, records: Sequence[Record], *, now: datetime
) -> str:
    """The DETAIL cell of a step's row; `records` are the step's accepted records."""
    parts = [
        *_now_detail(step_def, step, state, now=now),
        *_outcome_detail(step_def, step, records),
        *_history_detail(step, records),
    ]
    return "; ".join(parts)


def step_duration(step: StepState, *, now: datetime) -> str | None:
    """finished - started, or "running for …" while the step holds a pod, an approval or a timer."""
    if step.started_at is None:
        return None
    if step.finished_at is not None:
        return precise_duration(step.finished_at - step.started_at)
    if step.phase in ACTIVE_PHASES:
        return f"running for {precise_duration(now - step.started_at)}"
    return None


def step_rows(folded: Folded, *, now: datetime) -> list[list[object]]:
    """One row per step, in definition order."""
    if folded.definition is None:
        return []
    by_step: dict[str, list[Record]] = {}
    for record in accepted(folded.records):
        if record.step is not None:
            by_step.setdefault(record.step, []).append(record)
    rows: list[list[object]] = []
    for step_def in folded.definition.steps:
        step = folded.state.steps[step_def.id]
        rows.append([
            step_def.id, step_def.kind, step.phase, step.attempt or None,
            None if step.started_at is None else format_time(step.started_at),
            step_duration(step, now=now),
            step_detail(step_def, step, folded.state, by_step.get(step_def.id, []), now=now),
        ])  # fmt: skip
    return rows


def timeline_lines(obj: Mapping[str, Any], *, now: datetime) -> list[str]:
    """`timeline WF`: the header, then a row per step."""
    folded = read_workflow(obj)
    return _with_steps(header_lines(obj, folded, now=now), folded, now=now)


def _with_steps(header: list[str], folded: Folded, *, now: datetime) -> list[str]:
    rows = step_rows(folded, now=now)
    if not rows:
        return [*header, "its steps are known once the operator pins its definition"]
    return [*header, "", *render_table(STEP_COLUMNS, rows).splitlines()]


# --- the whole history ------------------------------------------------------------------------


def _value(value: object) -> str:
    text = value if isinstance(value, str) and value and not any(c.isspace() for c in value) else None
    if text is None:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= DETAIL_VALUE_MAX else text[: DETAIL_VALUE_MAX - 1] + "…"


def event_detail(record: Record) -> str:
    """A record's detail as key=value pairs, long values cut short."""
    return " ".join(f"{key}={_value(value)}" for key, value in record.detail.items() if value is not None)


def event_rows(records: Sequence[Record]) -> list[list[object]]:
    return [
        [format_time(record.at), record.event, record.step, record.attempt, event_detail(record)]
        for record in records
    ]


def events_lines(obj: Mapping[str, Any], *, now: datetime) -> list[str]:
    """`timeline WF --events`: the header, then every history record, oldest first."""
    folded = read_workflow(obj)
    return _with_events(header_lines(obj, folded, now=now), folded)


def _with_events(header: list[str], folded: Folded) -> list[str]:
    if not folded.records:
        return [*header, "no history yet"]
    return [*header, "", *render_table(EVENT_COLUMNS, event_rows(folded.records)).splitlines()]


# --- a deleted workflow, from the history database ---------------------------------------------


def mirrored_lines(history: WorkflowHistory, *, namespace: str, name: str, events: bool, now: datetime) -> list[str]:
    """`timeline WF [--events]` of a deleted workflow: the FROM line, then what a live one shows
    (no conditions: they were the object's); without a definition, its entries only."""
    folded = read_mirrored(history, namespace=namespace, name=name)
    first = from_history_line(folded)
    if folded.definition is None:
        why = (
            f"workflow {namespace}/{name}: its definition was not kept (mirrored before the history "
            "database kept definitions), so its steps cannot be folded"
        )
        if events:
            return _with_events([first, why], folded)
        return [first, f"{why}; --events lists its entries"]
    header = [first, *header_lines({}, folded, now=now)]
    return _with_events(header, folded) if events else _with_steps(header, folded, now=now)


def deleted_workflow(args: argparse.Namespace, cluster: Cluster, namespace: str) -> WorkflowHistory:
    """The history of the workflow no object holds any more, through the operator's API;
    BadInput when it has none either, Refused when it cannot be asked."""
    where = f'workflow "{args.workflow}" not found in namespace "{namespace}"'
    try:
        api = operator_api(args, lambda: cluster.api, environ=os.environ)
        found = api.workflow_history(namespace, args.workflow)
    except HistoryNotShown as why:
        raise Refused(f"{where}, and its history could not be asked: {why}") from None
    if found is None:
        raise BadInput(f"{where}, nor in the history database")
    return found


def cmd_timeline(args: argparse.Namespace) -> int:
    cluster = Cluster()
    namespace = cluster.namespace(args.namespace)
    obj = cluster.find_workflow(args.workflow, namespace)
    now = datetime.now(UTC)
    if obj is None:
        history = deleted_workflow(args, cluster, namespace)
        lines = mirrored_lines(history, namespace=namespace, name=args.workflow, events=args.events, now=now)
        data: Any = history
    else:
        lines = (events_lines if args.events else timeline_lines)(obj, now=now)
        data = obj
    return emit(args, data, "\n".join(lines))


def add_parsers(sub: Any) -> None:
    """Register `timeline`."""
    tl = sub.add_parser("timeline", help="a workflow's steps: phase, attempts, times and who decided")
    tl.add_argument("workflow", help="a Workflow")
    tl.add_argument("--events", action="store_true", help="print every history record instead")
    tl.add_argument(
        "--api-url", help="the operator's HTTP API, asked for the history of a workflow that was deleted, e.g. "
        "https://127.0.0.1:8080 after kubectl port-forward (default: $VIGIL_API_URL)",
    )  # fmt: skip
    add_tls_options(tl)
    add_namespace_options(tl)
    add_output_option(tl)
    tl.set_defaults(func=cmd_timeline)
