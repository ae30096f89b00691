"""What the console's pages show of an object, as plain rows: pure functions of the objects.

The templates only lay these out; every choice of what a job's health is or how a schedule
reads is made here, where a unit test can hold it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from vigil.api.console.sources import Obj
from vigil.core.checkpoint import Checkpoint, resume
from vigil.core.steps import spec_named
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import WorkflowState, records_from_data
from vigil.model.workflowspec import definition_of

#: Longest output or input shown on a page, in characters; the rest is cut with a note (an
#: output may be kilobytes; the whole is in the history and `kubectl vigil timeline --events`).
VALUE_MAX = 2000

#: Conditions whose `True` makes a job unhealthy, worst first, with the health they mean.
_BAD = (("Invalid", "invalid"), ("DeadLettered", "failing"), ("Overdue", "overdue"))


@dataclasses.dataclass(frozen=True)
class JobRow:
    namespace: str
    name: str
    schedule: str
    timezone: str
    next_run: str
    last_success: str
    health: str
    conditions: tuple[str, ...]


def conditions_of(obj: Obj) -> list[Mapping[str, Any]]:
    found = (obj.get("status") or {}).get("conditions") or []
    return [c for c in found if isinstance(c, Mapping)]


def health(obj: Obj) -> str:
    """healthy, overdue, failing, suspended, invalid or pending (not yet judged)."""
    true = {str(c.get("type")) for c in conditions_of(obj) if c.get("status") == "True"}
    for kind, word in _BAD:
        if kind in true:
            return word
    if "Suspended" in true or (obj.get("spec") or {}).get("suspend"):
        return "suspended"
    return "healthy" if "Ready" in true else "pending"


def schedule_text(spec: Mapping[str, Any]) -> str:
    if spec.get("cron"):
        return str(spec["cron"])
    if spec.get("every"):
        return f"every {spec['every']}"
    if spec.get("runAt"):
        return f"once at {spec['runAt']}"
    return ""


def job_row(obj: Obj) -> JobRow:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return JobRow(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        schedule=schedule_text(spec),
        timezone=str(spec.get("timezone") or "UTC"),
        next_run=str(status.get("nextRun") or ""),
        last_success=str(status.get("lastSuccessfulTime") or ""),
        health=health(obj),
        conditions=tuple(
            f"{c.get('type')}={c.get('status')}"
            + (f" ({c.get('reason')})" if c.get("reason") else "")
            for c in conditions_of(obj)
        ),
    )


def matches(row: JobRow, *, health_word: str, text: str) -> bool:
    if health_word and row.health != health_word:
        return False
    return not text or text.lower() in row.name.lower()


def occurrences(obj: Obj) -> list[Mapping[str, Any]]:
    """The job's occurrence ledger, newest first."""
    found = [
        o for o in (obj.get("status") or {}).get("occurrences") or [] if isinstance(o, Mapping)
    ]
    return sorted(found, key=lambda o: str(o.get("nominal", "")), reverse=True)


def execution_row(obj: Obj) -> dict[str, str]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return {
        "id": str(meta.get("name", "")),
        "phase": str(status.get("phase") or "Pending"),
        "attempt": str(status.get("attempt") or ""),
        "scheduledFor": str(spec.get("scheduledFor") or ""),
        "reason": str(status.get("reason") or status.get("message") or ""),
    }


@dataclasses.dataclass(frozen=True)
class StepRow:
    id: str
    type: str
    phase: str
    attempts: str
    depends_on: tuple[str, ...]
    approvers: tuple[str, ...]
    output: str
    detail: str
    waiting_approval: bool
    inputs: str = ""


def definition_steps(obj: Obj) -> list[Mapping[str, Any]]:
    """The workflow's steps as pinned in its status (else as its spec says)."""
    status = obj.get("status") or {}
    pinned = (status.get("definition") or {}).get("steps")
    steps = pinned if isinstance(pinned, list) else (obj.get("spec") or {}).get("steps") or []
    return [s for s in steps if isinstance(s, Mapping) and s.get("id")]


def folded(obj: Obj) -> WorkflowState | None:
    """The workflow's state folded from its status (checkpoint and history) over its pinned
    definition, as the engine and `kubectl vigil timeline` fold it; None before it is pinned or
    when the status cannot be read (the page then shows what status.steps says)."""
    status = obj.get("status") or {}
    pinned = status.get("definition")
    if not pinned:
        return None
    try:
        definition = definition_of(pinned, uid=str((obj.get("metadata") or {}).get("uid", "")))
        checkpoint = Checkpoint.from_data(status.get("checkpoint"))
        return resume(definition, checkpoint, records_from_data(status.get("history") or []))
    except (KeyError, ValueError, TypeError):
        return None


def shown(value: Any) -> str:
    """A JSON value as text of at most VALUE_MAX characters."""
    if value is None:
        return ""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= VALUE_MAX else text[:VALUE_MAX] + f" … ({len(text)} characters)"


def step_rows(obj: Obj, *, values: bool = True) -> list[StepRow]:
    """Each step of the definition with its phase; with `values`, its output and inputs too
    (the history folded: the DAG, polled every few seconds, needs only the phases)."""
    states = (obj.get("status") or {}).get("steps") or {}
    state = folded(obj) if values else None
    outputs: dict[str, str] = {}
    if state is not None:
        for step_id, folded_step in state.steps.items():
            digest = folded_step.output_offloaded
            offloaded = f"(in the history database, sha256 {digest[:12]}…)" if digest else ""
            outputs[step_id] = offloaded or shown(folded_step.output)
    rows = []
    for step in definition_steps(obj):
        summary = states.get(step["id"]) or {}
        kind = str(step.get("type") or "pod")
        phase = str(summary.get("phase") or "Pending")
        depends = tuple(str(d) for d in step.get("dependsOn") or [])
        rows.append(
            StepRow(
                id=str(step["id"]),
                type=kind,
                phase=phase,
                attempts=str(summary.get("attempts") or ""),
                depends_on=depends,
                approvers=tuple(
                    str(a)
                    for a in summary.get("approvers")
                    or (step.get("approval") or {}).get("approvers")
                    or []
                ),
                output=outputs.get(str(step["id"]), ""),
                detail=str(summary.get("reason") or "")
                + (f" (decided by {summary['decidedBy']})" if summary.get("decidedBy") else ""),
                waiting_approval=phase == "Running" and _awaits_decision(kind),
                inputs=", ".join(f"{d}: {outputs[d]}" for d in depends if outputs.get(d)),
            )
        )
    return rows


@dataclasses.dataclass(frozen=True)
class StepEvent:
    """One entry of a step's history as a page shows it: its attempts, decisions and failures."""

    at: str
    event: str
    attempt: str
    detail: str


def step_events(obj: Obj) -> dict[str, list[StepEvent]]:
    """The history entries the status still holds (older ones are folded into its checkpoint and
    kept in the history database), by step, oldest first."""
    try:
        records = records_from_data((obj.get("status") or {}).get("history") or [])
    except (KeyError, ValueError, TypeError):
        return {}
    found: dict[str, list[StepEvent]] = {}
    for record in records:
        if record.step is None:
            continue
        said = [
            f"{key}: {shown(record.detail[key])}"
            for key in ("reason", "message", "by")
            if record.detail.get(key)
        ]
        found.setdefault(record.step, []).append(
            StepEvent(
                at=format_rfc3339(record.at),
                event=str(record.event),
                attempt="" if record.attempt is None else str(record.attempt),
                detail="; ".join(said),
            )
        )
    return found


def sorted_rows(rows: Sequence[JobRow]) -> list[JobRow]:
    return sorted(rows, key=lambda r: (r.namespace, r.name))


def _awaits_decision(kind: str) -> bool:
    """Whether a step of this kind waits for a person's decision when it runs."""
    spec = spec_named(kind)
    return spec is not None and spec.awaits_decision
