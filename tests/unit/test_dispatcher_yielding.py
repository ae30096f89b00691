"""The dispatcher's gate for pod creates: while the trigger is behind (a burst), at most a few
pods are created at once, so the Executions recording the occurrences go first; otherwise the
gate holds no one back.

Eight threads enter the gate together and wait inside for one another: with the trigger behind
only two are ever inside at once, otherwise all eight are.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

from vigil.kube.dispatcher import Yielding

THREADS = 8


def most_inside_at_once(gate: Yielding) -> int:
    inside = 0
    most = 0
    lock = threading.Lock()
    everyone_in = threading.Barrier(THREADS, timeout=1)

    def enter(_: int) -> None:
        nonlocal inside, most
        with gate():
            with lock:
                inside += 1
                most = max(most, inside)
            with contextlib.suppress(threading.BrokenBarrierError):
                everyone_in.wait()  # meets the others inside only if the gate lets them all in
            with lock:
                inside -= 1

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(enter, range(THREADS)))
    return most


def test_while_the_trigger_is_behind_only_two_pods_are_created_at_once() -> None:
    assert most_inside_at_once(Yielding(lambda: True, 2)) == 2


def test_otherwise_the_gate_holds_no_one_back() -> None:
    assert most_inside_at_once(Yielding(lambda: False, 2)) == THREADS
