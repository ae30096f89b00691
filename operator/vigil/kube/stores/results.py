"""What became of an attempt, written to its Execution and to its ScheduledJob.

A pod's phase change (or its disappearance) is classified by the pure
`vigil.core.podstatus`, folded into the execution by `vigil.core.executions`
(Succeeded, Backoff with a stored retry time, Dead, Cancelled), and written
with a version precondition. The job's status follows — active and recent
executions, LAST SUCCESS (what the watchdog asserts), the DeadLettered
condition — through the job's one status writer (`kube/stores/jobstatus.py`), which
folds it with `model/jobpatches.transition_patch`; tools and tests flush it.
Events tell the story: Retrying, DeadLettered, Cancelled. A run asked for by hand
(`source: Manual`, `kubectl vigil run`) also enters the job's ledger, as Manual
with its request id, when its first transition is recorded.
Seeing the same pod event twice changes nothing: an attempt is recorded once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from vigil.core.conditions import ConditionReason, EventReason
from vigil.core.executions import Execution, Phase
from vigil.core.ports import Clock
from vigil.core.timeparse import format_rfc3339
from vigil.kube.kits.events import NORMAL, WARNING, EventRecorder
from vigil.kube.stores.executions import ExecutionStore, execution_from_object
from vigil.kube.stores.jobstatus import JobStatusWriter
from vigil.model.execution import ExecutionSource
from vigil.model.names import ANNOTATION_REQUEST_ID

log = logging.getLogger(__name__)


class JobResults:
    def __init__(
        self,
        *,
        store: ExecutionStore,
        events: EventRecorder,
        clock: Clock,
        writer: JobStatusWriter,
        on_transition: Callable[[Execution, Execution], None] = lambda before, after: None,
    ) -> None:
        self._writer = writer
        self._store = store
        self._events = events
        self._clock = clock
        self._on_transition = on_transition

    def record(self, obj: Mapping[str, Any], ex: Execution) -> None:
        """Store an execution's transition, then tell its job (through the job's one status
        writer: one status write per job per interval for all its executions' transitions) and
        the world (its Events, once the job is written)."""
        self._store.write(obj, ex)
        self._on_transition(execution_from_object(obj), ex)
        ref = obj["spec"]["job"]
        self._writer.add_transition(
            obj["metadata"]["namespace"], ref["name"], ref["uid"], ex, now=self._clock.now(),
            then=lambda job: self.announce(job, ex), manual=manual_request(obj),
        )  # fmt: skip

    def announce(self, job: Mapping[str, Any], ex: Execution) -> None:
        last = ex.attempts[-1] if ex.attempts else None
        detail = f"{last.reason}: {last.message}" if last and last.message else (last.reason if last else "")
        if ex.phase is Phase.BACKOFF and ex.retry_at is not None:
            self._events.emit(
                job, type_=WARNING, reason=EventReason.RETRYING,
                message=f"execution {ex.execution_id} attempt {ex.attempt - 1} failed ({detail}); "
                f"attempt {ex.attempt} at {format_rfc3339(ex.retry_at)}",
            )  # fmt: skip
        elif ex.phase is Phase.DEAD:
            self._events.emit(
                job, type_=WARNING, reason=ConditionReason.DEAD_LETTERED,
                message=f"execution {ex.execution_id} dead-lettered after {ex.attempt} attempts ({detail})",
            )  # fmt: skip
        elif ex.phase is Phase.CANCELLED:
            self._events.emit(job, type_=NORMAL, reason=EventReason.CANCELLED, message=f"execution {ex.execution_id}: {ex.reason}")
        log.info("execution %s/%s -> %s (%s)", ex.namespace, ex.execution_id, ex.phase, detail)


def manual_request(obj: Mapping[str, Any]) -> str | None:
    """The request id of an Execution asked for by hand (`source: Manual`), else None."""
    if (obj.get("spec") or {}).get("source") != ExecutionSource.MANUAL:
        return None
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_REQUEST_ID) or obj["metadata"]["name"])
