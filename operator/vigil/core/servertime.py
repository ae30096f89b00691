"""The leader's time, bounded by the API server's: a wall clock a minute ahead fires nothing early.

Vigil fires by the leader's wall clock. Were that clock to step ahead (a bad NTP answer, a
restored snapshot, a hypervisor's hiccup), everything due within the step would fire at once,
early. The cluster holds a second opinion: the API server stamps each answer with a `Date`
header, and the leader renews its Lease every few seconds (`vigil.kube.kits.leasing` hands each
successful write's stamp here). A `ServerTimeReading` is one stamp with the monotonic instants
its request was sent and its answer received. The header has whole seconds and was stamped
somewhere between the two, so at any later monotonic instant the API server's time lies between
`earliest` (the stamp, aged since the answer came) and `latest` (the stamp's second ended, aged
since the request went).

Each reading bounds the API server's time on its own; the last few taken together bound it
tighter (their stamps fall at different points of their seconds), and move on smoothly from one
renewal to the next, where the newest alone could put `earliest` back by up to a second
(`server_bounds`). `bounded_now` decides the time from the own clock and those bounds:

* the own clock no later than `latest` + `TOLERANCE`: it is the time, as it is. A healthy
  replica's clock is never past `latest` (it is an upper bound), so nothing changes for it and
  nothing waits;
* the own clock further ahead: it is not trusted. The time is the `earliest` the API server's
  can be — a moment its clock has surely reached, so nothing fires before the API server's
  time reaches it. Firing waits; nothing is dropped: what comes due fires once the API
  server's time has reached it, at most about a second late (the header's resolution and the
  renewal's round trip). Going from trust to distrust, the time may go back by as much (the
  trigger walks again what it closed meanwhile: `vigil.core.trigger`).

A clock behind the API server's is taken as it is: it fires late, never early. Before any
reading (a standby; a leader before its first write) the own clock is the time.

No I/O here: the readings are handed in, and both clocks (the wall clock and the monotonic one
the readings are timed by) are injected. `ServerBoundedClock` is the `Clock` the composition
root hands to the leader's parts; it logs once when it stops trusting the own clock and once when
it trusts it again, and reports each reading's skew to `on_skew` (the metrics adapter's gauge).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from vigil.core.ports import Clock

log = logging.getLogger(__name__)

#: How far the own clock may be past the latest the API server's time can be and still be the
#: time: the two clocks' rates differ by parts per million, and a reading is seconds old at most
#: (the Lease is renewed every few seconds), so a healthy clock never comes near it; a second
#: keeps a clock that is merely a little ahead from flapping in and out of trust.
TOLERANCE = timedelta(seconds=1)
#: The `Date` header's resolution (RFC 9110's HTTP-date has whole seconds): the stamp is the API
#: server's time truncated to this.
DATE_RESOLUTION = timedelta(seconds=1)
#: Readings taken together: a few renewals' worth (20 s at the default renew period), over which
#: the rates of the monotonic clock and the API server's differ by milliseconds at most.
READINGS_KEPT = 4
_ZERO = timedelta(0)


@dataclasses.dataclass(frozen=True)
class ServerTimeReading:
    """The API server's `Date` on one answer, and when (monotonic seconds) its request was sent
    and its answer received."""

    date: datetime  # timezone-aware UTC, whole seconds, as the header says
    sent: float
    received: float

    def earliest(self, at: float) -> datetime:
        """The earliest the API server's time can be at monotonic instant `at`."""
        return self.date + timedelta(seconds=at - self.received)

    def latest(self, at: float) -> datetime:
        """The latest the API server's time can be at monotonic instant `at`."""
        return self.date + DATE_RESOLUTION + timedelta(seconds=at - self.sent)


@dataclasses.dataclass(frozen=True)
class BoundedTime:
    """The time to act by, and how far the own clock is past the latest the API server's can be
    (zero when it is not past it); `trusted` says whether the own clock was taken as it is."""

    now: datetime
    ahead: timedelta
    trusted: bool


def server_bounds(readings: Sequence[ServerTimeReading], *, at: float) -> tuple[datetime, datetime] | None:
    """The earliest and the latest the API server's time can be at monotonic instant `at`, by
    every reading at once; by the newest alone when they disagree (the API server's clock was
    stepped between them); None without a reading."""
    if not readings:
        return None
    earliest = max(reading.earliest(at) for reading in readings)
    latest = min(reading.latest(at) for reading in readings)
    if earliest > latest:
        newest = max(readings, key=lambda reading: reading.received)
        return newest.earliest(at), newest.latest(at)
    return earliest, latest


def bounded_now(
    own: datetime,
    readings: Sequence[ServerTimeReading],
    *,
    at: float,
    tolerance: timedelta = TOLERANCE,
) -> BoundedTime:
    """The time at monotonic instant `at`, given the own clock's `own` and the readings kept."""
    bounds = server_bounds(readings, at=at)
    if bounds is None:
        return BoundedTime(own, _ZERO, trusted=True)
    earliest, latest = bounds
    ahead = max(_ZERO, own - latest)
    if ahead <= tolerance:
        return BoundedTime(own, ahead, trusted=True)
    return BoundedTime(earliest, ahead, trusted=False)


class ServerBoundedClock:
    """A `Clock`: the own clock, bounded by the API server's time as the readings handed to
    `observe` tell it (see the module docstring). Safe to share between threads."""

    def __init__(
        self,
        own: Clock,
        *,
        monotonic: Callable[[], float],
        tolerance: timedelta = TOLERANCE,
        on_skew: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        self._own = own
        self._monotonic = monotonic
        self._tolerance = tolerance
        #: Seconds the own clock is past the latest the API server's time can be, at each reading.
        self._on_skew = on_skew
        self._lock = threading.Lock()  # the readings and the trust change together
        self._readings: list[ServerTimeReading] = []  # the last READINGS_KEPT, oldest first
        self._trusted = True

    def observe(self, reading: ServerTimeReading) -> None:
        """A new reading. One that disagrees with those kept (the API server's clock was stepped
        between them) replaces them."""
        with self._lock:
            kept = sorted([*self._readings, reading], key=lambda r: r.received)[-READINGS_KEPT:]
            at = reading.received
            if max(r.earliest(at) for r in kept) > min(r.latest(at) for r in kept):
                kept = [reading]
            self._readings = kept
            bounds = server_bounds(kept, at=self._monotonic())
        if bounds is not None:
            self._on_skew(max(_ZERO, self._own.now() - bounds[1]).total_seconds())

    def now(self) -> datetime:
        own = self._own.now()
        with self._lock:
            bounded = bounded_now(own, self._readings, at=self._monotonic(), tolerance=self._tolerance)
            changed = bounded.trusted != self._trusted
            self._trusted = bounded.trusted
        if changed and not bounded.trusted:
            log.warning(
                "the wall clock is %.1fs ahead of the API server's (tolerance %gs): firing follows the API "
                "server's time until the two agree again; nothing is dropped",
                bounded.ahead.total_seconds(), self._tolerance.total_seconds(),
            )  # fmt: skip
        elif changed:
            log.info("the wall clock agrees with the API server's again: it is the time once more")
        return bounded.now
