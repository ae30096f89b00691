"""A status write built from its model (`model/statuspatch.py`): a merge patch is cut to the fields
whose typed values change, so a change already on the object writes nothing, and a field the model
cannot read is left for the API server to judge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vigil.core.executions import (
    AttemptOutcome,
    AttemptResult,
    RetryPolicy,
    execution_to_dict,
    finish,
    new_execution,
    start,
)
from vigil.core.ids import ExecutionId
from vigil.model.execution import ExecutionStatus
from vigil.model.scheduledjob import ScheduledJobStatus
from vigil.model.statuspatch import changed_fields, merge_patched

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class TestMergePatched:
    def test_a_null_removes_an_object_merges_and_anything_else_replaces(self) -> None:
        target = {"nextRun": "a", "chain": {"scheduleHash": "h", "pausedAt": "p"}, "active": [{"executionId": "x"}]}
        patch = {"nextRun": None, "chain": {"pausedAt": None, "lastNominal": "n"}, "active": []}
        assert merge_patched(target, patch) == {"chain": {"scheduleHash": "h", "lastNominal": "n"}, "active": []}
        assert target["nextRun"] == "a", "the target is left as it was"

    def test_an_object_onto_nothing_loses_its_nulls(self) -> None:
        assert merge_patched({}, {"chain": {"pausedAt": None, "lastNominal": "n"}}) == {"chain": {"lastNominal": "n"}}


class TestScheduledJob:
    def test_only_the_fields_whose_values_change_are_kept(self) -> None:
        status = {"nextRun": "2026-12-01T12:00:00Z", "schedule": "every 1m", "active": []}
        patch = {"nextRun": "2026-12-01T12:00:00+00:00", "schedule": "every 2m", "active": []}
        assert changed_fields(ScheduledJobStatus, status, patch) == {"schedule": "every 2m"}

    def test_a_change_already_on_the_job_changes_nothing(self) -> None:
        status = {"chain": {"scheduleHash": "h", "lastNominal": "2026-12-01T12:00:00Z"}, "lastScheduleTime": "2026-12-01T12:00:00Z"}
        assert changed_fields(ScheduledJobStatus, status, {"chain": {"lastNominal": "2026-12-01T12:00:00Z"}}) == {}
        assert changed_fields(ScheduledJobStatus, {}, {"active": [], "recent": [], "nextRun": None}) == {}

    def test_a_chain_key_that_changes_keeps_the_patch_of_its_keys(self) -> None:
        status = {"chain": {"scheduleHash": "h", "pausedAt": "2026-12-01T12:00:00Z"}}
        assert changed_fields(ScheduledJobStatus, status, {"chain": {"pausedAt": None}}) == {"chain": {"pausedAt": None}}

    def test_a_field_the_model_cannot_read_is_left_with_the_other_changes_for_the_api_server(self) -> None:
        patch = {"observedGeneration": "not a number", "schedule": "every 1h", "nextRun": "2026-12-01T12:00:00Z"}
        assert changed_fields(ScheduledJobStatus, {"schedule": "every 1h"}, patch) == {
            "observedGeneration": "not a number",
            "nextRun": "2026-12-01T12:00:00Z",
        }

    def test_an_unchanged_field_is_not_read(self) -> None:
        """Its JSON is the same: however the model would read it, it reads the same."""
        unreadable = {"occurrences": [{"nominal": "yesterday"}]}
        assert changed_fields(ScheduledJobStatus, unreadable, {**unreadable, "schedule": "every 1h"}) == {"schedule": "every 1h"}

    def test_a_key_the_model_does_not_know_is_kept(self) -> None:
        assert changed_fields(ScheduledJobStatus, {}, {"somethingNew": 1}) == {"somethingNew": 1}


class TestExecution:
    def test_the_same_transition_twice_changes_nothing_the_second_time(self) -> None:
        ex = new_execution(ExecutionId("ex-1"), namespace="ns", job="job", scheduled_for=T0, now=T0)
        running = start(ex, pod="ex-1-1", now=T0 + timedelta(milliseconds=250))
        ended = finish(running, AttemptResult(1, AttemptOutcome.SUCCEEDED, "Completed"), policy=RetryPolicy(), now=T0 + timedelta(seconds=3))
        cleared = dict.fromkeys(("retryAt", "startedAt", "finishedAt", "pod"))
        stored = execution_to_dict(running)

        patch = changed_fields(ExecutionStatus, stored, {**cleared, **execution_to_dict(ended)})

        assert {"phase", "finishedAt", "attempts"} <= patch.keys()
        assert "scheduledFor" not in patch and "retryAt" not in patch, "unchanged, or absent and staying so"
        assert changed_fields(ExecutionStatus, merge_patched(stored, patch), {**cleared, **execution_to_dict(ended)}) == {}
