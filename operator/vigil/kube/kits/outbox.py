"""A bounded outbox: deliveries to a slow or failing endpoint, off the threads that ask for them.

Why. Approval notifications were POSTed inside the workflow engine's passes, so a notifier that
took its whole timeout to answer held one of the engine's few workers that long, per token, and
every tenant's workflows waited behind it. Here a pass only *offers* a key (the workflow whose
tokens may need sending: a set insertion under a lock), and a small pool of sender threads of
the outbox's own delivers it.

What it keeps.

* **Keyed, level-triggered.** An item is a key, not a message: the sender reads the key's
  state when it delivers, so an item offered ten times before a sender takes it is delivered
  once, and one that became moot meanwhile (the step was decided) delivers nothing. One key is
  never delivered by two senders at once (the :class:`~vigil.kube.kits.workqueue.WorkQueue` under
  it serialises per key; offered while in delivery, it is delivered again after).
* **Retries with capped exponential backoff and jitter** (:func:`retry_delay`): a delivery
  that fails (returns False or raises) is tried again after ``first_retry``, then twice that,
  and so on up to ``max_retry``, each stretched by up to :data:`JITTER` of itself at random so
  that many keys failing together do not all come back in the same instant. A success resets
  the count. Nothing is given up: a key stays until it is delivered (or its delivery finds
  nothing to send), at ``max_retry`` intervals at worst.
* **Bounded.** At most ``capacity`` keys wait (ready, backing off, or in delivery). When it is
  full a new key is *refused* (:meth:`Outbox.offer` returns False, counted and logged), never
  one already accepted: the caller keeps the refused key marked as not sent, and its next
  offer (for workflows: the next pass, and the engine's resync passes every unfinished
  workflow) tries again. Refusing the newest, not dropping the oldest, is what loses nothing:
  an accepted key is always delivered or retried, and a refused one is re-offered by the
  level-triggered caller. The bound is the number of keys, so memory stays a set of names
  whatever the notifier does.

Time. The retry delays run on an injected ``ticks`` (seconds, monotonic) and ``spread``
(uniform in [0, 1)), so tests step a fake clock and pin the jitter.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from vigil.kube.kits.workqueue import WorkQueue

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

#: How far above its base a retry delay may be stretched, as a fraction of it: 0.2 spreads keys
#: that failed together over a fifth of their interval, and keeps each retry no earlier than the
#: base (``first_retry`` is a promise: "tried again after retrySeconds").
JITTER = 0.2


def retry_delay(failures: int, *, first: float, cap: float, spread: float) -> float:
    """Seconds before try ``failures + 1`` of a delivery that failed ``failures`` times in a row:
    ``first * 2**(failures-1)``, at most ``cap``, stretched by ``JITTER * spread`` of itself
    (``spread`` in [0, 1)). Never earlier than the base; at most ``cap * (1 + JITTER)``."""
    base = min(cap, first * 2.0 ** min(failures - 1, 62))
    return base * (1.0 + JITTER * spread)


class Outbox(Generic[K]):
    """Keys waiting to be delivered by ``senders`` threads of their own; see the module docstring."""

    def __init__(
        self,
        what: str,
        deliver: Callable[[K], bool],
        *,
        senders: int,
        capacity: int,
        first_retry: float,
        max_retry: float,
        ticks: Callable[[], float] = time.monotonic,
        spread: Callable[[], float] = random.random,
        on_depth: Callable[[int], None] = lambda depth: None,
        on_failed: Callable[[], None] = lambda: None,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self._what = what
        self._deliver = deliver
        self._capacity = capacity
        self._first = first_retry
        self._cap = max(first_retry, max_retry)
        self._spread = spread
        self._on_depth = on_depth
        self._on_failed = on_failed
        self._on_refused = on_refused
        self._lock = threading.Lock()
        #: Keys accepted and not yet delivered: ready, backing off, or in delivery.
        self._pending: set[K] = set()
        self._failures: dict[K, int] = {}
        self._queue: WorkQueue[K] = WorkQueue(what, self._attempt, workers=senders, ticks=ticks)

    def offer(self, key: K) -> bool:
        """Queue ``key`` for delivery (a key already waiting is not queued twice); False when the
        outbox is full and the key was refused: the caller offers it again later."""
        with self._lock:
            if key not in self._pending:
                if len(self._pending) >= self._capacity:
                    refused = True
                else:
                    refused = False
                    self._pending.add(key)
            else:
                refused = False
            depth = len(self._pending)
        if refused:
            self._on_refused()
            log.warning("%s: %d keys wait already; %s refused, offered again on its next pass",
                        self._what, depth, key)  # fmt: skip
            return False
        self._on_depth(depth)
        self._queue.add(key)
        return True

    @property
    def depth(self) -> int:
        """Keys accepted and not yet delivered."""
        with self._lock:
            return len(self._pending)

    def idle(self) -> bool:
        """Nothing accepted waits (delivered, or never offered)."""
        return self.depth == 0

    def run(self, stop: threading.Event) -> None:
        """Deliver with the sender threads until ``stop``; a delivery in flight then is abandoned
        to its own timeout (the threads are daemons)."""
        self._queue.run(stop)

    def _attempt(self, key: K) -> float | None:
        """One delivery of ``key`` (a WorkQueue process): None when done, else the seconds until
        the next try."""
        try:
            delivered = self._deliver(key)
        except Exception:
            log.exception("%s: delivery for %s failed", self._what, key)
            delivered = False
        with self._lock:
            if delivered:
                self._failures.pop(key, None)
                self._pending.discard(key)
                failures = 0
            else:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                self._pending.add(key)  # a re-run after an offer made during delivery counts again
            depth = len(self._pending)
        self._on_depth(depth)
        if not failures:
            return None
        self._on_failed()
        delay = retry_delay(failures, first=self._first, cap=self._cap, spread=self._spread())
        log.info("%s: %s not delivered (%d in a row); again in %.1fs", self._what, key, failures, delay)
        return delay
