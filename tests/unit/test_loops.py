"""The shapes of the leader's long-running work (vigil.kube.kits.loops): `woken_every` and `Drain`.

Covers `woken_every`: a wake-up that comes during a pass starts the next at once (the interval
is an hour, so a pass that waited for it would never come), a stop that nothing wakes is seen
within a slice, the spacing after a pass is told the pass's duration and a stop during it ends
the loop, and a failing pass is logged and tried again. And `Drain`: a batch is everything
queued (up to `most` by size, the first always), oldest first; a bounded queue refuses what does
not fit; a failing write is logged and the next batch still written; `start` runs one thread
however often it is called.

The loops' own steps set the stop, so no test waits for time to pass; where a loop runs on a
thread, the join's timeout only bounds a failure.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from vigil.kube.kits.loops import Drain, woken_every

HOUR = 3600.0
FAILURE_BOUND_SECONDS = 10.0  # a broken loop fails the test after this instead of hanging it


def run_on_thread(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_wake_up_during_a_pass_starts_the_next_at_once() -> None:
    stop, wake = threading.Event(), threading.Event()
    passes = 0

    def step() -> None:
        nonlocal passes
        passes += 1
        if passes == 1:
            wake.set()  # something became Ready while the pass ran
        else:
            stop.set()

    thread = run_on_thread(lambda: woken_every(stop, HOUR, "test pass", step, wake=wake))
    thread.join(FAILURE_BOUND_SECONDS)
    assert not thread.is_alive() and passes == 2


def test_a_stop_that_nothing_wakes_is_seen_within_a_slice() -> None:
    stop, wake, passed = threading.Event(), threading.Event(), threading.Event()
    thread = run_on_thread(lambda: woken_every(stop, HOUR, "test pass", passed.set, wake=wake))
    assert passed.wait(FAILURE_BOUND_SECONDS)
    stop.set()  # no wake-up: the pass waits in slices of STOP_CHECK_SECONDS
    thread.join(FAILURE_BOUND_SECONDS)
    assert not thread.is_alive()


def test_the_spacing_is_told_each_pass_and_a_stop_during_it_ends_the_loop() -> None:
    stop, wake = threading.Event(), threading.Event()
    passes, tooks = 0, []

    def step() -> None:
        nonlocal passes
        passes += 1
        wake.set()  # wake-ups keep coming: only the spacing separates passes

    def spacing(took: float) -> float:
        tooks.append(took)
        if len(tooks) == 3:
            stop.set()
        return 0.0

    woken_every(stop, HOUR, "test pass", step, wake=wake, spacing=spacing)
    assert passes == 3
    assert len(tooks) == 3 and all(took >= 0.0 for took in tooks)


def test_a_failing_pass_is_logged_and_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    stop, wake = threading.Event(), threading.Event()
    passes = 0

    def step() -> None:
        nonlocal passes
        passes += 1
        wake.set()
        if passes == 1:
            raise RuntimeError("store down")
        stop.set()

    with caplog.at_level(logging.ERROR, logger="vigil"):
        woken_every(stop, HOUR, "test pass", step, wake=wake)
    assert passes == 2
    assert [r.getMessage() for r in caplog.records] == ["test pass failed; retrying"]


class Writes:
    """Records each batch; sets `stop` once `expected` items were written."""

    def __init__(self, expected: int, stop: threading.Event) -> None:
        self.batches: list[list[str]] = []
        self._expected = expected
        self._stop = stop

    def __call__(self, batch: list[str]) -> None:
        self.batches.append(batch)
        if sum(len(b) for b in self.batches) >= self._expected:
            self._stop.set()


def test_a_batch_is_everything_queued_oldest_first() -> None:
    stop = threading.Event()
    writes = Writes(4, stop)
    drain: Drain[str] = Drain("test write", writes)
    for item in "abcd":
        assert drain.put(item)
    drain.run(stop)
    assert writes.batches == [["a", "b", "c", "d"]]


def test_a_batch_stops_at_most_by_size_but_takes_its_first_item_whole() -> None:
    stop = threading.Event()
    writes = Writes(4, stop)
    drain: Drain[str] = Drain("test write", writes, size=len, most=5)
    for item in ["xxxxxxx", "xx", "xxx", "x"]:
        drain.put(item)
    drain.run(stop)
    assert writes.batches == [["xxxxxxx"], ["xx", "xxx"], ["x"]]


def test_one_at_a_time_when_most_is_one() -> None:
    stop = threading.Event()
    writes = Writes(3, stop)
    drain: Drain[str] = Drain("test write", writes, most=1)
    for item in "abc":
        drain.put(item)
    drain.run(stop)
    assert writes.batches == [["a"], ["b"], ["c"]]


def test_a_bounded_queue_refuses_what_does_not_fit() -> None:
    drain: Drain[str] = Drain("test write", lambda batch: None, capacity=2)
    assert [drain.put(item) for item in "abc"] == [True, True, False]


def test_a_failing_write_is_logged_and_the_next_batch_still_written(caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    written: list[list[str]] = []

    def write(batch: list[str]) -> None:
        if batch == ["bad"]:
            raise RuntimeError("refused")
        written.append(batch)
        stop.set()

    drain: Drain[str] = Drain("test write", write, most=1)
    drain.put("bad")
    drain.put("good")
    with caplog.at_level(logging.ERROR, logger="vigil"):
        drain.run(stop)
    assert written == [["good"]]
    assert [r.getMessage() for r in caplog.records] == ["test write failed; going on with the next batch"]


def test_start_runs_one_writer_however_often_it_is_called() -> None:
    done = threading.Event()
    writers: set[str] = set()

    def write(batch: list[str]) -> None:
        writers.add(threading.current_thread().name)
        if batch[-1] == "last":
            done.set()

    drain: Drain[str] = Drain("test write", write, most=1)
    for item in ["a", "b", "last"]:
        drain.put(item)
        drain.start("test-writer")
    assert done.wait(FAILURE_BOUND_SECONDS)
    assert writers == {"test-writer"}
    assert sum(t.name == "test-writer" for t in threading.enumerate()) == 1
