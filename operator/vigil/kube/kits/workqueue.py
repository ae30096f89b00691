"""A keyed work queue, like client-go's: every controller's reconciles go through one.

* A key is queued once however often it is added before a worker takes it.
* One key is never processed by two workers at once: added while in process, it
  runs again after.
* `add_after` delays a key (a retry time, a running pod's next look).
* A reconcile that raises is retried with a per-key exponential delay; one that
  returns resets it. A reconcile may return a number of seconds to be looked at
  again.

Reconciles are level-triggered: they read the key's current state from the
caches, so a key processed once for several changes sees them all.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

FIRST_RETRY_SECONDS = 0.05
MAX_RETRY_SECONDS = 30.0


class WorkQueue(Generic[K]):
    def __init__(
        self,
        what: str,
        process: Callable[[K], float | None],
        *,
        workers: int,
        ticks: Callable[[], float] = time.monotonic,
    ) -> None:
        self._what = what
        self._process = process
        self._workers = workers
        self._ticks = ticks
        self._cond = threading.Condition()
        self._ready: deque[K] = deque()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._dirty: set[K] = set()  # added while active: runs again when done
        self._later: list[tuple[float, int, K]] = []
        self._order = itertools.count()
        self._failures: dict[K, int] = {}

    def add(self, key: K) -> None:
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: K, seconds: float) -> None:
        if seconds <= 0:
            self.add(key)
            return
        with self._cond:
            heapq.heappush(self._later, (self._ticks() + seconds, next(self._order), key))
            self._cond.notify()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready) + len(self._later)

    def idle(self) -> bool:
        """Nothing ready and nothing in process (delayed keys do not count)."""
        with self._cond:
            return not self._ready and not self._active

    def _add_locked(self, key: K) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.append(key)
            self._cond.notify()

    def run(self, stop: threading.Event) -> None:
        """Process keys with `workers` threads until `stop` is set."""
        threads = [
            threading.Thread(target=self._work, args=(stop,), name=f"{self._what}-{n}", daemon=True)
            for n in range(self._workers)
        ]
        for thread in threads:
            thread.start()
        while not stop.is_set():
            stop.wait(0.5)
        with self._cond:
            self._cond.notify_all()
        for thread in threads:
            thread.join(timeout=5.0)

    def _take(self, stop: threading.Event) -> K | None:
        with self._cond:
            while not stop.is_set():
                now = self._ticks()
                while self._later and self._later[0][0] <= now:
                    _, _, due = heapq.heappop(self._later)
                    self._add_locked(due)
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._active.add(key)
                    return key
                wait = self._later[0][0] - now if self._later else 0.5
                self._cond.wait(timeout=min(0.5, max(0.001, wait)))
            return None

    def _work(self, stop: threading.Event) -> None:
        while True:
            key = self._take(stop)
            if key is None:
                return
            again: float | None = None
            try:
                again = self._process(key)
                self._failures.pop(key, None)
            except Exception:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                again = min(MAX_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2 ** (failures - 1))
                log.exception("%s: %s failed (%d in a row); again in %.2fs", self._what, key, failures, again)
            with self._cond:
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self._add_locked(key)
            if again is not None:
                self.add_after(key, again)
