"""The ScheduledJob status folds of `model/jobpatches.py` that the job's status writer tests do not
reach: how the end of a workflow the job started reads in its `recent` list and LAST SUCCESS."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import Event, Record
from vigil.model.jobpatches import workflow_end_patch

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class TestWorkflowEnd:
    def test_an_end_is_recorded_bounded_and_once_per_workflow(self) -> None:
        job = {"recent": [{"executionId": f"w{i}"} for i in range(5)], "lastSuccessfulTime": format_rfc3339(T0)}
        later = T0 + timedelta(minutes=1)
        patch = workflow_end_patch(job, workflow="w4", scheduled_for=None, new=[Record(Event.WORKFLOW_SUCCEEDED, later)], size=3)
        assert patch is not None
        assert [r["executionId"] for r in patch["recent"]] == ["w2", "w3", "w4"]
        assert patch["recent"][-1]["outcome"] == "Succeeded"
        assert patch["lastSuccessfulTime"] == format_rfc3339(later)

    def test_no_end_no_patch_and_a_failure_keeps_the_last_success(self) -> None:
        assert workflow_end_patch({}, workflow="w", scheduled_for=None, new=[Record(Event.STEP_FAILED, T0, "a")], size=3) is None
        patch = workflow_end_patch({}, workflow="w", scheduled_for="s", new=[Record(Event.WORKFLOW_FAILED, T0)], size=3)
        assert patch == {"recent": [{
            "executionId": "w", "attempt": 1, "outcome": "Failed", "scheduledFor": "s",
            "finishedAt": format_rfc3339(T0), "reason": "WorkflowFailed",
        }]}  # fmt: skip
