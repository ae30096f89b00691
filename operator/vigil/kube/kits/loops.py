"""The shapes of the leader's long-running work that is not a controller, each a named loop.

Work driven by objects is a controller (`vigil.kube.kits.informer` → `vigil.kube.kits.workqueue` →
a reconcile). Everything else that runs for the process's life is one of these:

- `every`: a named periodic pass, one thread repeating one step on an interval (history flush,
  workflow resync, retention, heap trim, the approval key's check).
- `woken_every`: the same, but a pass also starts as soon as its `wake` Event is set, spaced
  by at least a gap after the last (the dispatcher, woken by what becomes Ready or frees a slot;
  the TaskQueue pass, woken by a TaskQueue that changed).
- `Drain`: a queue and the one thread that writes what was put on it, a batch at a time,
  oldest first (the event recorder, the workflow history's mirror writer, the bucket store's
  group commit). A writer is not a pass: it has no interval, it waits for work and takes
  everything that waited meanwhile, so a burst costs one write, not one each.
- `trigger_loop` and `watch`: the trigger's and the watchdog's passes, `every` with their own
  timing (a pass when the next occurrence is due; the audit every audit interval).

A failing pass or write is logged and tried again (at the next interval, or with the next
batch), never fatal: the operator keeps firing whatever one pass meets. Every wait is on the
stop event (or, for a pass that waits to be woken, in slices of at most `STOP_CHECK_SECONDS`),
so a graceful handover (`vigil.kube.lifecycle`) ends them within one interval. What a pass
reports goes to a callback, so this module needs no metrics.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from vigil.core.trigger import TickReport, seconds_to_next_pass
from vigil.settings import Settings

if TYPE_CHECKING:  # annotations only
    from vigil.core.trigger import Trigger

log = logging.getLogger("vigil")

T = TypeVar("T")

#: How often a pass waiting to be woken looks whether it was told to stop, and how often an
#: idle `Drain` run until a stop looks at it.
STOP_CHECK_SECONDS = 0.5


class TickRecorder(Protocol):
    def __call__(self, report: TickReport, *, duration_seconds: float) -> None: ...


def _ignore_tick(report: TickReport, *, duration_seconds: float) -> None:
    """No recorder: the default."""


def trigger_loop(
    trigger: Trigger, settings: Settings, stop: threading.Event, *, on_tick: TickRecorder = _ignore_tick
) -> None:
    """A trigger pass every tick, or sooner when an occurrence comes due before it; a rescan for
    pending buckets behind the cursor every rescan period.

    A pass says when its minute has the next occurrence to fire (`TickReport.next_fire`), and the
    next pass starts then, not at the next tick: with jitter, fires are spread over the minute,
    and each would otherwise wait for the tick after its fire time (up to a whole interval, an
    eighth of a second on average at the default). Passes are at least `core.trigger.MIN_PASS_GAP` apart, so
    fire times close together are fired by one pass. The interval still bounds the wait, for
    what a pass cannot see yet (an occurrence inserted meanwhile).
    """
    interval = settings.trigger.tick_milliseconds / 1000
    rescan_every = settings.trigger.rescan_seconds
    last_rescan = time.monotonic()
    trigger.rescan()
    while not stop.is_set():
        started = time.monotonic()
        wait = interval
        try:
            report = trigger.tick()
            on_tick(report, duration_seconds=time.monotonic() - started)
            wait = seconds_to_next_pass(interval=interval, next_fire=report.next_fire, now=report.now)
        except Exception:
            log.exception("trigger pass failed; retrying next tick")
        if time.monotonic() - last_rescan > rescan_every:
            last_rescan = time.monotonic()
            try:
                trigger.rescan()
            except Exception:
                log.exception("bucket rescan failed")
        stop.wait(max(0.0, wait - (time.monotonic() - started)))
    trigger.drain()  # what it fired is marked before a successor reads the buckets


def every(stop: threading.Event, interval: float, what: str, step: Callable[[], object]) -> None:
    """Run `step` every `interval` seconds until stopped; a failing step is logged, never fatal."""
    while not stop.is_set():
        _attempt(what, step)
        stop.wait(interval)


def woken_every(
    stop: threading.Event,
    interval: float,
    what: str,
    step: Callable[[], object],
    *,
    wake: threading.Event,
    spacing: Callable[[float], float] = lambda took: 0.0,
) -> None:
    """Run `step` every `interval` seconds, or sooner when `wake` is set, until stopped.

    A wake-up that comes during a pass starts the next one as soon as it is over, and wake-ups
    that come together make one pass. `spacing(took)` is the least gap after a pass that took
    `took` seconds (a burst of wake-ups then costs a bounded share of the time), waited on the
    stop alone; the rest of the interval is waited on `wake`, in slices of `STOP_CHECK_SECONDS`
    so a stop is seen even when nothing wakes the pass. A failing step is logged, never fatal."""
    while not stop.is_set():
        wake.clear()
        began = time.monotonic()
        _attempt(what, step)
        gap = spacing(time.monotonic() - began)
        if stop.wait(gap):
            break
        waited = gap
        while waited < interval and not stop.is_set() and not wake.is_set():
            slice_ = min(STOP_CHECK_SECONDS, interval - waited)
            wake.wait(slice_)
            waited += slice_


def _attempt(what: str, step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:
        log.exception("%s failed; retrying", what)


class Drain(Generic[T]):
    """A queue and the one thread that writes what is put on it, a batch at a time, oldest first.

    `write(batch)` gets everything queued when the thread came to it (a batch is never empty),
    up to `most` by `size` (the first item always, then while the batch is under `most`);
    a write that raises is logged and the drain goes on with the next batch (a writer that must
    tell its callers of a failure catches it itself). `capacity` bounds the queue (0: unbounded);
    `put` says whether the item was taken.

    The thread is either the caller's (`run(stop)`, which the runtime names and stops like any
    pass: what is still queued at the stop is left) or one of the drain's own (`start`, once,
    idempotent: a daemon for the process's life, for a writer whose callers are not threads the
    runtime starts).
    """

    def __init__(
        self,
        what: str,
        write: Callable[[list[T]], object],
        *,
        size: Callable[[T], int] = lambda item: 1,
        most: int | None = None,
        capacity: int = 0,
    ) -> None:
        self.what = what
        self._write = write
        self._size = size
        self._most = most
        self._queue: queue.Queue[T] = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    def put(self, item: T) -> bool:
        """Queue `item` for the writer; False (nothing queued) when the queue is at capacity."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            return False
        return True

    def start(self, name: str) -> None:
        """Run the writer on a daemon thread of this name, for the process's life (once)."""
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(target=self.run, name=name, daemon=True)
                self._thread.start()

    def run(self, stop: threading.Event | None = None) -> None:
        """Write batches until `stop` is set (None: never), looking at it every
        `STOP_CHECK_SECONDS` while idle."""
        while stop is None or not stop.is_set():
            self._write_next(STOP_CHECK_SECONDS if stop is not None else None)

    def _write_next(self, timeout: float | None) -> None:
        """Write the next batch, if one comes within `timeout`. A function of its own so that no
        batch outlives its write: the loop would otherwise hold the last one while it waits, and
        with it every caller's item (the bucket store's futures and their callbacks)."""
        batch = self._take(timeout)
        if not batch:
            return
        try:
            self._write(batch)
        except Exception:
            log.exception("%s failed; going on with the next batch", self.what)

    def _take(self, timeout: float | None) -> list[T]:
        """The oldest item, waiting up to `timeout` for one (none: []), and what waits behind it."""
        try:
            batch = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return []
        taken = self._size(batch[0])
        while self._most is None or taken < self._most:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            batch.append(item)
            taken += self._size(item)
        return batch


class AuditedPass(Protocol):
    """A watchdog as `watch` runs it: the cluster's (`vigil.kube.controllers.watchdog.Watchdog`, a
    floor above this kit) or the volume tier's (`vigil.queue.watchdog`)."""

    def check(self, *, audit: bool = True) -> object: ...


def watch(
    watchdog: AuditedPass, settings: Settings, stop: threading.Event, *, volume: AuditedPass | None = None
) -> None:
    """Watchdog passes every interval; the schedule-integrity audit every audit interval. With
    `volume` (the volume tier's watchdog, `vigil.queue.watchdog`), its pass follows each one: a
    store that does not answer fails that pass alone."""
    last_audit = float("-inf")
    while not stop.is_set():
        audit = time.monotonic() - last_audit >= settings.audit.interval_seconds
        try:
            watchdog.check(audit=audit)
            if audit:
                last_audit = time.monotonic()
        except Exception:
            log.exception("watchdog pass failed; retrying")
        if volume is not None:
            try:
                volume.check(audit=audit)
            except Exception:
                log.exception("volume-tier watchdog pass failed; retrying")
        stop.wait(settings.watchdog.interval_seconds)
