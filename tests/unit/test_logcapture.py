"""Capturing log tails as pods end (vigil.kube.controllers.logcapture), with a fake log reader, a fake
history and a fake clock: whose pods are captured (the job's `spec.logs`), one read per pod
(none when an earlier leader stored the tail), a database outage holding the tail read and
writing it later, the retention gate — closed while a tail is pending, open once it is
stored, given up, or the bound ran out — and a full backlog that never blocks the handler.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.core.logtail import LogPolicy, LogTail, TailBuffer
from vigil.core.memory import FakeClock
from vigil.core.ports import HistoryUnavailable
from vigil.kube.controllers.logcapture import LogCapture, execution_owner, policy_from, step_owner
from vigil.kube.stores.pods import LABEL_ATTEMPT, LABEL_EXECUTION
from vigil.model.names import LABEL_WORKFLOW_UID

T0 = datetime(2026, 12, 6, 2, 0, tzinfo=UTC)
NS = "team-a"


def execution(name: str, job: str = "nightly") -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": name, "creationTimestamp": "2026-12-06T01:59:00Z"},
        "spec": {"executionId": name, "job": {"name": job, "uid": f"uid-{job}"}, "scheduledFor": "2026-12-06T02:00:00Z"},
    }


def pod(name: str, execution_id: str, *, phase: str = "Failed", attempt: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": name, "labels": {LABEL_EXECUTION: execution_id, LABEL_ATTEMPT: str(attempt)}},
        "spec": {"containers": [{"name": "main"}, {"name": "sidecar"}]},
        "status": {"phase": phase},
    }


class Reader:
    def __init__(self, logs: dict[str, bytes]) -> None:
        self.logs = logs
        self.reads: list[tuple[str, str]] = []

    def read(self, namespace: str, pod: str, container: str, *, into: TailBuffer, deadline: datetime) -> None:
        self.reads.append((pod, container))
        if pod not in self.logs:
            raise OSError(f"pods {pod} not found")
        into.feed(self.logs[pod])


class Sink:
    def __init__(self) -> None:
        self.tails: dict[tuple[str, int], LogTail] = {}
        self.down = False

    def write_log_tail(self, tail: LogTail) -> None:
        if self.down:
            raise HistoryUnavailable("down")
        self.tails.setdefault((tail.execution_id, tail.attempt), tail)

    def has_log_tail(self, execution_id: str, attempt: int) -> bool:
        if self.down:
            raise HistoryUnavailable("down")
        return (execution_id, attempt) in self.tails


def capture(
    policy: LogPolicy = LogPolicy.FAILED, *, logs: dict[str, bytes] | None = None, **options: Any
) -> tuple[LogCapture, Reader, Sink, FakeClock, list[tuple[str, str, str]]]:
    objs = {name: execution(name) for name in ("e1", "e2", "e3")}
    reader, sink, clock, settled = Reader(logs or {}), Sink(), FakeClock(T0), []
    lc = LogCapture(
        reader=reader, sink=sink, clock=clock, tail_bytes=1024,
        owner_of=execution_owner(lambda ns, name: objs.get(name) if ns == NS else None,
                                 policy_from([(NS, "nightly", policy)])),
        on_settled=lambda *job: settled.append(job), **options,
    )  # fmt: skip
    return lc, reader, sink, clock, settled


def ended(lc: LogCapture, name: str, execution_id: str, **kw: Any) -> None:
    lc.pod_changed((NS, name), pod(name, execution_id, **kw), False)


@pytest.mark.parametrize(
    ("policy", "phase", "captured"),
    [
        pytest.param(LogPolicy.FAILED, "Failed", True, id="failed: a failure"),
        pytest.param(LogPolicy.FAILED, "Succeeded", False, id="failed: not a success"),
        pytest.param(LogPolicy.ALL, "Succeeded", True, id="all: a success"),
        pytest.param(LogPolicy.NONE, "Failed", False, id="none: nothing"),
    ],
)
def test_the_jobs_policy_chooses_whose_tail_is_stored(policy: LogPolicy, phase: str, captured: bool) -> None:
    lc, reader, sink, _, _ = capture(policy, logs={"e1-1": b"boom\n"})
    ended(lc, "e1-1", "e1", phase=phase)
    lc.capture((NS, "e1-1"))

    assert bool(sink.tails) is captured
    assert reader.reads == ([("e1-1", "main")] if captured else [])


def test_a_running_pod_is_not_captured_and_an_ended_one_is_read_once() -> None:
    lc, reader, sink, _, settled = capture(logs={"e1-1": b"\x00evil\xff\n" + b"x" * 5000})
    lc.pod_changed((NS, "e1-1"), pod("e1-1", "e1", phase="Running"), False)
    assert lc.pending() == 0
    ended(lc, "e1-1", "e1")
    ended(lc, "e1-1", "e1")  # the same end seen again
    lc.capture((NS, "e1-1"))
    ended(lc, "e1-1", "e1")  # and again after it was stored
    lc.capture((NS, "e1-1"))

    assert reader.reads == [("e1-1", "main")]
    tail = sink.tails[("e1", 1)]
    assert tail.truncated and len(tail.text.encode()) <= 1024 and tail.log_bytes == 5007
    assert settled == [(NS, "nightly", "uid-nightly")]


def test_retention_waits_for_a_pending_tail_within_the_bound() -> None:
    lc, _, _, clock, _ = capture(logs={"e1-1": b"boom"}, settle_within=timedelta(minutes=5))
    ended(lc, "e1-1", "e1")

    assert not lc.settled(execution("e1"))
    assert lc.settled(execution("e2"))  # another execution's pods are not its business
    clock.advance(timedelta(minutes=5))
    assert lc.settled(execution("e1"))  # a hung read never keeps the pod forever


def test_retention_goes_ahead_once_the_tail_is_stored() -> None:
    lc, _, _, _, _ = capture(logs={"e1-1": b"boom"})
    ended(lc, "e1-1", "e1")
    lc.capture((NS, "e1-1"))

    assert lc.settled(execution("e1"))


def test_nothing_is_settled_before_the_pods_cache_announced_its_list() -> None:
    synced = False
    lc, _, _, _, _ = capture(synced=lambda: synced)
    assert not lc.settled(execution("e1"))
    synced = True
    assert lc.settled(execution("e1"))


def test_an_unreadable_log_is_stored_as_a_note_and_settles() -> None:
    lc, _, sink, _, _ = capture(logs={})
    ended(lc, "e1-1", "e1")
    lc.capture((NS, "e1-1"))

    tail = sink.tails[("e1", 1)]
    assert tail.text == "" and "not found" in tail.note
    assert lc.settled(execution("e1"))


def test_a_database_outage_keeps_the_tail_read_and_writes_it_later_without_reading_again() -> None:
    lc, reader, sink, clock, _ = capture(logs={"e1-1": b"boom"})
    ended(lc, "e1-1", "e1")
    sink.down = True
    lc.capture((NS, "e1-1"))
    assert reader.reads == [("e1-1", "main")]  # read while the pod is there
    assert not lc.settled(execution("e1"))
    clock.advance(timedelta(seconds=5))
    lc.capture((NS, "e1-1"))  # still down: held, not read again

    sink.down = False
    clock.advance(timedelta(seconds=10))
    lc.capture((NS, "e1-1"))

    assert sink.tails[("e1", 1)].text == "boom"
    assert reader.reads == [("e1-1", "main")]
    assert lc.settled(execution("e1"))


def test_a_tail_stored_by_an_earlier_leader_is_not_read_again() -> None:
    lc, reader, sink, _, _ = capture(logs={"e1-1": b"boom"})
    sink.tails[("e1", 1)] = LogTail(
        execution_id="e1", attempt=1, namespace=NS, job="nightly", pod="e1-1", scheduled_for=T0, captured_at=T0, text="old"
    )  # fmt: skip
    ended(lc, "e1-1", "e1")
    lc.capture((NS, "e1-1"))

    assert reader.reads == []
    assert lc.settled(execution("e1"))


def test_a_full_backlog_drops_the_pod_and_never_blocks_nor_holds_retention() -> None:
    lc, _, _, _, _ = capture(logs={}, backlog=1)
    ended(lc, "e1-1", "e1")
    ended(lc, "e2-1", "e2")  # returns at once: the backlog is full

    assert lc.pending() == 1 and lc.dropped == 1
    assert lc.settled(execution("e2"))


def test_a_deleted_pod_is_no_longer_owed_a_tail() -> None:
    lc, _, _, _, _ = capture(logs={})
    ended(lc, "e1-1", "e1")
    lc.pod_changed((NS, "e1-1"), pod("e1-1", "e1"), True)

    assert lc.pending() == 0 and lc.settled(execution("e1"))


def test_a_pod_whose_execution_or_job_is_unknown_is_not_captured() -> None:
    lc, reader, _, _, _ = capture(logs={"x-1": b"boom"})
    ended(lc, "x-1", "not-cached")

    assert lc.pending() == 0 and reader.reads == []


def test_while_the_database_is_down_at_most_max_held_tails_are_read_and_held() -> None:
    lc, reader, sink, clock, _ = capture(logs={"e1-1": b"one", "e2-1": b"two"}, max_held=1)
    ended(lc, "e1-1", "e1")
    ended(lc, "e2-1", "e2")
    sink.down = True
    lc.capture((NS, "e1-1"))
    lc.capture((NS, "e2-1"))  # one tail is held already: this log is not read yet

    assert reader.reads == [("e1-1", "main")]
    assert not lc.settled(execution("e2"))  # its pod is still owed a read

    sink.down = False
    clock.advance(timedelta(seconds=10))
    lc.capture((NS, "e1-1"))
    lc.capture((NS, "e2-1"))

    assert reader.reads == [("e1-1", "main"), ("e2-1", "main")]
    assert {k: t.text for k, t in sink.tails.items()} == {("e1", 1): "one", ("e2", 1): "two"}


def step_pod(*, phase: str = "Failed", owner: bool = True) -> dict[str, Any]:
    pod = {
        "metadata": {
            "namespace": NS, "name": "sx-abc-2", "creationTimestamp": "2026-12-06T02:05:00Z",
            "labels": {LABEL_EXECUTION: "sx-abc", LABEL_ATTEMPT: "2", LABEL_WORKFLOW_UID: "wf-uid"},
            "ownerReferences": [{"kind": "Workflow", "name": "video-1", "uid": "wf-uid"}] if owner else [],
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": phase},
    }  # fmt: skip
    return pod


def test_a_workflow_steps_failed_pod_is_captured_under_the_steps_execution_id() -> None:
    reader, sink, clock = Reader({"sx-abc-2": b"step failed\n"}), Sink(), FakeClock(T0)
    lc = LogCapture(reader=reader, sink=sink, owner_of=step_owner, clock=clock)
    lc.pod_changed((NS, "sx-abc-2"), step_pod(phase="Running"), False)
    lc.pod_changed((NS, "sx-abc-2"), step_pod(), False)
    lc.capture((NS, "sx-abc-2"))

    tail = sink.tails[("sx-abc", 2)]
    assert (tail.job, tail.pod, tail.text) == ("video-1", "sx-abc-2", "step failed\n")
    assert tail.scheduled_for == datetime(2026, 12, 6, 2, 5, tzinfo=UTC)
    assert step_owner(NS, step_pod(owner=False)) is None  # not a workflow's: nothing to name it by

    succeeded = LogCapture(reader=reader, sink=sink, owner_of=step_owner, clock=clock)
    succeeded.pod_changed((NS, "sx-abc-2"), step_pod(phase="Succeeded"), False)
    assert succeeded.pending() == 0  # workflows keep the default: failed attempts' tails only
