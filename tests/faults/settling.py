"""Waiting for a scenario's end state without taking the checker's place.

A scenario waits for its end state (every occurrence fired, every row written) before its
history is judged; if that never comes, the wait gives up and the checker judges the history as
it is, so what is missing shows as lost, or acknowledged then lost, in its verdict and the table,
not as a timeout. That is how a guarantee broken on purpose is seen to be caught.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.waiting import wait_for


def settle(probe: Callable[[], object], *, timeout: float, what: str) -> bool:
    """Wait up to `timeout` s for `probe`; whether it came (the checker judges either way)."""
    try:
        wait_for(probe, timeout=timeout, what=what)
    except AssertionError as error:
        print(f"not settled, the checker judges the history as it is: {error}")
        return False
    return True
