"""The job status writer against the real API server: a refused write loses no waiting change.

`write_now` takes whatever waits for the job and writes it with its own change. When the API
server refuses that write (here the CRD schema rejects the caller's change), the changes it took
must wait again for the next write, not vanish with the refused one.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import create_job, get_job
from vigil.kube.jobs import KubeCatalogue
from vigil.kube.jobstatus import Change, JobStatusWriter


def _sets(**fields: Any) -> Any:
    return lambda status, generation: dict(fields)


def _ignore(job: Any) -> None:
    return None


def test_a_refused_write_now_leaves_what_waited_for_the_next_write(cluster: KubeCluster, namespace: str) -> None:
    job = create_job(cluster, namespace, "j", every="1h")
    uid, key = job["metadata"]["uid"], (namespace, "j")
    writer = JobStatusWriter(cluster.api, catalogue=KubeCatalogue(cluster.api))  # its queue is not run
    writer.add(key, Change(uid, _sets(schedule="every 1h"), _ignore))

    with pytest.raises(ApiException) as refused:
        writer.write_now(key, Change(uid, _sets(observedGeneration="not a number"), _ignore))
    assert refused.value.status == 422
    assert writer.pending() == 1, "the waiting change went with the refused write"
    assert "schedule" not in (get_job(cluster, namespace, "j").get("status") or {})

    writer.write_now(key, Change(uid, _sets(observedGeneration=1), _ignore))
    status = get_job(cluster, namespace, "j")["status"]
    assert status["schedule"] == "every 1h" and status["observedGeneration"] == 1
    assert writer.pending() == 0
