"""Writing executions to the history database, off the firing path and without losing any.

Every change the Execution cache sees marks that execution pending; this
flusher writes one row per attempt of each pending one (an upsert keyed on
execution id and attempt) and remembers which version of it is written. While
the database is unreachable nothing is lost and nothing waits on it: the
Executions themselves are the buffer, durable in the API server — retention
deletes one only once the version it holds is written. A new leader's cache
announces every Execution, so it writes them all once more (harmless: the write
is idempotent) before any can go.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from vigil.core.executions import AttemptOutcome, Execution, Phase
from vigil.core.history import AttemptRecord, AttemptState
from vigil.core.ports import HistorySink, HistoryUnavailable
from vigil.kube.stores.executions import ExecutionStore, readable

log = logging.getLogger(__name__)

BATCH = 200
Key = tuple[str, str]

_STATE = {
    Phase.READY: AttemptState.READY,
    Phase.RUNNING: AttemptState.RUNNING,
    Phase.BACKOFF: AttemptState.FAILED,
    Phase.SUCCEEDED: AttemptState.SUCCEEDED,
    Phase.DEAD: AttemptState.DEAD,
    Phase.CANCELLED: AttemptState.CANCELLED,
}


def attempt_records(obj: Mapping[str, Any], ex: Execution) -> list[AttemptRecord]:
    """One row per attempt: finished ones from their results, the current one from the phase."""
    spec = obj["spec"]
    common = {
        "execution_id": ex.execution_id,
        "namespace": ex.namespace,
        "job": ex.job,
        "job_uid": spec["job"]["uid"],
        "priority": str(ex.priority),
        "scheduled_for": ex.scheduled_for,
    }
    rows: list[AttemptRecord] = []
    for result in ex.attempts:
        state = AttemptState.SUCCEEDED if result.outcome == AttemptOutcome.SUCCEEDED else AttemptState.FAILED
        if result.outcome == AttemptOutcome.CANCELLED:
            state = AttemptState.CANCELLED
        if result.attempt == ex.attempt and ex.phase is Phase.DEAD:
            state = AttemptState.DEAD
        rows.append(
            AttemptRecord(
                **common,
                attempt=result.attempt,
                state=state,
                reason=result.reason,
                started_at=result.started_at,
                finished_at=result.finished_at,
                pod=f"{ex.execution_id}-{result.attempt}",
                error=result.message,
            )
        )
    if not ex.recorded(ex.attempt) and ex.phase in (Phase.READY, Phase.RUNNING):
        rows.append(
            AttemptRecord(
                **common,
                attempt=ex.attempt,
                state=_STATE[ex.phase],
                reason=ex.reason,
                started_at=ex.started_at,
                pod=ex.pod or "",
            )
        )
    return rows


#: Called with (namespace, job name, job uid) for each job some of whose executions were written.
Written = Callable[[str, str, str], object]


class HistoryFlusher:
    def __init__(self, *, store: ExecutionStore, sink: HistorySink, on_written: Written | None = None) -> None:
        self._store = store
        self._sink = sink
        self._on_written = on_written
        self._lock = threading.Lock()
        self._pending: set[Key] = set()
        self._written: dict[Key, str] = {}  # the resourceVersion whose rows are in the database
        self.pending = 0  # the buffer's depth, for the metric

    def changed(self, key: Key, obj: Mapping[str, Any], deleted: bool) -> None:
        """The Execution cache's handler: a changed execution waits to be written."""
        with self._lock:
            if deleted:
                self._pending.discard(key)
                self._written.pop(key, None)
            else:
                self._pending.add(key)

    def written(self, obj: Mapping[str, Any]) -> bool:
        """Is this version of the execution in the history database?"""
        meta = obj["metadata"]
        with self._lock:
            return bool(self._written.get((meta["namespace"], meta["name"])) == meta.get("resourceVersion"))

    def flush(self) -> int:
        """Write every pending execution; returns how many were written (0 while the database is down).

        A batch at a time is read from the cache, written and let go: a new leader's cache
        announces every retained Execution, and 10,000 of them decoded at once were the
        leader's largest allocation (53 MiB).
        """
        with self._lock:
            keys = sorted(self._pending)
        self.pending = len(keys)
        written = 0
        jobs: set[tuple[str, str, str]] = set()
        try:
            for start in range(0, len(keys), BATCH):
                batch = self._current(keys[start : start + BATCH])
                records = [r for obj, ex in readable(batch) for r in attempt_records(obj, ex)]
                try:
                    self._sink.write(records)
                except HistoryUnavailable as err:
                    log.warning("history database unavailable; %d executions stay buffered: %s", self.pending, err)
                    return written
                self._mark_written(batch)
                written += len(batch)
                self.pending = max(0, len(keys) - start - BATCH)
                jobs.update((o["metadata"]["namespace"], o["spec"]["job"]["name"], o["spec"]["job"]["uid"]) for o in batch)
        finally:
            self._after_written(jobs)
        return written

    def _current(self, keys: list[Key]) -> list[dict[str, Any]]:
        """The cached objects of `keys`; a key whose execution is gone is no longer pending."""
        objs = [o for o in (self._store.cached(*k) for k in keys) if o is not None]
        found = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs}
        with self._lock:
            self._pending.difference_update(set(keys) - found)
        return objs

    def _mark_written(self, batch: list[dict[str, Any]]) -> None:
        with self._lock:
            for obj in batch:
                meta = obj["metadata"]
                key = (meta["namespace"], meta["name"])
                self._written[key] = meta["resourceVersion"]
                current = self._store.cached(*key)
                if current is None or current["metadata"].get("resourceVersion") == meta["resourceVersion"]:
                    self._pending.discard(key)  # else changed meanwhile: it stays pending

    def _after_written(self, jobs: set[tuple[str, str, str]]) -> None:
        """Tell each job whose executions were written (retention may delete older ones now)."""
        if self._on_written is None:
            return
        for namespace, name, uid in sorted(jobs):
            try:
                self._on_written(namespace, name, uid)
            except Exception:  # retention is housekeeping: the next flush of this job tries again
                log.exception("after writing the history of %s/%s", namespace, name)
