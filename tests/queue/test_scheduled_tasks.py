"""A ScheduledJob's `task:` occurrences submitted to the real PostgreSQL queue store.

Covers `vigil.kube.controllers.launcher.TaskSubmitter` without a cluster (it reads the job as a plain object):
the payload rendered for the occurrence's period as a pod would get it, the execution due at the
fire time under the occurrence's own execution id and key, the task's priority, attempts and
tenant (the namespace by default), a repeated launch that enqueues nothing more (a crash or a
failover between launch and marker), a payload that cannot render refused for that occurrence,
and an unreachable store raised for the trigger to retry. The launcher's refusal while the volume
tier is off, and the job's Invalid condition, are covered with a real operator
(tests/integration/test_task_queues.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from vigil.core.chain import Fire
from vigil.core.ids import ExecutionId, execution_id
from vigil.core.memory import FakeClock
from vigil.core.queue import QueueUnavailable
from vigil.core.schedule import occurrence_at
from vigil.kube.controllers.launcher import TaskSubmitter
from vigil.model.jobspec import job_view
from vigil.queue.store import QueueStore

NOW = datetime(2026, 7, 31, 2, 0, 5, tzinfo=UTC)
NOMINAL = datetime(2026, 7, 31, 2, 0, tzinfo=UTC)


def job(**task: Any) -> dict[str, Any]:
    return {
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {
            "name": "reconcile",
            "namespace": "billing",
            "uid": "uid-1",
            "generation": 1,
            "creationTimestamp": "2026-07-01T00:00:00Z",
        },
        "spec": {
            "every": "1h",
            "payloadTemplate": {"day": "{{ periodStart | date }}", "id": "{{ executionId }}", "fixed": 7},
            "task": {"queue": "reports", "name": "reconcile_daily", **task},
        },
    }


def fire_of(obj: dict[str, Any], nominal: datetime = NOMINAL) -> Fire:
    view, _ = job_view(obj)
    occurrence = occurrence_at(view.schedule, nominal, jitter=timedelta(seconds=3))
    return Fire(job=view, occurrence=occurrence, execution_id=ExecutionId(execution_id("uid-1", nominal)), late=False)


def submit(store: QueueStore, obj: dict[str, Any], fire: Fire) -> Any:
    _, spec = job_view(obj)
    return TaskSubmitter(store, clock=FakeClock(NOW)).submit(obj, spec, fire)


def test_an_occurrence_becomes_one_ready_execution_with_its_id_payload_and_fire_time(store: QueueStore) -> None:
    obj = job()
    fire = fire_of(obj)
    launch = submit(store, obj, fire)
    assert launch.created and not launch.refused and not launch.skipped
    row = store.execution(fire.execution_id)
    assert row is not None
    assert row["queue"] == "billing/reports"
    assert row["task"] == "reconcile_daily"
    assert row["state"] == "ready"
    assert row["payload"] == {"day": "2026-07-31", "id": fire.execution_id, "fixed": 7}
    assert row["run_after"] == fire.occurrence.fire_at == NOMINAL + timedelta(seconds=3)
    assert row["scheduled_for"] == fire.occurrence.fire_at
    assert row["idempotency_key"] == fire.execution_id
    assert (row["priority"], row["tenant"], row["max_attempts"]) == (0, "billing", 3)


def test_the_task_sets_priority_and_attempts_and_its_tenant_is_always_the_jobs_namespace(store: QueueStore) -> None:
    """A tenant is who the submitter is (issue 36, item 4): a deprecated `task.tenant` naming
    another (which admission now refuses) changes nothing."""
    obj = job(priority=-10, maxAttempts=7, tenant="nightly-batch")
    fire = fire_of(obj)
    submit(store, obj, fire)
    row = store.execution(fire.execution_id)
    assert row is not None
    assert (row["priority"], row["tenant"], row["max_attempts"]) == (-10, "billing", 7)


def test_a_repeated_launch_enqueues_nothing_more(store: QueueStore) -> None:
    obj = job()
    fire = fire_of(obj)
    submit(store, obj, fire)
    submit(store, obj, fire)  # the trigger repeats a launch whose marker was not written
    edited = job()
    edited["spec"]["task"]["queue"] = "other"  # even when the job's queue changed meanwhile
    submit(store, edited, fire)
    submit(store, obj, fire_of(obj, NOMINAL + timedelta(hours=1)))  # the next occurrence is new
    with psycopg.connect(store.dsn) as connection:
        rows = connection.execute(
            "SELECT execution_id, queue FROM vigil_queue.executions ORDER BY run_after"
        ).fetchall()
    assert rows == [
        (fire.execution_id, "billing/reports"),
        (execution_id("uid-1", NOMINAL + timedelta(hours=1)), "billing/reports"),
    ]


def test_a_payload_that_does_not_render_is_refused_for_that_occurrence(store: QueueStore) -> None:
    obj = job()
    obj["spec"]["payloadTemplate"] = {"n": "{{ nosuch.attr }}"}
    fire = fire_of(obj)
    launch = submit(store, obj, fire)
    assert not launch.created
    assert launch.refused.startswith("spec.payloadTemplate.n"), launch.refused
    assert store.execution(fire.execution_id) is None


def test_an_unreachable_store_raises_for_the_trigger_to_retry() -> None:
    gone = QueueStore("host=127.0.0.1 port=1 dbname=none connect_timeout=2")
    with pytest.raises(QueueUnavailable):
        submit(gone, job(), fire_of(job()))
