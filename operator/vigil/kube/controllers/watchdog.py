"""The watchdog on the cluster: assert, every pass, that what should have happened did.

Each pass gathers every job's facts (`watchfacts`), asks the pure rules
(`vigil.core.watchdog.assess_job`) for verdicts, and makes them visible where
people look: conditions on the ScheduledJob (`Overdue`, `ScheduleChainBroken`,
`OutputStale`, `SuspendedTooLong` — written only when they change, through the job's
status writer, so a condition another writer set since the watchdog's copy stays), a Warning
Event when one turns true and a Normal one when it clears, and the metrics the
alerts read (through `gauges`, so this adapter never imports the metrics
module: each job's verdicts go there as it is judged, and the pass keeps none of them). `LaunchFailing` is reported the same way (Event, metric, audit), but
its condition belongs to the trigger's ledger, which sets it when a launch is
refused: the watchdog does not write it, and remembers which jobs it reported,
so that each episode gets one Warning and one Recovered Event per watchdog
process. Late chain heads are judged by the trigger's published progress
(behind is not broken, see `vigil.core.progress`). With `repair`, a broken chain gets its head back: re-entered from the
last occurrence it handled, so the gap goes through the catch-up policy and is
fired or recorded as Missed — never skipped.

It runs in the trigger leader, or as its own Deployment so that it does not
share the trigger's blind spots (`vigil watchdog`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from vigil.core.chain import chain_head, resume_entry
from vigil.core.conditions import EventReason, set_condition
from vigil.core.ports import BucketStore, Clock
from vigil.core.watchdog import DEFAULT_CHAIN_GRACE, Finding, JobFacts, JobReport, assess_job
from vigil.kube.controllers.watchfacts import FactGatherer
from vigil.kube.kits.events import NORMAL, WARNING, EventRecorder
from vigil.kube.stores.jobstatus import Change, JobStatusWriter
from vigil.model.jobspec import InvalidJob, job_view

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Assessed:
    job: Mapping[str, Any]
    facts: JobFacts
    report: JobReport


class PassGauges(Protocol):
    """Where a pass's verdicts go, one job at a time, to be published at its end
    (`vigil.metrics.WatchdogGauges`)."""

    def add(self, item: Assessed) -> None: ...
    def publish(self) -> None: ...


class NoGauges:
    """No metrics (the plugin's audit prints its findings instead)."""

    def add(self, item: Assessed) -> None:
        return None

    def publish(self) -> None:
        return None


def _keep_nothing(item: Assessed) -> bool:
    return False


class Watchdog:
    def __init__(
        self,
        *,
        gatherer: FactGatherer,
        events: EventRecorder,
        clock: Clock,
        suspended_max_age: timedelta,
        chain_grace: timedelta = DEFAULT_CHAIN_GRACE,
        store: BucketStore | None = None,
        repair: bool = False,
        writer: JobStatusWriter,
        gauges: Callable[[], PassGauges] = NoGauges,
    ) -> None:
        self._writer = writer
        self._gatherer = gatherer
        self._events = events
        self._clock = clock
        self._suspended_max_age = suspended_max_age
        self._chain_grace = chain_grace
        self._store = store
        self._repair = repair and store is not None
        self._gauges = gauges
        self._launch_failing: set[tuple[str, str]] = set()  # jobs reported LaunchFailing last pass

    def assess(self, *, audit: bool = True) -> list[Assessed]:
        """Every job's verdicts, without acting on them (what `kubectl vigil audit` prints)."""
        return list(self._assessed(self._clock.now(), audit=audit))

    def _assessed(self, now: datetime, *, audit: bool) -> Iterator[Assessed]:
        progress = self._gatherer.progress()
        for job, facts in self._gatherer.facts(now, read_buckets=audit):
            report = assess_job(
                facts, now, suspended_max_age=self._suspended_max_age, chain_grace=self._chain_grace, progress=progress
            )
            yield Assessed(job, facts, report)

    def check(self, *, audit: bool = True, keep: Callable[[Assessed], bool] = _keep_nothing) -> list[Assessed]:
        """One pass: verdicts → conditions, Events, repairs, metrics.

        `audit` includes the schedule-integrity check (it reads every pending
        bucket, so it may run less often than the rest). Jobs are judged and acted on one at
        a time, and each job's verdicts go to the metrics as it is judged: the pass holds no
        job, and no verdicts but those `keep` asks for (with a reference to the job, not the
        job), so its memory does not grow with the jobs (10,000 jobs' verdicts were 16 MiB).
        """
        now = self._clock.now()
        gauges = self._gauges()
        failing: set[tuple[str, str]] = set()
        kept = []
        for item in self._assessed(now, audit=audit):
            try:
                self._apply(item, now, audit=audit)
                if audit and self._repair and item.report.chain.repair_needed:
                    self.repair(item.job, now)
            except ApiException as err:
                if err.status != 404:  # a job deleted meanwhile is simply gone
                    log.warning("watchdog: %s/%s: %s", item.facts.namespace, item.facts.name, err.reason)
            self._report_launch(item, failing)
            gauges.add(item)
            if keep(item):
                kept.append(dataclasses.replace(item, job=reference(item.job)))
        self._launch_failing = failing
        gauges.publish()
        return kept

    def _report_launch(self, item: Assessed, failing: set[tuple[str, str]]) -> None:
        """A Warning Event when a job starts failing to launch, a Normal one when it stops; the
        job joins `failing`, this pass's jobs that are."""
        key = (item.facts.namespace, item.facts.name)
        launch = item.report.launch
        if launch.status:
            failing.add(key)
            if key not in self._launch_failing:
                self._events.emit(item.job, type_=WARNING, reason=str(launch.kind), message=launch.message)
                log.warning("%s %s/%s: %s", launch.kind, *key, launch.message)
        elif key in self._launch_failing:
            self._events.emit(
                item.job, type_=NORMAL, reason=EventReason.RECOVERED, message=f"{launch.kind} cleared: {launch.message}"
            )

    def _apply(self, item: Assessed, now: datetime, *, audit: bool) -> None:
        findings = [
            f for f in item.report.findings
            if f.kind.watchdog_writes_condition and (audit or f is not item.report.chain)
        ]  # fmt: skip
        if not item.facts.scheduled and not any(f.applicable and f.status for f in findings):
            # Its controller has not handled the job's spec yet: nothing is wrong to say, and
            # writing that nothing is would cost each new job a write of its own while thousands
            # wait for their first (the controller's status follows within seconds; the next
            # pass writes the conditions then). An alarm is written at once.
            return
        cached = (item.job.get("status") or {}).get("conditions") or []
        generation = int(item.job["metadata"].get("generation", 0))
        if _conditions(cached, findings, generation, now) == cached:
            return  # nothing changes on the copy this pass judged: no write
        meta = item.job["metadata"]
        before: dict[str, Any] = {}

        def step(status: Mapping[str, Any], generation: int) -> dict[str, Any]:
            # Folded on the job as written, not on the cached copy: another writer's conditions
            # (Invalid, Ready, LaunchFailing) since the copy was read stay.
            old = list(status.get("conditions") or [])
            before.clear()
            before.update({c["type"]: c.get("status") for c in old})
            new = _conditions(old, findings, generation, now)
            return {"conditions": new} if new != old else {}

        def then(job: Mapping[str, Any]) -> None:
            for finding in findings:
                was = before.get(str(finding.kind))
                if finding.applicable and finding.status and was != "True":
                    self._events.emit(job, type_=WARNING, reason=str(finding.kind), message=finding.message)
                    log.warning("%s %s/%s: %s", finding.kind, meta["namespace"], meta["name"], finding.message)
                elif was == "True" and not finding.status:
                    self._events.emit(
                        job, type_=NORMAL, reason=EventReason.RECOVERED, message=f"{finding.kind} cleared: {finding.message}"
                    )

        key = (meta["namespace"], meta["name"])
        self._writer.write_now(key, Change(str(meta["uid"]), step, then))

    def repair(self, job: Mapping[str, Any], now: datetime) -> bool:
        """Re-enter a broken chain's head from the last occurrence it handled; True if inserted."""
        if self._store is None:
            return False
        try:
            view, _ = job_view(job)
        except InvalidJob:
            return False
        last = ((job.get("status") or {}).get("chain") or {}).get("lastNominal")
        if last:
            head = chain_head(view, after=datetime.fromisoformat(last.replace("Z", "+00:00")))
            entry = resume_entry(view, paused_at=head.nominal, now=now) if head is not None else None
        else:
            entry = chain_head(view, after=now)
        if entry is None:
            return False
        self._store.insert(entry)
        self._events.emit(
            job, type_=NORMAL, reason=EventReason.CHAIN_REPAIRED,
            message=f"schedule chain re-entered at {entry.nominal.isoformat()}; the catch-up policy decides the gap",
        )  # fmt: skip
        log.warning("repaired the schedule chain of %s/%s", job["metadata"]["namespace"], job["metadata"]["name"])
        return True


def reference(job: Mapping[str, Any]) -> dict[str, Any]:
    """What an Event about the job needs of it (its involvedObject), and nothing else."""
    meta = job["metadata"]
    kept = ("namespace", "name", "uid", "resourceVersion", "generation")
    return {
        "apiVersion": job.get("apiVersion"),
        "kind": job.get("kind"),
        "metadata": {k: meta[k] for k in kept if k in meta},
    }


def _conditions(
    conditions: list[dict[str, Any]], findings: list[Finding], generation: int, now: datetime
) -> list[dict[str, Any]]:
    """`conditions` with each finding's condition set (or removed, where it does not apply)."""
    for finding in findings:
        if not finding.applicable:
            conditions = [c for c in conditions if c.get("type") != str(finding.kind)]
            continue
        conditions = set_condition(
            conditions, type_=str(finding.kind), status=finding.status, reason=str(finding.reason),
            message=finding.message, generation=generation, now=now,
        )  # fmt: skip
    return conditions
