"""Waiting for a condition with a deadline: the only synchronisation tests may use."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Call `probe` until it returns something truthy; return it, or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
        time.sleep(interval)
