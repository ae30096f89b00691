"""The keyed work queue: once per key however often added, never one key on two workers,
delays honoured, failures retried with a growing delay. Real threads; every wait is for a
condition with a deadline."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from tests.waiting import wait_for
from vigil.kube.kits.workqueue import FIRST_RETRY_SECONDS, WorkQueue


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def running(queue: WorkQueue[str], stop: threading.Event) -> WorkQueue[str]:
    threading.Thread(target=queue.run, args=(stop,), daemon=True).start()
    return queue


def test_a_key_added_many_times_while_it_waits_is_processed_once(stop: threading.Event) -> None:
    gate = threading.Event()
    seen: Counter[str] = Counter()

    def process(key: str) -> None:
        if key == "blocker":
            gate.wait(10)
        seen[key] += 1

    queue: WorkQueue[str] = WorkQueue("test", process, workers=1)
    queue.add("blocker")  # holds the only worker while "k" is added again and again
    for _ in range(50):
        queue.add("k")
    running(queue, stop)
    gate.set()
    wait_for(lambda: seen["k"] == 1 and len(queue) == 0, timeout=5, what="k processed")
    assert seen == Counter({"blocker": 1, "k": 1})


def test_one_key_never_runs_on_two_workers_and_an_add_during_processing_runs_it_again(
    stop: threading.Event,
) -> None:
    inside = threading.Event()
    release = threading.Event()
    active = Counter[str]()
    overlap: list[str] = []
    runs: Counter[str] = Counter()
    lock = threading.Lock()

    def process(key: str) -> None:
        with lock:
            active[key] += 1
            if active[key] > 1:
                overlap.append(key)
        runs[key] += 1
        if runs[key] == 1:
            inside.set()
            release.wait(10)
        with lock:
            active[key] -= 1

    queue = running(WorkQueue("test", process, workers=4), stop)
    queue.add("k")
    wait_for(inside.is_set, timeout=5, what="first run inside")
    queue.add("k")  # while it runs: must run again after, not beside
    queue.add("k")
    assert runs["k"] == 1
    release.set()
    wait_for(lambda: runs["k"] == 2, timeout=5, what="the second run")
    assert overlap == []
    assert runs["k"] == 2, "two adds during one run make one more run"


def test_add_after_waits_at_least_the_delay(stop: threading.Event) -> None:
    done: dict[str, float] = {}
    queue = running(WorkQueue("test", lambda key: done.setdefault(key, time.monotonic()) and None, workers=2), stop)
    added = time.monotonic()
    queue.add_after("later", 0.3)
    queue.add("now")
    wait_for(lambda: "later" in done, timeout=5, what="the delayed key")
    assert done["later"] - added >= 0.3
    assert done["now"] < done["later"]


def test_a_failing_key_is_retried_with_a_growing_delay_and_other_keys_go_on(stop: threading.Event) -> None:
    attempts: list[float] = []
    others: Counter[str] = Counter()

    def process(key: str) -> None:
        if key == "bad":
            attempts.append(time.monotonic())
            if len(attempts) < 4:
                raise RuntimeError("refused")
        else:
            others[key] += 1

    queue = running(WorkQueue("test", process, workers=1), stop)
    queue.add("bad")
    for n in range(5):
        queue.add(f"good-{n}")
    wait_for(lambda: len(attempts) == 4, timeout=10, what="the fourth attempt")
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert all(gap >= FIRST_RETRY_SECONDS * 2**i for i, gap in enumerate(gaps)), gaps
    assert sum(others.values()) == 5


def test_a_returned_delay_looks_at_the_key_again(stop: threading.Event) -> None:
    runs: Counter[str] = Counter()

    def process(key: str) -> float | None:
        runs[key] += 1
        return 0.05 if runs[key] < 3 else None

    queue: WorkQueue[str] = running(WorkQueue("test", process, workers=1), stop)
    queue.add("k")
    wait_for(lambda: runs["k"] == 3, timeout=5, what="three looks")
    assert wait_until_quiet(lambda: runs["k"]) == 3


def wait_until_quiet(value: Callable[[], int]) -> int:
    """The value once it has not changed for a while (0.3 s, six times the re-look delay)."""
    last, since = value(), time.monotonic()
    while time.monotonic() - since < 0.3:
        time.sleep(0.05)
        if value() != last:
            last, since = value(), time.monotonic()
    return last
