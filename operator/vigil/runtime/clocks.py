"""The operator's clocks: its wall clock, made by one replaceable maker, and that clock bounded by
the API server's time. Every part is handed a clock built here; none reads the time itself."""

from __future__ import annotations

import time
from collections.abc import Callable

from vigil import metrics
from vigil.core.ports import Clock
from vigil.core.servertime import ServerBoundedClock
from vigil.kube.wiring import SystemClock

#: Makes this process's wall clock: the composition root's clocks come from it, and it hands them to
#: every part. A test's launcher may put another here before `main` runs (tests/faults/stepped_operator.py).
wall_clock: Callable[[], Clock] = SystemClock


def bounded_clock() -> ServerBoundedClock:
    """The operator's time: the wall clock, bounded by the API server's as the Lease's writes
    tell it (`vigil.core.servertime`), so a leader whose clock runs ahead fires nothing early."""
    return ServerBoundedClock(wall_clock(), monotonic=time.monotonic, on_skew=metrics.record_clock_ahead)
