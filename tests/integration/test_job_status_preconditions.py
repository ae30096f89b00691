"""The ScheduledJob's one status writer against the real API server: a change another writer makes
between its read and its write survives it.

The job's one status writer (`JobStatusWriter`, here fed by `JobResults`) writes a job's `recent`
list whole, built from the status it read. Each write carries the resourceVersion read, so a
concurrent change makes it a
409: the job is read again and the list built again from it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client import ApiClient

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import GROUP, PLURAL, VERSION, create_job, get_job, rfc3339
from tests.integration.jobstatuses import flush
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
from vigil.kube.kits.events import EventRecorder
from vigil.kube.stores.executions import ExecutionStore
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.jobstatus import JobStatusWriter
from vigil.kube.stores.results import JobResults

NOW = datetime.now(UTC).replace(microsecond=0)


class StaleFirst(KubeCatalogue):
    """A catalogue whose first read is the job as the test read it (as a watch-fed cache can
    be, behind the API server); then it reads as `KubeCatalogue` does."""

    def __init__(self, api: ApiClient, stale: dict[str, Any]) -> None:
        super().__init__(api)
        self._stale: dict[str, Any] | None = stale

    def read(self, namespace: str, name: str, *, uid: str = "") -> dict[str, Any] | None:
        stale, self._stale = self._stale, None
        return stale if stale is not None else super().read(namespace, name, uid=uid)


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


def test_the_job_status_writer_keeps_a_recent_entry_written_after_its_read(cluster: KubeCluster, namespace: str) -> None:
    job = create_job(cluster, namespace, "j", every="1h")
    uid = job["metadata"]["uid"]
    theirs = recent_entry(uid, NOW - timedelta(hours=2))
    another_writer_adds(cluster, namespace, "j", theirs)  # after our read of `job`: it is stale now

    nominal = NOW - timedelta(hours=1)
    ex = new_execution(execution_id(uid, nominal), namespace=namespace, job="j", scheduled_for=nominal, now=nominal)
    running = start(ex, pod=pod_name(ex.execution_id, 1), now=nominal)
    result = AttemptResult(attempt=1, outcome=AttemptOutcome.SUCCEEDED, reason="Completed", started_at=nominal)
    succeeded = finish(running, result, policy=RetryPolicy(max_attempts=1), now=nominal + timedelta(seconds=5))
    writer = JobStatusWriter(cluster.api, catalogue=StaleFirst(cluster.api, job))  # its queue is not run
    results = JobResults(
        store=ExecutionStore(cluster.api), events=EventRecorder(cluster.api, instance="test"),
        clock=FakeClock(NOW), writer=writer,
    )  # fmt: skip
    writer.add_transition(namespace, "j", uid, succeeded, now=NOW, then=lambda job: results.announce(job, succeeded))
    flush(writer)

    assert recent_ids(cluster, namespace, "j") == [theirs["executionId"], succeeded.execution_id]
    assert get_job(cluster, namespace, "j")["status"]["lastSuccessfulTime"] == rfc3339(nominal + timedelta(seconds=5))

