"""The ScheduledJob status writer used where there is no `JobStatusWriter`, against the real API
server: a change another writer makes between its read and its write survives it.

`JobResults` without a writer (tools, tests) writes a job's `recent` list whole, built from the
status it read. Each write carries the resourceVersion read, so a concurrent change makes it a
409: the job is read again and the list built again from it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import GROUP, PLURAL, VERSION, create_job, get_job, rfc3339
from vigil.core.executions import (
    AttemptOutcome,
    AttemptResult,
    RetryPolicy,
    finish,
    new_execution,
    start,
)
from vigil.core.ids import execution_id, pod_name
from vigil.core.memory import FakeClock
from vigil.kube.events import EventRecorder
from vigil.kube.executions import ExecutionStore
from vigil.kube.results import JobResults

NOW = datetime.now(UTC).replace(microsecond=0)


def recent_entry(uid: str, nominal: datetime) -> dict[str, Any]:
    return {
        "executionId": execution_id(uid, nominal),
        "attempt": 1,
        "outcome": "Succeeded",
        "scheduledFor": rfc3339(nominal),
        "finishedAt": rfc3339(nominal + timedelta(seconds=5)),
        "reason": "Completed",
    }


def another_writer_adds(cluster: KubeCluster, namespace: str, name: str, entry: dict[str, Any]) -> None:
    """What a concurrent writer does: read the job, append to its recent list, write it."""
    recent = (get_job(cluster, namespace, name).get("status") or {}).get("recent") or []
    cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": {"recent": [*recent, entry]}}
    )


def recent_ids(cluster: KubeCluster, namespace: str, name: str) -> list[str]:
    return [r["executionId"] for r in get_job(cluster, namespace, name)["status"]["recent"]]


def test_job_results_keep_a_recent_entry_written_after_their_read(cluster: KubeCluster, namespace: str) -> None:
    job = create_job(cluster, namespace, "j", every="1h")
    uid = job["metadata"]["uid"]
    theirs = recent_entry(uid, NOW - timedelta(hours=2))
    another_writer_adds(cluster, namespace, "j", theirs)  # after our read of `job`: it is stale now

    nominal = NOW - timedelta(hours=1)
    ex = new_execution(execution_id(uid, nominal), namespace=namespace, job="j", scheduled_for=nominal, now=nominal)
    running = start(ex, pod=pod_name(ex.execution_id, 1), now=nominal)
    result = AttemptResult(attempt=1, outcome=AttemptOutcome.SUCCEEDED, reason="Completed", started_at=nominal)
    succeeded = finish(running, result, policy=RetryPolicy(max_attempts=1), now=nominal + timedelta(seconds=5))
    results = JobResults(
        cluster.api, store=ExecutionStore(cluster.api), events=EventRecorder(cluster.api, instance="test"),
        clock=FakeClock(NOW),
    )  # fmt: skip
    results.apply(job, [succeeded])

    assert recent_ids(cluster, namespace, "j") == [theirs["executionId"], succeeded.execution_id]
    assert get_job(cluster, namespace, "j")["status"]["lastSuccessfulTime"] == rfc3339(nominal + timedelta(seconds=5))
