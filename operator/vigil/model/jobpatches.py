"""The ScheduledJob status fields each change brings: pure folds from core objects to the status.

A job's status is changed by the trigger's plans (the ledger of occurrences, the chain's progress,
LAST SCHEDULED, NEXT RUN, LaunchFailing) and by its executions' transitions (active, recent,
LAST SUCCESS, DeadLettered; and for a run asked for by hand, its Manual entry in the ledger), and by the ends of the workflows it started (recent, LAST SUCCESS).
Each fold here takes the status as it is and one change, and returns
the fields it sets, in the status's wire form, so the job's one status writer (`kube/stores/jobstatus.py`)
can fold every waiting change into one write, and fold them again on a fresher status after a
conflict. The writer then reads the status before and after as `ScheduledJobStatus` and writes
only the fields whose values differ (`model/statuspatch.py`).
Every list here has a bound: the history database keeps what falls off.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from vigil.core.buckets import Outcome
from vigil.core.chain import EntryPlan, Fire, Record
from vigil.core.conditions import ConditionReason, ConditionType, condition_status, set_condition
from vigil.core.executions import Execution, Phase
from vigil.core.ids import pod_name
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.core.workflow import Event
from vigil.core.workflow import Record as WorkflowRecord
from vigil.core.workflowpass import JOB_OUTCOMES

LEDGER_SIZE = 50  # occurrences kept in status; the history database keeps the rest
ACTIVE_SIZE = 20
RECENT_SIZE = 20


def _fired_entry(fire: Fire, now: datetime) -> dict[str, Any]:
    return {
        "nominal": format_rfc3339(fire.occurrence.nominal),
        "fireAt": format_rfc3339(fire.occurrence.fire_at),
        "executionId": fire.execution_id,
        "outcome": str(Outcome.FIRED),
        "at": format_rfc3339(now),
        "reason": "Late" if fire.late else "",
    }


def _record_entry(record: Record, now: datetime) -> dict[str, Any]:
    return {
        "nominal": format_rfc3339(record.occurrence.nominal),
        "fireAt": format_rfc3339(record.occurrence.fire_at),
        "outcome": str(record.outcome),
        "at": format_rfc3339(now),
        "reason": str(record.reason),
    }


def _ledger_key(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    """Manual runs are keyed by their execution too: two may be asked for in the same second."""
    manual = entry["outcome"] == Outcome.MANUAL
    return entry["nominal"], entry["outcome"], str(entry.get("executionId") or "") if manual else ""


def merge_ledger(existing: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Existing entries plus new ones, one per (nominal time, outcome), oldest first.

    Keyed on the outcome too: after a schedule edit one nominal time can be both
    Superseded (old schedule) and Fired (new schedule), and both are true.
    """
    by_key = {_ledger_key(e): e for e in existing}
    for entry in new:
        by_key[_ledger_key(entry)] = entry
    ordered = sorted(by_key.values(), key=lambda e: parse_rfc3339(e["nominal"]))
    return ordered[-LEDGER_SIZE:]


def _launch_failing(
    status: Mapping[str, Any], plan: EntryPlan, now: datetime, *, generation: int
) -> list[dict[str, Any]] | None:
    """The conditions with LaunchFailing set by this plan, or None when it says nothing new.

    True when an occurrence was refused for good (settled Failed), with the API server's words;
    False again at the next occurrence that launches.
    """
    refused = [r for r in plan.records if r.outcome is Outcome.FAILED]
    conditions = list(status.get("conditions") or [])
    if refused:
        latest = max(refused, key=lambda r: r.occurrence.nominal)
        message = f"{format_rfc3339(latest.occurrence.nominal)} was refused: {latest.message}"
        return set_condition(
            conditions, type_=ConditionType.LAUNCH_FAILING, status=True, reason=ConditionReason.LAUNCH_REFUSED,
            message=message, generation=generation, now=now,
        )  # fmt: skip
    if plan.fires and condition_status(conditions, ConditionType.LAUNCH_FAILING) == "True":
        return set_condition(
            conditions, type_=ConditionType.LAUNCH_FAILING, status=False, reason=ConditionReason.LAUNCHED,
            message="", generation=generation, now=now,
        )  # fmt: skip
    return None


def active_entry(fire: Fire, now: datetime) -> dict[str, Any]:
    return {
        "executionId": fire.execution_id,
        "attempt": 1,
        "pod": pod_name(fire.execution_id, 1),
        "scheduledFor": format_rfc3339(fire.occurrence.nominal),
        "startedAt": format_rfc3339(now),
    }


def ledger_patch(status: Mapping[str, Any], plan: EntryPlan, now: datetime, *, generation: int) -> dict[str, Any]:
    """The status fields a plan changes, given the status so far. `chain` holds only the keys
    this plan changes (merged into the stored ones): the handler owns the rest."""
    chain: dict[str, Any] = {}
    new = [_fired_entry(f, now) for f in plan.fires] + [_record_entry(r, now) for r in plan.records]
    patch: dict[str, Any] = {"occurrences": merge_ledger(status.get("occurrences") or [], new)}
    handled = plan.handled_through
    if handled is not None:
        chain.update(_later("lastNominal", status.get("chain") or {}, handled))
    if plan.fires:
        patch.update(_later("lastScheduleTime", status, max(f.occurrence.nominal for f in plan.fires)))
        active = {a["executionId"]: a for a in status.get("active") or []}
        for fire in plan.fires:
            active.setdefault(fire.execution_id, active_entry(fire, now))
        patch["active"] = list(active.values())[-ACTIVE_SIZE:]
    if plan.pause_at is not None:
        chain["pausedAt"] = format_rfc3339(plan.pause_at)
    if plan.insert is not None:
        patch["nextRun"] = format_rfc3339(plan.insert.fire_at)
    elif plan.fires or plan.pause_at is not None:
        patch["nextRun"] = None
    if chain:
        patch["chain"] = chain
    launch_failing = _launch_failing(status, plan, now, generation=generation)
    if launch_failing is not None:
        patch["conditions"] = launch_failing
    return patch


def manual_entry(ex: Execution, request_id: str, now: datetime) -> dict[str, Any]:
    """The ledger entry of a run asked for by hand: at its request time, with the request id."""
    return {
        "nominal": format_rfc3339(ex.scheduled_for),
        "executionId": ex.execution_id,
        "outcome": str(Outcome.MANUAL),
        "at": format_rfc3339(now),
        "reason": f"run by hand, request {request_id}"[:1024],
    }


def transition_patch(
    status: Mapping[str, Any], ex: Execution, *, generation: int, now: datetime, manual: str | None = None
) -> dict[str, Any]:
    """The job status fields one execution's transition changes, given the status so far.

    `manual` is the request id of a run asked for by hand (`source: Manual`): its first recorded
    transition also enters it in the ledger, once."""
    patch: dict[str, Any] = {}
    ledger = status.get("occurrences") or []
    if manual is not None and not any(e.get("executionId") == ex.execution_id for e in ledger):
        patch["occurrences"] = merge_ledger(ledger, [manual_entry(ex, manual, now)])
    active = [a for a in status.get("active") or [] if a.get("executionId") != ex.execution_id]
    if not ex.phase.terminal:
        entry = {
            "executionId": ex.execution_id,
            "attempt": ex.attempt,
            "scheduledFor": format_rfc3339(ex.scheduled_for),
        }
        # Waiting in Backoff (or Ready) the next attempt has no pod and no start yet; an empty
        # pod name is not a name, and the API server would refuse the whole status patch.
        if ex.pod:
            entry["pod"] = ex.pod
        if ex.started_at is not None:
            entry["startedAt"] = format_rfc3339(ex.started_at)
        active.append(entry)
    patch["active"] = active
    last = ex.attempts[-1] if ex.attempts else None
    if last is not None:
        entry = {
            "executionId": ex.execution_id,
            "attempt": last.attempt,
            "outcome": str(last.outcome),
            "scheduledFor": format_rfc3339(ex.scheduled_for),
            "finishedAt": format_rfc3339(last.finished_at or now),
            "reason": last.reason,
        }
        key = (ex.execution_id, last.attempt)  # one entry per attempt
        patch["recent"] = _with_recent(
            status, entry, replaces=lambda r: (r.get("executionId"), r.get("attempt")) == key
        )
    if ex.phase is Phase.SUCCEEDED and ex.finished_at is not None:
        patch.update(_later("lastSuccessfulTime", status, ex.finished_at))
    if ex.phase is Phase.DEAD:
        patch["conditions"] = set_condition(
            status.get("conditions") or [],
            type_=ConditionType.DEAD_LETTERED,
            status=True,
            reason=ConditionReason.DEAD_LETTERED,
            message=f"execution {ex.execution_id} exhausted {ex.attempt} attempts: {ex.reason}",
            generation=generation,
            now=now,
        )
    return patch


def workflow_end_patch(
    status: Mapping[str, Any],
    *,
    workflow: str,
    scheduled_for: str | None,
    new: Sequence[WorkflowRecord],
    size: int = RECENT_SIZE,
) -> dict[str, Any] | None:
    """The job status fields that its workflow ``workflow`` ending changes (its ``recent`` list,
    one entry per workflow, and ``lastSuccessfulTime`` that the watchdog reads); None when
    ``new`` holds no end."""
    ended = [r for r in new if r.event in JOB_OUTCOMES]
    if not ended:
        return None
    record = ended[-1]
    entry = {
        "executionId": workflow,
        "attempt": 1,
        "outcome": JOB_OUTCOMES[record.event],
        "scheduledFor": scheduled_for or format_rfc3339(record.at),
        "finishedAt": format_rfc3339(record.at),
        "reason": str(record.event),
    }
    recent = _with_recent(status, entry, replaces=lambda r: r.get("executionId") == workflow, size=size)
    patch: dict[str, Any] = {"recent": recent}
    if record.event is Event.WORKFLOW_SUCCEEDED:
        patch.update(_later("lastSuccessfulTime", status, record.at))
    return patch


def _with_recent(
    status: Mapping[str, Any],
    entry: dict[str, Any],
    *,
    replaces: Callable[[Mapping[str, Any]], bool],
    size: int = RECENT_SIZE,
) -> list[dict[str, Any]]:
    """The ``recent`` list with ``entry`` last, in place of the entries it ``replaces``; the
    newest ``size`` kept."""
    return [*(r for r in status.get("recent") or [] if not replaces(r)), entry][-size:]


def _later(field: str, status: Mapping[str, Any], at: datetime) -> dict[str, Any]:
    """``field`` moved to ``at`` when that is later than the one stored (or none is); nothing
    otherwise: a time that only moves forward, whichever change arrives first."""
    previous = status.get(field)
    return {field: format_rfc3339(at)} if previous is None or parse_rfc3339(previous) < at else {}
