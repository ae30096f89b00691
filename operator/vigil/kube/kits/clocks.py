"""The operator's one wall clock: the only place in the adapters that reads ``datetime.now``.

Everything that needs the time takes a :class:`vigil.core.ports.Clock` and is handed this one by
the composition root (`vigil.runtime`, or the CLI through `vigil.kube.wiring`); tests hand a
fake. `SYSTEM_CLOCK` is the default of the few kits built outside a root too (the Event
recorder, the Lease elector), so that building one never needs a clock spelled out.
"""

from __future__ import annotations

from datetime import UTC, datetime


class SystemClock:
    """The only clock the operator reads; the core receives it, never `datetime.now()`."""

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()
