"""The sustained floor is the rate a plain client holds for as long as the soak runs (bench/steady.py):
a rate held for a minute here (40 pods/s) was not what the machine sustained for ten, so the soak's
reference is confirmed at the soak's length, highest held rate first."""

from __future__ import annotations

import math

from bench.reporting import percentile
from bench.steady import Rate, Soak, censored, confirmations, floor_rows, soak_rows


def rate(r: float, *, held: bool) -> Rate:
    return Rate(r, int(r * 60), 0.2 if held else math.inf, 0)


def test_only_the_rates_that_held_briefly_are_run_again_highest_first() -> None:
    tried = [rate(5, held=True), rate(10, held=True), rate(20, held=True), rate(30, held=False)]
    assert confirmations(tried) == [20, 10, 5]
    assert confirmations([rate(5, held=False)]) == []


def test_the_soaks_reference_is_the_rate_held_for_its_length_not_the_brief_one() -> None:
    tried = [rate(10, held=True), rate(20, held=True), rate(40, held=False)]
    best, rows = floor_rows(tried, 60, rate(10, held=True), 600)
    assert best == 10
    assert [row.measured for row in rows] == ["20 pods/s", "10 pods/s"]
    assert "600s" in rows[1].figure


def test_no_rate_held_for_the_soaks_length_leaves_the_soak_without_a_reference() -> None:
    best, rows = floor_rows([rate(10, held=True), rate(20, held=False)], 60, None, 600)
    assert best is None
    assert rows[1].measured.startswith("n/a")


def test_a_soak_that_falls_behind_shows_as_behind_not_as_the_few_pods_it_managed() -> None:
    """At 32/s the last third's occurrences had no pod seen at all, and the row printed `nans`."""
    due = 32 * 600 // 3
    few = [(500.0 + i / 10, 0.5) for i in range(100)]  # 100 of the last third's 6,400 were seen, on time
    s = Soak(32, 960, [(i / 32, 0.2) for i in range(due)] + few, [(0.0, 140.0), (590.0, 150.0)], 0, 0, [])
    lag = soak_rows(s, 600)[0]
    assert lag.measured == ">15s"
    assert lag.reference.startswith("0.20s")


def test_an_occurrence_or_two_missed_at_a_thirds_edge_leaves_its_p99_finite() -> None:
    assert censored([0.3] * 990, 1_000).count(math.inf) == 10
    assert percentile(censored([0.3] * 995, 1_000), 0.99) == 0.3
