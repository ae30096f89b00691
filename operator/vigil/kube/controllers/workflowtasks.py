"""The tasks of workflow steps: their submissions to the queue store, and their ends as inputs.

A ``task`` step's attempts are the attempts of one execution in the volume tier's store, whose
execution id and idempotency key are the step's stable execution id (a pure function of the
workflow's uid and the step's id, as a pod step's pod names are). So:

* a pass that submits a step's task again (after a crash, a failover, a conflict) adds nothing:
  the store keeps the first row of an id and of a (queue, key);
* a later attempt of the step makes that same execution ready again (the store's ``retry``, at
  the next attempt number), so a worker sees one execution id on every attempt, and the step's
  attempt as the execution's; the queue's own retries are off (``max_attempts`` 1): the step's
  ``retry`` policy decides, as for a pod step;
* its end is read back from the store (:meth:`WorkflowTasks.read`, one statement per pass for
  every running task of the workflow) and recorded as a ``TaskSucceeded`` or ``TaskFailed``
  input (:func:`task_result`); a success carries what the task returned (the execution's
  ``output``, which the worker checked and bounded: vigil.worker.outputs) as the step's output,
  under the bound of a pod step's (:func:`vigil.core.workflow.bounded_output`: 4 KiB as JSON, a
  longer one cut as a termination message is), so the steps that depend on it get it in their
  inputs.

The engine learns of an end by looking: the store tells nobody when an execution settles (its
``vigil_queue`` notifications are for workers, on submit). While a workflow has a task step
running, its passes come at most :data:`TASK_POLL` apart, so a task's end is recorded within
that (plus the pass's own time); a workflow with no task running is never polled.

A task's payload is what a pod step gets in its environment: the workflow, the step, the outputs
of the steps it depends on (``inputs``), the workflow's ``parameters``, and the block's own
``payload``. It is checked as a `task:` job's payload is (``vigil.core.jsonvalues``); a payload
the store refuses (too large, not storable, past the namespace's quota) fails that attempt, with
the refusal as its message, rather than retrying forever. A step stopped while its task runs (a
timeout, a cancel, the workflow failing) has the execution cancelled: a worker's acknowledgement
then changes nothing, and a result that still came in is ignored by the fold (not the attempt
it waits for).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from vigil.core import jsonvalues
from vigil.core.orchestrator import WantedTask
from vigil.core.ports import Clock
from vigil.core.queue import QueueState, QuotaExceeded, Submission, TaskState, queue_key
from vigil.core.submissions import SubmissionRefused
from vigil.core.workflow import Event, Record, bounded_output
from vigil.model.steps.task import TaskCall

log = logging.getLogger(__name__)

#: How long a running task's end may wait to be seen: a workflow with a task step running is
#: passed at least this often (one indexed read of its running tasks each time).
TASK_POLL = timedelta(seconds=1)
#: A step's attempts are the execution's: the queue retries nothing by itself.
TASK_MAX_ATTEMPTS = 1
#: Reasons a task step's attempt failed with (its ``TaskFailed`` input's ``reason``).
REASON_FAILED = "TaskFailed"
REASON_CANCELLED = "TaskCancelled"
REASON_REFUSED = "TaskRefused"


class TaskStore(Protocol):
    """The queue store as the workflow engine uses it (`vigil.queue.store.QueueStore`, handed in
    by the runtime: the adapters do not import each other)."""

    def submit(self, queue: str, submissions: Sequence[Submission], *, now: datetime) -> list[str]: ...

    def states(self, execution_ids: Sequence[str]) -> Mapping[str, TaskState]: ...

    def retry(self, execution_id: str, *, now: datetime) -> object: ...

    def cancel(self, execution_id: str, *, now: datetime, by: str) -> object: ...


def task_payload(
    *, workflow: Mapping[str, Any], step: str, call: TaskCall, inputs: Mapping[str, Any], parameters: Mapping[str, Any]
) -> dict[str, Any]:
    """What the task is given: the workflow and step, its inputs and parameters, the block's payload."""
    meta = workflow["metadata"]
    payload = {
        "workflow": meta["name"],
        "namespace": meta["namespace"],
        "step": step,
        "inputs": dict(inputs),
        "parameters": dict(parameters),
        "payload": call.payload or {},
    }
    return jsonvalues.check_object(payload, path=f"steps[{step}].task")


def task_submission(
    *, workflow: Mapping[str, Any], wanted: WantedTask, call: TaskCall, payload: dict[str, Any]
) -> tuple[str, Submission]:
    """(queue key, submission) of a step's task: its execution id and idempotency key the step's."""
    namespace = workflow["metadata"]["namespace"]
    submission = Submission(
        task=call.name,
        payload=payload,
        priority=call.priority,
        tenant=namespace,  # who the workflow is, never what it says (vigil.core.tenancy)
        max_attempts=TASK_MAX_ATTEMPTS,
        idempotency_key=wanted.execution_id,
        execution_id=wanted.execution_id,
    )
    return queue_key(namespace, call.queue), submission


def task_result(wanted: WantedTask, found: TaskState | None, *, now: datetime) -> Record | None:
    """The input a step's task reports for the attempt the step waits for, or None while it is
    not submitted, waits, runs, or is an earlier attempt's end (a later attempt is then owed)."""
    if found is None:
        return None
    detail: dict[str, Any] = {"task": wanted.execution_id}
    if found.state is QueueState.SUCCEEDED:
        # An earlier attempt's success (a step retried by hand while its cancelled task's
        # acknowledgement won) is a success too: the task did its work.
        output = bounded_output(found.output)
        if output is not None:  # as a pod's: no output, no key
            detail["output"] = output
        return Record(Event.TASK_SUCCEEDED, now, wanted.step, wanted.attempt, detail)
    if found.attempt < wanted.attempt or found.state in (QueueState.READY, QueueState.LEASED):
        return None
    reason = REASON_CANCELLED if found.state is QueueState.CANCELLED else REASON_FAILED
    detail |= {"reason": reason, "message": found.error or ""}
    return Record(Event.TASK_FAILED, now, wanted.step, wanted.attempt, detail)


class WorkflowTasks:
    """The engine's side of task steps: read their states, submit them, make a later attempt
    ready, cancel a stopped one. A refusal by the store is kept until a pass records it."""

    def __init__(self, store: TaskStore, *, clock: Clock, poll: timedelta = TASK_POLL) -> None:
        self._store = store
        self._clock = clock
        self.poll = poll
        self._lock = threading.Lock()
        #: (execution id, attempt) -> why the store refused it; read once by :meth:`result`.
        self._refused: dict[tuple[str, int], str] = {}

    def read(self, wanted: Sequence[WantedTask]) -> dict[str, TaskState]:
        """The states of the wanted tasks' executions, by id (those not enqueued left out)."""
        return dict(self._store.states([w.execution_id for w in wanted])) if wanted else {}

    def result(self, wanted: WantedTask, found: Mapping[str, TaskState], *, now: datetime) -> Record | None:
        with self._lock:
            refused = self._refused.pop((wanted.execution_id, wanted.attempt), None)
        if refused is not None:
            detail = {"task": wanted.execution_id, "reason": REASON_REFUSED, "message": refused}
            return Record(Event.TASK_FAILED, now, wanted.step, wanted.attempt, detail)
        return task_result(wanted, found.get(wanted.execution_id), now=now)

    @staticmethod
    def owed(wanted: WantedTask, found: TaskState | None) -> bool:
        """Whether a wanted task needs the store: not enqueued, or owed a later attempt than its
        last, which ended. Anything else waits or runs already."""
        if found is None:
            return True
        return found.state in (QueueState.DEAD, QueueState.CANCELLED) and found.attempt < wanted.attempt

    def carry_out(
        self,
        owed: Sequence[tuple[WantedTask, TaskState | None, TaskCall, Mapping[str, Any]]],
        *,
        workflow: Mapping[str, Any],
        parameters: Mapping[str, Any],
    ) -> bool:
        """For each (wanted task, its state, its step's block, its inputs) that is :meth:`owed`:
        make a later attempt ready again, or submit it — the new ones of one queue in one
        transaction, one by one only when the store refuses the batch, so a refusal is the
        refused step's alone. True when the store refused one: a pass records the refusal next."""
        now = self._clock.now()
        batches: dict[str, list[tuple[WantedTask, Submission]]] = {}
        refused = False
        for wanted, found, call, inputs in owed:
            if found is not None:
                self._store.retry(wanted.execution_id, now=now)  # a dead or cancelled one only: idempotent
                continue
            try:
                payload = task_payload(workflow=workflow, step=wanted.step, call=call, inputs=inputs, parameters=parameters)
            except jsonvalues.UnsafeValue as unsafe:
                refused |= self._refuse(wanted, unsafe)
                continue
            queue, submission = task_submission(workflow=workflow, wanted=wanted, call=call, payload=payload)
            batches.setdefault(queue, []).append((wanted, submission))
        for queue, batch in batches.items():
            try:
                self._store.submit(queue, [submission for _, submission in batch], now=now)
            except (SubmissionRefused, QuotaExceeded):
                for wanted, submission in batch:  # which of them: each on its own
                    try:
                        self._store.submit(queue, [submission], now=now)
                    except (SubmissionRefused, QuotaExceeded) as error:
                        refused |= self._refuse(wanted, error)
        return refused

    def _refuse(self, wanted: WantedTask, error: Exception) -> bool:
        log.warning("workflow step %s: task %s refused: %s", wanted.step, wanted.execution_id, error)
        with self._lock:
            self._refused[(wanted.execution_id, wanted.attempt)] = str(error)
        return True

    def stop(self, execution_id: str, *, by: str) -> None:
        """Cancel a stopped step's task if it waits or runs (nothing otherwise)."""
        self._store.cancel(execution_id, now=self._clock.now(), by=by)
