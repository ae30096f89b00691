"""The one writer of a ScheduledJob's status on the leader: the ledger and the executions' summary.

Four sources change a job's status: its controller (conditions, the schedule in words, the
chain's schedule hash, `observedGeneration`: `kube/controllers/jobcontroller.py`), the trigger's plans (the
ledger, the chain's progress, LAST SCHEDULED, NEXT RUN), its executions' transitions (active,
recent, LAST SUCCESS, DeadLettered) and the ends of the workflows it started (recent, LAST
SUCCESS: `kube/controllers/workflows.py`). The watchdog's conditions come here too (`kube/controllers/watchdog.py`),
from the leader or from a watchdog process with a writer of its own: every write is conditional
on the version read and folded again on the job as it is, so no writer undoes another's.
All of them come here per job, in order. A job is written at most once an
interval: the queue takes it, reads it from the cache, folds every waiting change into the
status with the pure folds of `model/jobpatches.py`, builds the status as it is and as it would
be from `ScheduledJobStatus` and writes only the fields that differ, once, conditional on the
version read (a conflict reads it again from the API server and folds again). A change already
on the job writes nothing (`model/statuspatch.py`). The ledger and the executions' transitions
have no other writer: tools and tests flush this one (`flush`).
The first change after a quiet spell waits one interval too, so a short execution's fire and its
end usually share one write. A change that only says an execution began (a plan of fires, a
transition that is not an end) may wait longer, `BEGIN_WAIT_SECONDS` after the last such
change (the fire, then the start) and at most twice that after the first, for that execution's
end to share its write: in a burst every execution is another job's, and its fire and its end
would otherwise cost two writes. LAST SCHEDULED, NEXT RUN and ACTIVE may lag that long; an end,
and anything else, is written within the interval. A plan that must be on the job before its bucket
is marked (`urgent`), and a reconcile of the job's spec, are written at once with
whatever waits for the job.

While the dispatcher has pods to create (`hold`), every job's waiting changes wait too, at most
twice `BEGIN_WAIT_SECONDS` after the first: in a burst the API server is the bottleneck, and
starting due work comes before summarising work that started or ended. Each job status write
rewrites the whole ScheduledJob (its ledger and recent list too); in a 1,000-job burst with
jitter off, a thousand of them came while pods waited to be created, and holding them moved
the pods' observed p99 from 25.0 s to 14.3 s (one run each, `make bench`).

A leader stopping gracefully writes whatever waits before it releases its Lease (`flush`);
what waits here is lost only on a crash. It is only the job's summary and the Fired entries of its
ledger: every Execution holds its own truth and the history database keeps every attempt.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.chain import EntryPlan
from vigil.core.executions import Execution
from vigil.core.ports import Conflict
from vigil.kube.kits.conflicts import conflict_from, retry_on_conflict
from vigil.kube.kits.workqueue import WorkQueue
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.model import GROUP, VERSION
from vigil.model.jobpatches import ledger_patch, transition_patch
from vigil.model.names import SCHEDULED_JOBS
from vigil.model.scheduledjob import ScheduledJobStatus
from vigil.model.statuspatch import changed_fields

log = logging.getLogger(__name__)

WRITE_INTERVAL_SECONDS = 1.0  # at most one status write per job this often
BEGIN_WAIT_SECONDS = 10.0  # how long a fire or a start may wait for its execution's end
HOLD_RECHECK_SECONDS = 0.5  # a job held back while pods are being created is looked at this often
LOCK_STRIPES = 64

Key = tuple[str, str]
#: What to do once the change is on the job (its Events), given the job as written.
Then = Callable[[Mapping[str, Any]], None]


#: The fields one change sets, given the status so far and the job's generation.
Step = Callable[[Mapping[str, Any], int], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Change:
    """One waiting change: a trigger plan, an execution's transition, a workflow's end."""

    uid: str
    step: Step
    then: Then
    begins: bool = False  # only says an execution began: may wait for its end (BEGIN_WAIT_SECONDS)


def fold(status: Mapping[str, Any], changes: list[Change], *, generation: int) -> dict[str, Any]:
    """The status patch that applies `changes` in order to `status`: only the fields they set,
    with `chain` holding only its changed keys (a merge patch keeps the rest)."""
    current: dict[str, Any] = dict(status)
    patch: dict[str, Any] = {}
    for change in changes:
        step = change.step(current, generation)
        chain = step.pop("chain", None)
        if chain:
            current["chain"] = {**(current.get("chain") or {}), **chain}
            patch["chain"] = {**(patch.get("chain") or {}), **chain}
        current.update(step)
        patch.update(step)
    return patch


class JobStatusWriter:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        catalogue: KubeCatalogue,
        interval: float = WRITE_INTERVAL_SECONDS,
        begin_wait: float = BEGIN_WAIT_SECONDS,
        workers: int = 8,
        hold: Callable[[], bool] = lambda: False,
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._catalogue = catalogue
        self._interval = interval
        self._begin_wait = max(begin_wait, interval)
        #: Whether pods are waiting to be created (the dispatcher's): due writes wait meanwhile.
        self._hold = hold
        self._lock = threading.Lock()
        self._waiting: dict[Key, list[Change]] = {}
        self._due: dict[Key, float] = {}  # when each job with changes waiting is written (monotonic)
        self._first: dict[Key, float] = {}  # when the first of them was added (monotonic)
        self._last: dict[Key, float] = {}  # when each job was last written (monotonic)
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]  # one job's writes in order
        self.queue: WorkQueue[Key] = WorkQueue("job-status", self._flush, workers=workers)

    # -- what changes -------------------------------------------------------------------------

    def add_plan(self, plan: EntryPlan, *, now: datetime, uid: str, then: Then) -> None:
        change = Change(uid, _plan_step(plan, now), then, begins=not urgent(plan))
        self.add((plan.namespace, plan.name), change)

    def add_transition(
        self, namespace: str, name: str, uid: str, ex: Execution, *, now: datetime, then: Then, manual: str | None = None
    ) -> None:
        """An execution's transition; `manual`: the request id of a run asked for by hand."""
        change = Change(uid, _transition_step(ex, now, manual), then, begins=not ex.phase.terminal)
        self.add((namespace, name), change)

    def write_plan_now(self, plan: EntryPlan, *, now: datetime, uid: str, then: Then) -> None:
        self.write_now((plan.namespace, plan.name), Change(uid, _plan_step(plan, now), then))

    def write_now(self, key: Key, change: Change) -> None:
        """Write the change, with whatever waits for its job, before returning. If the write
        fails, what waited waits again (the caller retries its own change)."""
        with self._stripe(key):
            waiting = self._take(key)
            try:
                self._write(key, [*waiting, change])
            except Exception:
                if waiting:
                    self._put_back(key, waiting)
                    self.queue.add(key)  # they were queued before; the queue may have let them go
                raise

    def flush(self, deadline: float) -> None:
        """Write every job that has changes waiting, now, until `deadline` (monotonic): a leader
        stopping gracefully leaves its successor no ledger entry to miss."""
        with self._lock:
            keys = list(self._waiting)
        for key in keys:
            if time.monotonic() >= deadline:
                log.warning("stopping: %d jobs' status changes left unwritten", self.pending())
                return
            with self._stripe(key):
                changes = self._take(key)
                if not changes:
                    continue
                try:
                    self._write(key, changes)
                except Exception:
                    log.exception("stopping: status of ScheduledJob %s/%s not written", *key)

    def pending(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._waiting.values())

    def add(self, key: Key, change: Change) -> None:
        """Queue a change for the job's next write: within the interval, or, while every change
        waiting only says an execution began, `begin_wait` after the last of them (the fire, then
        the start: under load the end often comes more than `begin_wait` after the fire) and at
        most twice that after the first."""
        with self._lock:
            now = time.monotonic()
            waiting = self._waiting.setdefault(key, [])
            first = self._first.setdefault(key, now)
            if change.begins and all(c.begins for c in waiting):
                due = min(max(now + self._begin_wait, self._due.get(key, now)), first + 2 * self._begin_wait)
            else:
                due = min(self._due.get(key, now + self._interval), now + self._interval)
            self._due[key] = max(due, self._last.get(key, float("-inf")) + self._interval)
            waiting.append(change)
        self.queue.add(key)

    def _take(self, key: Key) -> list[Change]:
        with self._lock:
            self._due.pop(key, None)
            self._first.pop(key, None)
            return self._waiting.pop(key, [])

    def _stripe(self, key: Key) -> threading.Lock:
        return self._stripes[hash(key) % LOCK_STRIPES]

    # -- writing ------------------------------------------------------------------------------

    def _flush(self, key: Key) -> float | None:
        with self._lock:
            now = time.monotonic()
            left = self._due.get(key, 0.0) - now
            first = self._first.get(key)
            held = first is not None and now < first + 2 * self._begin_wait
        if left > 0:
            return left
        if held and self._hold():
            return HOLD_RECHECK_SECONDS
        with self._stripe(key):
            changes = self._take(key)
            if not changes:
                return None
            try:
                self._write(key, changes)
            except Exception:
                self._put_back(key, changes)
                raise
        return None

    def _put_back(self, key: Key, changes: list[Change]) -> None:
        """Changes a failed write took wait again, ahead of any added since."""
        with self._lock:
            self._waiting[key] = [*changes, *self._waiting.get(key, [])]
            self._due[key] = time.monotonic()  # they were due: the queue's retry delay paces them
            self._first.setdefault(key, self._due[key])

    def _write(self, key: Key, changes: list[Change]) -> None:
        """Fold `changes` into the job and write it once (read again on a conflict)."""
        uid = changes[0].uid
        job = self._catalogue.read(*key, uid=uid)

        def attempt() -> None:
            nonlocal job
            if job is None:
                job = self._catalogue.fetch(*key)
            if job is None or job["metadata"]["uid"] != uid:
                return  # deleted (or deleted and created again): its status went with it
            status = job.get("status") or {}
            patch = changed_fields(ScheduledJobStatus, status, fold(status, changes, generation=_generation(job)))
            if not patch:
                return  # the changes are on the job already (another writer's, or an earlier pass)
            try:
                self._patch(job, patch)
            except Conflict:
                job = None
                raise

        retry_on_conflict(attempt)
        with self._lock:
            self._last[key] = time.monotonic()
            if len(self._last) > 4 * len(self._waiting) + 10_000:
                self._last.clear()  # bounded: forgetting only lets one job be written early once
        if job is not None and job["metadata"]["uid"] == uid:
            for change in changes:
                change.then(job)

    def _patch(self, job: Mapping[str, Any], patch: dict[str, Any]) -> None:
        meta = job["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": patch}
        try:
            written = self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], SCHEDULED_JOBS, meta["name"], body
            )
        except ApiException as err:
            conflict_from(err)
            if err.status != 404:
                raise
            return
        if self._catalogue.cache is not None:
            self._catalogue.cache.observe(written)


def urgent(plan: EntryPlan) -> bool:
    """Whether the plan must be on the job before its bucket is marked: anything but fires.

    A Missed, Skipped, Failed or Suspended occurrence exists nowhere else, so it is written before
    the walk moves on. A fire's record is its Execution (named from the execution id, created
    before the mark), so its ledger entry may follow in the job's next coalesced status write.
    """
    return bool(plan.records) or plan.pause_at is not None


def _plan_step(plan: EntryPlan, now: datetime) -> Step:
    return lambda status, generation: ledger_patch(status, plan, now, generation=generation)


def _transition_step(ex: Execution, now: datetime, manual: str | None = None) -> Step:
    return lambda status, generation: transition_patch(status, ex, generation=generation, now=now, manual=manual)


def _generation(job: Mapping[str, Any]) -> int:
    return int(job["metadata"].get("generation", 0))
