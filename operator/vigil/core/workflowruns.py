"""A workflowTemplate job's concurrency policy: whether its next workflow starts while others run.

The same policy, and the same answers, as a pod job's executions
(:func:`vigil.core.executions.concurrency`): Allow starts it regardless; Forbid
skips the occurrence while a workflow of the job is still in flight; Replace
cancels the ones in flight and starts it. In flight is every phase but the
finished ones — Pending (created, not started yet), Running, Compensating. Each
workflow is named by its occurrence's execution id, so a repeated launch of an
occurrence whose workflow exists already proceeds (its create is then a 409),
never skipping or cancelling itself. Pure: the caller lists the job's workflows.
"""

from __future__ import annotations

from collections.abc import Mapping

from vigil.core.executions import ConcurrencyDecision, ConcurrencyPolicy, ExecutionReason
from vigil.core.ids import ExecutionId
from vigil.core.workflow import TERMINAL_WORKFLOW_PHASES


def workflow_concurrency(
    policy: ConcurrencyPolicy | str,
    workflows: Mapping[ExecutionId, str | None],
    *,
    incoming: ExecutionId,
) -> ConcurrencyDecision:
    """The decision for the occurrence `incoming`, given the job's workflows (name -> phase;
    None before the operator wrote one)."""
    policy = ConcurrencyPolicy(policy)
    if incoming in workflows:
        return ConcurrencyDecision(start=True, replace=(), reason=ExecutionReason.ALREADY_CREATED)
    in_flight = tuple(sorted(name for name, phase in workflows.items() if phase not in TERMINAL_WORKFLOW_PHASES))
    if not in_flight:
        return ConcurrencyDecision(start=True, replace=(), reason=ExecutionReason.NO_ACTIVE_EXECUTION)
    if policy is ConcurrencyPolicy.FORBID:
        return ConcurrencyDecision(start=False, replace=(), reason=ExecutionReason.CONCURRENCY_FORBID)
    if policy is ConcurrencyPolicy.REPLACE:
        return ConcurrencyDecision(start=True, replace=in_flight, reason=ExecutionReason.CONCURRENCY_REPLACE)
    return ConcurrencyDecision(start=True, replace=(), reason=ExecutionReason.CONCURRENCY_ALLOW)
