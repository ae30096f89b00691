"""The trigger ledger on the ScheduledJob: every occurrence ends in one recorded outcome.

After each plan the trigger writes, in one status patch conditional on the
version it read (a conflict rereads and merges again): the occurrences it
disposed of (Fired with the execution id, or Missed/Superseded/Skipped/Suspended
with the reason), the chain's progress (`status.chain`: the newest nominal
handled, where a suspended chain paused), LAST SCHEDULED and NEXT RUN. Entries
are keyed by nominal time, so a repeated pass rewrites rather than duplicates.
Events follow, one per outcome other than an on-time fire (the Execution itself
records that, and an Event each would double the writes of every fire): Fired
appears only for a late fire this pass created.

On the leader the ledger writes through the job's one status writer
(`kube/jobstatus.py`): a plan with anything but fires is written before the
trigger marks its bucket (that record exists nowhere else); a plan of fires
only joins the job's next coalesced status write, since each fire's Execution,
created before the mark, is its record.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.buckets import Outcome
from vigil.core.chain import EntryPlan, Fire, Record
from vigil.core.conditions import (
    ConditionReason,
    ConditionType,
    EventReason,
    condition_status,
    set_condition,
)
from vigil.core.ids import pod_name
from vigil.core.ports import Conflict
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.kube.conflicts import conflict_from, retry_on_conflict
from vigil.kube.events import NORMAL, WARNING, EventRecorder
from vigil.kube.jobs import KubeCatalogue
from vigil.model import GROUP, VERSION
from vigil.model.names import SCHEDULED_JOBS

if TYPE_CHECKING:
    from vigil.kube.jobstatus import JobStatusWriter

log = logging.getLogger(__name__)

LEDGER_SIZE = 50  # occurrences kept in status; the history database keeps the rest
ACTIVE_SIZE = 20


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


def merge_ledger(existing: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Existing entries plus new ones, one per (nominal time, outcome), oldest first.

    Keyed on the outcome too: after a schedule edit one nominal time can be both
    Superseded (old schedule) and Fired (new schedule), and both are true.
    """
    by_key = {(e["nominal"], e["outcome"]): e for e in existing}
    for entry in new:
        by_key[(entry["nominal"], entry["outcome"])] = entry
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


def urgent(plan: EntryPlan) -> bool:
    """Whether the plan must be on the job before its bucket is marked: anything but fires.

    A Missed, Skipped, Failed or Suspended occurrence exists nowhere else, so it is written before
    the walk moves on. A fire's record is its Execution (named from the execution id, created
    before the mark), so its ledger entry may follow in the job's next coalesced status write.
    """
    return bool(plan.records) or plan.pause_at is not None


def ledger_patch(status: Mapping[str, Any], plan: EntryPlan, now: datetime, *, generation: int) -> dict[str, Any]:
    """The status fields a plan changes, given the status so far. `chain` holds only the keys
    this plan changes (merged into the stored ones): the handler owns the rest."""
    chain: dict[str, Any] = {}
    new = [_fired_entry(f, now) for f in plan.fires] + [_record_entry(r, now) for r in plan.records]
    patch: dict[str, Any] = {"occurrences": merge_ledger(status.get("occurrences") or [], new)}
    handled = plan.handled_through
    if handled is not None:
        previous = (status.get("chain") or {}).get("lastNominal")
        if previous is None or parse_rfc3339(previous) < handled:
            chain["lastNominal"] = format_rfc3339(handled)
    if plan.fires:
        newest = max(f.occurrence.nominal for f in plan.fires)
        last = status.get("lastScheduleTime")
        if last is None or parse_rfc3339(last) < newest:
            patch["lastScheduleTime"] = format_rfc3339(newest)
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


class KubeLedger:
    """Records each plan on its job: through the job's one status writer when there is one (the
    leader's), else with its own conditional write (tools and tests)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        catalogue: KubeCatalogue,
        events: EventRecorder,
        writer: JobStatusWriter | None = None,
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._catalogue = catalogue
        self._events = events
        self._writer = writer

    def record(self, plan: EntryPlan, *, launched: Mapping[str, bool], now: datetime) -> None:
        obj = self._catalogue.cached(plan.namespace, plan.name)
        if obj is None:
            for record in plan.records:
                log.info("occurrence of deleted job %s/%s: %s", plan.namespace, plan.name, record.reason)
            return
        first = obj
        if self._writer is not None:
            uid = str(obj["metadata"]["uid"])
            add = self._writer.write_plan_now if urgent(plan) else self._writer.add_plan
            add(plan, now=now, uid=uid, then=lambda job: self.post_events(job, plan, launched))
            return

        def write() -> None:
            nonlocal obj
            if obj is None:
                obj = self._catalogue.fetch(plan.namespace, plan.name)
                if obj is None or obj["metadata"]["uid"] != first["metadata"]["uid"]:
                    return  # deleted (or deleted and re-created) since: its ledger went with it
            try:
                self._patch_status(obj, plan, now)
            except Conflict:
                obj = None  # another writer moved it: build the entries again on a fresh read
                raise

        retry_on_conflict(write)
        self.post_events(first, plan, launched)

    def _patch_status(self, obj: Mapping[str, Any], plan: EntryPlan, now: datetime) -> None:
        """Merge this plan into the job's ledger, conditional on the version `obj` was read at."""
        patch = ledger_patch(obj.get("status") or {}, plan, now, generation=int(obj["metadata"].get("generation", 0)))
        meta = obj["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": patch}
        try:
            self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], SCHEDULED_JOBS, meta["name"], body
            )
        except ApiException as err:
            conflict_from(err)
            if err.status != 404:
                raise

    def post_events(self, obj: Mapping[str, Any], plan: EntryPlan, launched: Mapping[str, bool]) -> None:
        for fire in plan.fires:
            if fire.late and launched.get(fire.execution_id):
                self._events.emit(
                    obj,
                    type_=NORMAL,
                    reason=EventReason.FIRED,
                    message=f"fired {format_rfc3339(fire.occurrence.nominal)} (late) as execution "
                    f"{fire.execution_id}",
                )
        for record in plan.records:
            warning = record.outcome in (Outcome.MISSED, Outcome.FAILED)
            message = f"{record.outcome} {format_rfc3339(record.occurrence.nominal)}: {record.reason}"
            if record.message:
                message += f" ({record.message})"
            self._events.emit(
                obj, type_=WARNING if warning else NORMAL, reason=str(record.outcome), message=message
            )
