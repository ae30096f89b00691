"""The trigger ledger on the ScheduledJob: every occurrence ends in one recorded outcome.

After each plan the trigger records on the job (status fields folded by
`model/jobpatches.ledger_patch`, written conditionally on the version read, a
conflict rereads and folds again): the occurrences it
disposed of (Fired with the execution id, or Missed/Superseded/Skipped/Suspended
with the reason), the chain's progress (`status.chain`: the newest nominal
handled, where a suspended chain paused), LAST SCHEDULED and NEXT RUN. Entries
are keyed by nominal time, so a repeated pass rewrites rather than duplicates.
Events follow, one per outcome other than an on-time fire (the Execution itself
records that, and an Event each would double the writes of every fire): Fired
appears only for a late fire this pass created.

The ledger writes through the job's one status writer (`kube/stores/jobstatus.py`),
there is no other: a plan with anything but fires is written before the
trigger marks its bucket (that record exists nowhere else); a plan of fires
only joins the job's next coalesced status write, since each fire's Execution,
created before the mark, is its record. Tools and tests that want a plan of
fires on the job at once flush the writer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from vigil.core.buckets import Outcome
from vigil.core.chain import EntryPlan
from vigil.core.conditions import EventReason
from vigil.core.timeparse import format_rfc3339
from vigil.kube.kits.events import NORMAL, WARNING, EventRecorder
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.jobstatus import JobStatusWriter, urgent

log = logging.getLogger(__name__)


class KubeLedger:
    """Records each plan on its job through the job's one status writer (the leader's); tools and
    tests flush that writer to see the plan on the job at once."""

    def __init__(
        self,
        *,
        catalogue: KubeCatalogue,
        events: EventRecorder,
        writer: JobStatusWriter,
    ) -> None:
        self._catalogue = catalogue
        self._events = events
        self._writer = writer

    def record(self, plan: EntryPlan, *, launched: Mapping[str, bool], now: datetime) -> None:
        obj = self._catalogue.cached(plan.namespace, plan.name)
        if obj is None:
            for record in plan.records:
                log.info("occurrence of deleted job %s/%s: %s", plan.namespace, plan.name, record.reason)
            return
        uid = str(obj["metadata"]["uid"])
        add = self._writer.write_plan_now if urgent(plan) else self._writer.add_plan
        add(plan, now=now, uid=uid, then=lambda job: self.post_events(job, plan, launched))

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
