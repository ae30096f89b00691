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
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.buckets import Outcome
from vigil.core.chain import EntryPlan
from vigil.core.conditions import EventReason
from vigil.core.ports import Conflict
from vigil.core.timeparse import format_rfc3339
from vigil.kube.conflicts import conflict_from, retry_on_conflict
from vigil.kube.events import NORMAL, WARNING, EventRecorder
from vigil.kube.jobs import KubeCatalogue
from vigil.kube.jobstatus import JobStatusWriter, urgent
from vigil.model import GROUP, VERSION
from vigil.model.jobpatches import ledger_patch
from vigil.model.names import SCHEDULED_JOBS

log = logging.getLogger(__name__)

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
