"""The job status writer against the real API server: a refused write loses no waiting change,
and an execution's beginning waits for its end so both cost one write.

`write_now` takes whatever waits for the job and writes it with its own change. When the API
server refuses that write (here the CRD schema rejects the caller's change), the changes it took
must wait again for the next write, not vanish with the refused one.

A change that only says an execution began (a fire, a start) may wait `begin_wait` after the last
such change for the end: in a burst each execution is a different job's, and writing the fire and
the end apart would cost every execution two job status writes.

While the dispatcher has pods to create (`hold`), due changes wait for them, at most twice
`begin_wait` after the first: the API server starts due work before it takes the summaries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import create_job, get_job
from tests.waiting import wait_for
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.jobstatus import Change, JobStatusWriter, Then


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


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _running(
    cluster: KubeCluster, stop: threading.Event, *, begin_wait: float, hold: Callable[[], bool] = lambda: False
) -> JobStatusWriter:
    catalogue = KubeCatalogue(cluster.api)
    writer = JobStatusWriter(cluster.api, catalogue=catalogue, interval=0.05, begin_wait=begin_wait, hold=hold)
    threading.Thread(target=writer.queue.run, args=(stop,), daemon=True).start()
    return writer


def _versions_written() -> tuple[list[str], Then]:
    """A list, and a `then` that appends to it the resourceVersion of each write it is told of:
    two changes written together show the same version."""
    written: list[str] = []

    def seen(job: Mapping[str, Any]) -> None:
        written.append(job["metadata"]["resourceVersion"])

    return written, seen


def test_an_executions_begin_waits_for_its_end_and_both_share_one_write(
    cluster: KubeCluster, namespace: str, stop: threading.Event
) -> None:
    uid = create_job(cluster, namespace, "b", every="1h")["metadata"]["uid"]
    writer = _running(cluster, stop, begin_wait=600)
    written, seen = _versions_written()
    added = time.monotonic()
    writer.add((namespace, "b"), Change(uid, _sets(schedule="every 1h"), seen, begins=True))
    wait_for(
        lambda: time.monotonic() > added + 1.0 and writer.queue.idle(),
        timeout=10,
        what="the writer to look at the begin (20 intervals) and put it off",
    )
    assert written == [] and "schedule" not in (get_job(cluster, namespace, "b").get("status") or {})

    writer.add((namespace, "b"), Change(uid, _sets(observedGeneration=1), seen))
    wait_for(lambda: len(written) == 2, timeout=10, what="the begin and the end written")
    assert written[0] == written[1], "the begin and the end took two writes"
    status = get_job(cluster, namespace, "b")["status"]
    assert (status["schedule"], status["observedGeneration"]) == ("every 1h", 1)


def test_a_begin_with_no_end_is_written_once_it_has_waited_its_time(
    cluster: KubeCluster, namespace: str, stop: threading.Event
) -> None:
    uid = create_job(cluster, namespace, "long", every="1h")["metadata"]["uid"]
    writer = _running(cluster, stop, begin_wait=0.5)
    writer.add((namespace, "long"), Change(uid, _sets(schedule="every 1h"), _ignore, begins=True))
    wait_for(
        lambda: (get_job(cluster, namespace, "long").get("status") or {}).get("schedule"),
        timeout=10,
        what="the begin written without its end",
    )
    assert writer.pending() == 0


def test_a_start_after_the_fire_waits_again_for_the_end(cluster: KubeCluster, namespace: str, stop: threading.Event) -> None:
    """Under load a pod starts long after its fire and ends later still: the start's own wait
    keeps the fire, the start and the end in one write (timing the wait from the fire alone wrote
    the fire and the start at `begin_wait`, and the end apart)."""
    uid = create_job(cluster, namespace, "s", every="1h")["metadata"]["uid"]
    writer = _running(cluster, stop, begin_wait=4)
    written, seen = _versions_written()
    fired = time.monotonic()
    writer.add((namespace, "s"), Change(uid, _sets(schedule="every 1h"), seen, begins=True))
    wait_for(lambda: time.monotonic() > fired + 1.0, timeout=10, what="a second after the fire")
    writer.add((namespace, "s"), Change(uid, _sets(lastScheduleTime="2026-12-04T00:00:00Z"), seen, begins=True))
    wait_for(
        lambda: time.monotonic() > fired + 4.5 and writer.queue.idle(),
        timeout=20,
        what="past the fire's own wait, the writer idle",
    )
    assert written == [], "the fire was written at its own wait, though the start came later"

    writer.add((namespace, "s"), Change(uid, _sets(observedGeneration=1), seen))
    wait_for(lambda: len(written) == 3, timeout=10, what="the fire, the start and the end written")
    assert len(set(written)) == 1, "the fire, the start and the end took more than one write"
    status = get_job(cluster, namespace, "s")["status"]
    assert (status["schedule"], status["observedGeneration"]) == ("every 1h", 1)


def test_while_pods_are_being_created_due_changes_wait_for_them_or_twice_begin_wait(
    cluster: KubeCluster, namespace: str, stop: threading.Event
) -> None:
    uid = create_job(cluster, namespace, "h", every="1h")["metadata"]["uid"]
    key = (namespace, "h")
    creating = threading.Event()
    creating.set()
    writer = _running(cluster, stop, begin_wait=1.5, hold=creating.is_set)
    written, seen = _versions_written()

    added = time.monotonic()
    writer.add(key, Change(uid, _sets(observedGeneration=1), seen))  # an end: due within the interval
    wait_for(
        lambda: time.monotonic() > added + 1.0 and writer.queue.idle(),
        timeout=10,
        what="a second of pods being created (20 intervals), the writer idle",
    )
    assert written == [], "a due change was written while pods waited to be created"
    writer.write_now(key, Change(uid, _sets(schedule="every 1h"), seen))  # a plan that must be on the job
    assert len(written) == 2, "write_now waited for the pods"
    creating.clear()
    assert (get_job(cluster, namespace, "h")["status"]["observedGeneration"]) == 1  # it went with write_now

    creating.set()
    added = time.monotonic()
    writer.add(key, Change(uid, _sets(observedGeneration=2), seen))
    wait_for(lambda: len(written) == 3, timeout=10, what="the change written though pods are still being created")
    assert time.monotonic() - added >= 2 * 1.5, "written before it had waited twice begin_wait"
    assert get_job(cluster, namespace, "h")["status"]["observedGeneration"] == 2

    creating.clear()
    added = time.monotonic()
    writer.add(key, Change(uid, _sets(observedGeneration=3), seen))
    wait_for(lambda: len(written) == 4, timeout=10, what="the change written with no pods to create")
    assert time.monotonic() - added < 2 * 1.5
