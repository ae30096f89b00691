"""The leader's long-running passes: each a thread that repeats one step until told to stop.

A failing pass is logged and tried again at the next interval, never fatal:
the operator keeps firing whatever one pass meets. Every wait is on the stop
event, so a graceful handover (`vigil.runtime`) ends them within one interval.
What a pass reports goes to a callback, so this module needs no metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from vigil.core.trigger import TickReport, Trigger, seconds_to_next_pass
from vigil.kube.watchdog import Watchdog
from vigil.settings import Settings

log = logging.getLogger("vigil")


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
        try:
            step()
        except Exception:
            log.exception("%s failed; retrying", what)
        stop.wait(interval)


class AuditedPass(Protocol):
    def check(self, *, audit: bool = True) -> object: ...


def watch(
    watchdog: Watchdog, settings: Settings, stop: threading.Event, *, volume: AuditedPass | None = None
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
