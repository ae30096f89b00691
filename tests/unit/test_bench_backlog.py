"""The backlog section's figure is the median of its windows (bench/backlog.py): one window of
10,000 is timed in a second or two, and a single window's rate moved by up to 1.4x between runs."""

from __future__ import annotations

from bench.backlog import depth_rows, median
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


def test_depth_is_weighed_against_what_the_server_itself_loses() -> None:
    """At 1,000,000 ready the SQL floor ran at 0.56x its rate at 10,000 (4 processes): the issue's
    0.9x of Vigil's own rate is printed as it is, and beside the floor's share, which is the
    reading that says whether the lease's cost grew with depth."""
    rates = {
        ("vigil", 10_000, 4): window(10_000), ("vigil", 1_000_000, 4): window(8_000),
        ("floor", 10_000, 4): window(20_000), ("floor", 1_000_000, 4): window(11_000),
    }  # fmt: skip
    own, beside_floor = depth_rows(rates, 1_000_000, 10_000, 4)
    assert own.ratio == "0.80x"
    assert beside_floor.measured == "0.80x"
    assert beside_floor.reference == "floor 0.55x"
    assert beside_floor.ratio == "1.45x"


def test_a_censored_window_leaves_the_depth_weighing_without_a_ratio() -> None:
    rates = {
        ("vigil", 10_000, 1): window(10_000), ("vigil", 1_000_000, 1): window(8_000, complete=False),
        ("floor", 10_000, 1): window(20_000), ("floor", 1_000_000, 1): window(11_000),
    }  # fmt: skip
    assert depth_rows(rates, 1_000_000, 10_000, 1)[1].ratio == "n/a (censored)"
