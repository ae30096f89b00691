"""The leader's ScheduledJob status writer, flushed where a test reads a job right after a change.

A job's ledger and its executions' summary have one writer (`vigil.kube.stores.jobstatus.
JobStatusWriter`): on the leader its queue coalesces a plan of fires, or an execution's
transition, into the job's next write, a second or more later. The tests that drive the trigger's
adapters with no operator running read the job right after a plan: they wire the same writer, its
queue not run, and flush it, which writes at once what the leader's queue would write later.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime

from kubernetes import client

from vigil.core.chain import EntryPlan
from vigil.kube.kits.events import EventRecorder
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.jobstatus import JobStatusWriter
from vigil.kube.stores.ledger import KubeLedger

FLUSH_SECONDS = 60.0  # longer than any test's flush takes; a flush that outlasts it logs what it left


def flush(writer: JobStatusWriter) -> None:
    """Write every job that has changes waiting, now."""
    writer.flush(time.monotonic() + FLUSH_SECONDS)


class FlushedLedger:
    """The trigger's `KubeLedger` with its job status writer flushed after each plan: what the
    plan changes is on the job when `record` returns."""

    def __init__(
        self, api: client.ApiClient, *, catalogue: KubeCatalogue, events: EventRecorder, writer: JobStatusWriter | None = None
    ) -> None:
        self.writer = writer or JobStatusWriter(api, catalogue=catalogue)  # its queue is not run
        self.ledger = KubeLedger(catalogue=catalogue, events=events, writer=self.writer)

    def record(self, plan: EntryPlan, *, launched: Mapping[str, bool], now: datetime) -> None:
        self.ledger.record(plan, launched=launched, now=now)
        flush(self.writer)
