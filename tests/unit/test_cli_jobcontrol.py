"""`run`, `suspend` and `resume`, their pure parts: the manual run's id and period, the patches.

A manual run's execution id is a function of the job's uid and the request id
only — the same request twice is the same execution, another request or
another job a different one, and none ever equals a scheduled occurrence's id.
Its period is the job's latest occurrence at or before the request. The
default request id is the UTC minute; only pod-template jobs may be run. `suspend` writes `suspendedBy` with the
caller's name and refuses a job already suspended; `resume` clears all three
fields and refuses a job that is not suspended; both carry the version read.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.cli.errors import BadInput
from vigil.cli.jobcontrol import (
    default_request_id,
    plan_run,
    request_id_arg,
    resume_patch,
    run_refusal,
    suspend_patch,
)
from vigil.core.chain import JobView
from vigil.core.ids import execution_id, manual_execution_id
from vigil.model.jobspec import job_view

UID = "9b2e4c1a-0000-4000-8000-000000000001"
AT = datetime(2026, 8, 1, 2, 30, 17, 250000, tzinfo=UTC)


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "report", "namespace": "team-a", "uid": UID, "resourceVersion": "41",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}, **spec},
    }  # fmt: skip


def view_of(obj: dict[str, Any]) -> JobView:
    return job_view(obj)[0]


def test_the_same_request_is_the_same_execution_and_never_a_scheduled_one() -> None:
    first = manual_execution_id(UID, "deploy-42")
    assert manual_execution_id(UID, "deploy-42") == first
    assert manual_execution_id(UID, "deploy-43") != first
    assert manual_execution_id(UID.replace("1", "2"), "deploy-42") != first
    assert first != execution_id(UID, AT.replace(microsecond=0))
    assert first.startswith("ex-") and len(first) == 19


def test_a_manual_run_stands_for_the_latest_occurrences_period() -> None:
    run = plan_run(view_of(job(cron="0 * * * *")), request_id="r1", now=AT)
    assert run.execution_id == manual_execution_id(UID, "r1")
    assert run.scheduled_for == AT.replace(microsecond=0)
    assert run.period_end == datetime(2026, 8, 1, 2, 0, tzinfo=UTC)  # the 02:00 occurrence's period
    assert run.period_start == datetime(2026, 8, 1, 1, 0, tzinfo=UTC)


def test_a_manual_run_before_any_occurrence_stands_for_now() -> None:
    run = plan_run(view_of(job(runAt="2026-08-02T00:00:00Z")), request_id="r1", now=AT)
    assert run.period_start == run.period_end == AT.replace(microsecond=0)


def test_the_default_request_id_is_the_utc_minute() -> None:
    assert default_request_id(AT) == "run-20260801t0230z"
    assert default_request_id(AT + timedelta(seconds=40)) == default_request_id(AT)
    assert default_request_id(AT + timedelta(minutes=1)) != default_request_id(AT)
    assert request_id_arg(default_request_id(AT)) == default_request_id(AT)


@pytest.mark.parametrize("text", ["", "-x", "a b", "x" * 129, "é"])
def test_a_request_id_that_is_not_safe_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        request_id_arg(text)


def test_suspend_names_the_caller_and_carries_the_version_read() -> None:
    patch = suspend_patch(job(cron="0 * * * *"), reason="db migration", by="alice@example.com")
    assert patch == {
        "metadata": {"resourceVersion": "41"},
        "spec": {"suspend": True, "suspendReason": "db migration", "suspendedBy": "alice@example.com"},
    }


def test_suspending_a_suspended_job_is_refused_naming_its_owner() -> None:
    suspended = job(cron="0 * * * *", suspend=True, suspendReason="incident 7", suspendedBy="bob")
    with pytest.raises(BadInput, match=r"already suspended \(by bob: incident 7\)"):
        suspend_patch(suspended, reason="mine now", by="alice")


def test_resume_clears_the_suspension_and_refuses_a_running_job() -> None:
    suspended = job(cron="0 * * * *", suspend=True, suspendReason="incident 7", suspendedBy="bob")
    assert resume_patch(suspended)["spec"] == {"suspend": False, "suspendReason": None, "suspendedBy": None}
    with pytest.raises(BadInput, match="is not suspended"):
        resume_patch(job(cron="0 * * * *"))


def test_run_starts_pod_template_jobs_only() -> None:
    assert run_refusal(job(cron="0 * * * *")) is None
    workflow = job(cron="0 * * * *", workflowTemplate={"steps": [{"id": "a", "type": "wait"}]})
    task = job(cron="0 * * * *", task={"queue": "billing"})
    assert "runs a workflowTemplate, not a pod" in (run_refusal(workflow) or "")
    assert "runs a task, not a pod" in (run_refusal(task) or "")
