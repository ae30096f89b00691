"""The retry policy both tiers share: how many attempts, and the full-jitter wait between them.

Backoff uses *full jitter*: the wait before attempt n+1 is uniform in
[0, min(max, initial * factor**(n-1))]. The "random" fraction is a hash of the
execution id and attempt, so every replica, every worker and every replay computes
the same instant.

Its own module, apart from the execution state machine (vigil.core.executions, which
re-exports it): the volume tier's rules (vigil.core.queue) and `vigil worker` need the
policy and not the declarative tier's executions and dispatch, and a worker pays for
every module it imports before its first lease.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import timedelta

_ONE_MILLISECOND = timedelta(milliseconds=1)
#: Bytes of the SHA-256 digest read as the jitter fraction (64 bits, as in vigil.core.jitter).
_FRACTION_BYTES = 8
_FRACTION_SCALE_BITS = _FRACTION_BYTES * 8


@dataclasses.dataclass(frozen=True)
class Backoff:
    """The wait between attempts: initial, initial*factor, ... capped at max (each with full jitter)."""

    initial: timedelta = timedelta(seconds=10)  # cap of the wait before the second attempt
    factor: float = 2.0  # growth of the cap per failed attempt
    max: timedelta = timedelta(minutes=10)  # the cap never grows beyond this

    def __post_init__(self) -> None:
        if self.initial < timedelta(0):
            raise ValueError(f"backoff initial must not be negative, got {self.initial}")
        if self.factor < 1:
            raise ValueError(f"backoff factor must be at least 1, got {self.factor}")
        if self.max < self.initial:
            raise ValueError(
                f"backoff max ({self.max}) must not be shorter than initial ({self.initial})"
            )


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3  # attempts in total, the first included
    backoff: Backoff = Backoff()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")


def backoff_cap(backoff: Backoff, *, attempt: int) -> timedelta:
    """min(max, initial * factor**(attempt-1)), rounded down to whole milliseconds."""
    if attempt < 1:
        raise ValueError(f"attempt must be at least 1, got {attempt}")
    initial_ms = backoff.initial // _ONE_MILLISECOND
    max_ms = backoff.max // _ONE_MILLISECOND
    try:
        grown = initial_ms * backoff.factor ** (attempt - 1)
    except OverflowError:  # factor**n beyond a float: far past any max
        return timedelta(milliseconds=max_ms)
    return timedelta(milliseconds=max_ms if grown >= max_ms else int(grown))


def backoff_delay(policy: RetryPolicy, *, attempt: int, execution_id: str) -> timedelta:
    """The wait after failed attempt `attempt`: whole milliseconds, uniform in [0, backoff_cap].

    The fraction is SHA-256 of ``"{execution_id}|{attempt}"``, never a random
    number, so every replica and every replay of the same failure agrees.
    """
    cap_ms = backoff_cap(policy.backoff, attempt=attempt) // _ONE_MILLISECOND
    digest = hashlib.sha256(f"{execution_id}|{attempt}".encode()).digest()
    fraction = int.from_bytes(digest[:_FRACTION_BYTES], "big")  # fraction / 2**64 is in [0, 1)
    return timedelta(milliseconds=(fraction * (cap_ms + 1)) >> _FRACTION_SCALE_BITS)
