"""When the job controller reconciles a ScheduledJob, and what its status step writes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.kube.controllers.jobcontroller import (
    _invalid,
    _valid,
    _validate_payload,
    needs_reconcile,
)
from vigil.model.jobspec import TIER_OFF, job_view, parse_spec

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def job(generation: int, status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "j", "uid": "u", "generation": generation},
        "spec": {"cron": "0 2 * * *", "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}, **spec},
        "status": status or {},
    }


def test_a_job_is_reconciled_when_its_spec_is_newer_than_what_was_acted_on() -> None:
    assert needs_reconcile(job(1))  # never acted on
    assert needs_reconcile(job(3, {"observedGeneration": 2}))
    assert not needs_reconcile(job(3, {"observedGeneration": 3}))


def test_a_resumed_job_whose_chain_is_still_paused_is_reconciled_a_suspended_one_is_not() -> None:
    paused = {"observedGeneration": 2, "chain": {"pausedAt": "2026-12-01T02:00:00Z"}}
    assert needs_reconcile(job(2, paused))
    assert not needs_reconcile(job(2, paused, suspend=True))


def test_the_status_claims_the_generation_reconciled_not_a_newer_one_written_over() -> None:
    """An edit that lands between the reconcile's read and its write must be reconciled next."""
    spec = parse_spec(job(4))
    written = _valid(spec, {"nextRun": "2026-12-02T02:00:00Z"}, 4, NOW)({}, 5)
    assert written["observedGeneration"] == 4
    assert written["nextRun"] == "2026-12-02T02:00:00Z" and written["schedule"] == "0 2 * * *"
    ready = {c["type"]: c for c in written["conditions"]}
    assert ready["Ready"]["status"] == "True" and ready["Ready"]["observedGeneration"] == 4
    assert ready["Invalid"]["status"] == "False" and ready["Suspended"]["status"] == "False"
    assert needs_reconcile(job(5, written))


def test_an_invalid_job_has_no_next_run_and_says_which_field() -> None:
    written = _invalid("spec.cron: not a cron expression", 2, NOW)({"nextRun": "2026-12-02T02:00:00Z"}, 2)
    assert written["nextRun"] is None and written["observedGeneration"] == 2
    invalid = {c["type"]: c for c in written["conditions"]}["Invalid"]
    assert invalid["status"] == "True" and "spec.cron" in invalid["message"]


def test_a_waiting_status_step_holds_what_it_writes_not_the_parsed_spec() -> None:
    """At onboarding thousands of steps wait for their writes: a parsed spec each is kilobytes."""
    spec = parse_spec(job(1, suspend=True, suspendReason="maintenance"))
    step = _valid(spec, {}, 1, NOW)
    held = [cell.cell_contents for cell in step.__closure__ or ()]
    assert not [value for value in held if isinstance(value, type(spec))]
    suspended = {c["type"]: c for c in step({}, 1)["conditions"]}["Suspended"]
    assert suspended["status"] == "True" and suspended["message"] == "maintenance"


def task_job(conditions: list[dict[str, Any]] | None) -> dict[str, Any]:
    made = job(2, {"observedGeneration": 2, "conditions": conditions or []}, task={"queue": "q", "name": "t"})
    del made["spec"]["template"]
    return made


def invalid(message: str) -> list[dict[str, Any]]:
    return [{"type": "Invalid", "status": "True", "reason": "InvalidSpec", "message": message}]


VALID = [{"type": "Invalid", "status": "False", "reason": "Valid", "message": ""}]


def test_a_task_job_is_judged_again_when_the_operator_starts_with_the_volume_tier_in_the_other_state() -> None:
    refused = task_job(invalid(TIER_OFF))
    assert needs_reconcile(refused, queue_enabled=True)  # the tier came on: the job can run now
    assert not needs_reconcile(refused, queue_enabled=False)  # still off: nothing to do
    assert needs_reconcile(task_job(VALID), queue_enabled=False)  # the tier went away under a valid job
    assert not needs_reconcile(task_job(VALID), queue_enabled=True)
    # Invalid for a reason of its own: the tier changes nothing, and re-judging it would loop
    bad = task_job(invalid("spec.cron: not a cron expression"))
    assert not needs_reconcile(bad, queue_enabled=True) and not needs_reconcile(bad, queue_enabled=False)
    # a pod job is never judged by the tier
    assert not needs_reconcile(job(2, {"observedGeneration": 2, "conditions": VALID}), queue_enabled=False)


def test_an_idempotency_key_that_cannot_be_made_makes_the_job_invalid_naming_the_field() -> None:
    """Rendered at admission with the payload, in the same budgets: before, only the payload was,
    and a key past a budget left each occurrence's Execution Ready for good."""
    growing = "{% set a = 'a' * 30000 %}{% set a = a ~ a %}{% set a = a ~ a %}{{ a }}"
    for key, why in ((growing, "spec.idempotencyKey"), ('{{ "\\x00" }}', "spec.idempotencyKey: holds NUL")):
        obj = job(1, idempotencyKey=key)
        view, spec = job_view(obj)
        with pytest.raises(ValueError, match=re.escape(why)):
            _validate_payload(view, spec, NOW)
    fine = job(1, idempotencyKey="day:{{ periodStart | date }}")
    _validate_payload(*job_view(fine), NOW)
