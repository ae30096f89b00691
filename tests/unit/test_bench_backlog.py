"""The backlog section's figure is the median of its windows (bench/backlog.py): one window of
10,000 is timed in a second or two, and a single window's rate moved by up to 1.4x between runs."""

from __future__ import annotations

from bench.backlog import median
from bench.reporting import Completion


def window(rate: float, *, complete: bool = True) -> Completion:
    return Completion(100 if complete else 50, 100, (100 if complete else 50) / rate)


def test_the_median_window_is_the_figure_whatever_their_order() -> None:
    assert median([window(300), window(100), window(200)]).rate == 200


def test_of_two_the_slower_is_taken() -> None:
    assert median([window(300), window(100)]).rate == 100


def test_a_censored_window_ranks_below_every_complete_one() -> None:
    assert median([window(900, complete=False), window(100), window(200)]).rate == 100
    assert not median([window(900, complete=False), window(800, complete=False), window(200)]).complete
