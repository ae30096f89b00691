"""TaskQueues without a cluster: the spec's checks, its declaration, the worker's slot allowance
(reserved capacity per priority), and the status built from the store's counts and the volume
watchdog's summary (JobsOverdue, ChainBroken)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from vigil.core.queue import Allowance, QueueStats, QueueWatchSummary, allowance
from vigil.kube.controllers.taskqueues import queue_status
from vigil.model import TaskQueueSpec, describe_validation_error

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        pytest.param({"heartbeatInterval": "30s"}, "heartbeatInterval must be shorter", id="heartbeat"),
        pytest.param({"retry": {"backoff": {"initial": "5m", "max": "1m"}}}, "spec.retry.backoff", id="backoff"),
        pytest.param(
            {"priorities": [{"name": "a", "value": 0, "reservedShare": 0.6}, {"name": "b", "value": 1, "reservedShare": 0.5}]},
            "sum to at most 1",
            id="shares",
        ),
        pytest.param({"priorities": [{"name": "a", "value": 0}, {"name": "b", "value": 0}]}, "value of its own", id="values"),
        pytest.param({"tenants": {"overrides": [{"name": "a", "maxConcurrent": 1}] * 2}}, "listed once", id="overrides"),
    ],
)
def test_the_model_refuses_what_admission_refuses_and_more(spec: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError) as refused:
        TaskQueueSpec.model_validate(spec)
    assert named in "; ".join(describe_validation_error(refused.value))


def test_shares_that_sum_to_one_in_floating_point_are_accepted() -> None:
    shares = [{"name": n, "value": v, "reservedShare": s} for n, v, s in (("a", 0, 0.1), ("b", 1, 0.2), ("c", 2, 0.7))]
    declared = TaskQueueSpec.model_validate({"priorities": shares}).declaration()
    assert declared.priorities == {0: 0.1, 1: 0.2, 2: 0.7}


def test_the_declaration_carries_the_spec_in_plain_values() -> None:
    declared = TaskQueueSpec.model_validate(
        {"tenants": {"maxConcurrent": 5, "overrides": [{"name": "big", "maxConcurrent": 50}]},
         "objective": {"oldestReadyAge": "2m"}}
    ).declaration()
    assert (declared.lease, declared.heartbeat, declared.max_attempts) == (timedelta(seconds=30), timedelta(seconds=10), 3)
    assert declared.dead_retention == timedelta(days=7) and declared.objective == timedelta(minutes=2)
    assert declared.tenant_caps == {"big": 50} and declared.capped
    assert not TaskQueueSpec.model_validate({}).declaration().capped


ALLOWANCES = [
    # (name, concurrency, shares, held, expected reserved_free, expected shared_free)
    ("nothing declared, nothing held", 10, {}, {}, {}, 10),
    ("a share is rounded down", 10, {0: 0.25}, {}, {0: 2}, 8),
    ("a small worker reserves nothing", 3, {0: 0.2}, {}, {}, 3),
    ("low work fills the shared slots only", 10, {0: 0.3}, {9: 7}, {0: 3}, 0),
    ("high work fills its own slots first", 10, {0: 0.3}, {0: 2}, {0: 1}, 7),
    ("high work overflows into the shared slots", 10, {0: 0.3}, {0: 5}, {0: 0}, 5),
    ("two reserved priorities", 10, {0: 0.2, 5: 0.2}, {5: 3, 9: 2}, {0: 2, 5: 0}, 3),
]


@pytest.mark.parametrize(("concurrency", "shares", "held", "reserved", "shared"), [row[1:] for row in ALLOWANCES],
                         ids=[row[0] for row in ALLOWANCES])  # fmt: skip
def test_the_worker_allowance_keeps_reserved_slots_for_their_priority(
    concurrency: int, shares: dict[int, float], held: dict[int, int], reserved: dict[int, int], shared: int
) -> None:
    assert allowance(concurrency=concurrency, priorities=shares, held=held) == Allowance(reserved, shared)


def stats(oldest: timedelta | None) -> QueueStats:
    return QueueStats(ready=4, leased=1, dead=2, succeeded_last_minute=30, dead_last_minute=0, oldest_ready_age=oldest)


def types(status: dict[str, object]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}  # type: ignore[attr-defined,index]


def test_status_shows_the_counts_and_behind_against_the_objective() -> None:
    status = queue_status({}, stats=stats(timedelta(seconds=95.5)), objective=timedelta(minutes=1), invalid=None, generation=3, now=NOW)
    assert {k: status[k] for k in ("ready", "leased", "dead", "oldestReadyAge", "oldestReadySeconds", "succeededPerMinute")} == {
        "ready": 4, "leased": 1, "dead": 2, "oldestReadyAge": "1m35s", "oldestReadySeconds": 95, "succeededPerMinute": 30,
    }  # fmt: skip
    assert status["observedGeneration"] == 3
    assert types(status) == {"Behind": ("True", "OldestReadyTooOld"), "Invalid": ("False", "Valid"), "Ready": ("True", "Published")}
    caught_up = queue_status(status, stats=stats(None), objective=timedelta(minutes=1), invalid=None, generation=3, now=NOW + timedelta(seconds=5))
    assert "oldestReadyAge" not in caught_up
    assert types(caught_up)["Behind"] == ("False", "WithinObjective")
    ready = next(c for c in caught_up["conditions"] if c["type"] == "Ready")  # type: ignore[attr-defined]  # status conditions are a list of mappings in the model dump
    assert ready["lastTransitionTime"] == "2026-12-02T12:00:00Z"  # unchanged: moves only when its status does


def test_a_status_that_changes_nothing_is_equal_so_nothing_is_written() -> None:
    first = queue_status({}, stats=stats(timedelta(seconds=5)), objective=None, invalid=None, generation=1, now=NOW)
    again = queue_status(first, stats=stats(timedelta(seconds=5)), objective=None, invalid=None, generation=1, now=NOW + timedelta(seconds=5))
    assert again == first
    assert "Behind" not in types(first)  # no objective, no verdict


def test_a_store_that_does_not_answer_keeps_the_last_counts_and_says_so() -> None:
    before = queue_status({}, stats=stats(timedelta(seconds=5)), objective=None, invalid=None, generation=1, now=NOW)
    after = queue_status(before, stats=None, objective=None, invalid=None, generation=1, now=NOW)
    assert (after["ready"], after["oldestReadyAge"]) == (4, "5s")
    assert types(after)["Ready"] == ("False", "QueueStoreUnavailable")


def watched(summary: QueueWatchSummary | None) -> QueueStats:
    return dataclasses.replace(stats(None), watch=summary)


def test_the_watchdogs_summary_becomes_jobs_overdue_and_chain_broken() -> None:
    unwatched = queue_status({}, stats=watched(None), objective=None, invalid=None, generation=1, now=NOW)
    assert "JobsOverdue" not in types(unwatched) and "ChainBroken" not in types(unwatched)  # no summary yet

    before_audit = QueueWatchSummary(overdue=5, overdue_jobs=(("j1", "NotFired"), ("j2", "Failing"), ("j3", "Overran")))
    status = queue_status(unwatched, stats=watched(before_audit), objective=None, invalid=None, generation=1, now=NOW)
    assert types(status)["JobsOverdue"] == ("True", "OverdueJobs") and "ChainBroken" not in types(status)
    [overdue] = [c for c in status["conditions"] if c["type"] == "JobsOverdue"]  # type: ignore[attr-defined]  # status conditions are a list of mappings in the model dump
    assert overdue["message"] == (
        "5 jobs overdue (no success within expectedMaxInterval): j1 (NotFired), j2 (Failing), j3 (Overran) and 2 more"
    )

    audited = QueueWatchSummary(overdue=0, broken=1, broken_jobs=(("j9", "NoFutureOccurrence"),))
    status = queue_status(status, stats=watched(audited), objective=None, invalid=None, generation=1, now=NOW)
    assert types(status)["JobsOverdue"] == ("False", "NoOverdueJobs")
    assert types(status)["ChainBroken"] == ("True", "BrokenChains")
    [broken] = [c for c in status["conditions"] if c["type"] == "ChainBroken"]  # type: ignore[attr-defined]  # status conditions are a list of mappings in the model dump
    assert broken["message"].startswith("1 job without a next occurrence") and "j9 (NoFutureOccurrence)" in broken["message"]

    healed = queue_status(status, stats=watched(QueueWatchSummary(overdue=0, broken=0)), objective=None, invalid=None,
                          generation=1, now=NOW)  # fmt: skip
    assert types(healed)["ChainBroken"] == ("False", "ChainsIntact")
    # the store down: the last verdicts stay, as the counts do
    assert types(queue_status(status, stats=None, objective=None, invalid=None, generation=1, now=NOW))["ChainBroken"] == (
        "True", "BrokenChains",
    )  # fmt: skip
