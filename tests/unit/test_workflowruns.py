"""A workflowTemplate job's concurrency policy: the pure rule.

`workflow_concurrency` gives the same answers as a pod job's executions: Allow starts, Forbid skips
while a workflow of the job is in flight (Pending, Running or Compensating), Replace cancels every one
in flight; a repeated launch of an occurrence whose workflow exists proceeds and touches nothing.
"""

from __future__ import annotations

import pytest

from vigil.core.executions import ConcurrencyPolicy, ExecutionReason
from vigil.core.ids import ExecutionId
from vigil.core.workflowruns import workflow_concurrency

NEW = ExecutionId("job-new")


@pytest.mark.parametrize(
    ("policy", "workflows", "start", "replace", "reason"),
    [
        pytest.param("Forbid", {}, True, (), ExecutionReason.NO_ACTIVE_EXECUTION, id="nothing running: starts"),
        pytest.param(
            "Forbid", {"a": "Succeeded", "b": "Cancelled"}, True, (), ExecutionReason.NO_ACTIVE_EXECUTION,
            id="only finished ones: starts",
        ),
        pytest.param("Forbid", {"a": "Running"}, False, (), ExecutionReason.CONCURRENCY_FORBID, id="forbid skips"),
        pytest.param(
            "Forbid", {"a": None}, False, (), ExecutionReason.CONCURRENCY_FORBID,
            id="a workflow not started yet is in flight",
        ),
        pytest.param(
            "Forbid", {"a": "Compensating"}, False, (), ExecutionReason.CONCURRENCY_FORBID,
            id="compensating is in flight",
        ),
        pytest.param(
            "Replace", {"b": "Running", "a": "Pending", "c": "Failed"}, True, ("a", "b"),
            ExecutionReason.CONCURRENCY_REPLACE, id="replace cancels every one in flight",
        ),
        pytest.param("Allow", {"a": "Running"}, True, (), ExecutionReason.CONCURRENCY_ALLOW, id="allow starts"),
        pytest.param(
            "Replace", {"job-new": "Running", "a": "Running"}, True, (), ExecutionReason.ALREADY_CREATED,
            id="a repeated launch proceeds and cancels nothing",
        ),
        pytest.param(
            "Forbid", {"job-new": None, "a": "Running"}, True, (), ExecutionReason.ALREADY_CREATED,
            id="a repeated launch is never skipped by its own workflow",
        ),
    ],
)
def test_workflow_concurrency(
    policy: str, workflows: dict[str, str | None], start: bool, replace: tuple[str, ...], reason: ExecutionReason
) -> None:
    decision = workflow_concurrency(
        ConcurrencyPolicy(policy), {ExecutionId(k): v for k, v in workflows.items()}, incoming=NEW
    )
    assert (decision.start, decision.replace, decision.reason) == (start, replace, reason)
