"""The benchmarks' figures when a deadline cut the measurement short (bench/reporting.py).

A run that ends at its deadline with some items unfinished must say how many of how many
finished and print a censored figure: a rate counted over the finished ones only and marked
as a lower bound, a duration as longer than the time waited, latencies with the missing
samples counted as longer than the window. Never count / elapsed as if all had finished.
"""

from __future__ import annotations

import math

import pytest

from bench.reporting import Completion, Row, duration, rate, ratio, summary, table


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        pytest.param(Completion(300, 300, 24.0), "12.5 executions/s (300 in 24.0s)", id="all finished"),
        pytest.param(
            Completion(150, 300, 600.0),
            ">= 0.2 executions/s (censored: only 150/300 finished before the deadline, 600s in; "
            "the rate counts only those)",
            id="the deadline came first: finished ones only, a lower bound",
        ),
        pytest.param(
            Completion(0, 300, 600.0),
            ">= 0.0 executions/s (censored: only 0/300 finished before the deadline, 600s in; "
            "the rate counts only those)",
            id="nothing finished",
        ),
    ],
)
def test_a_rate_counts_only_what_finished_and_says_when_it_is_censored(done: Completion, expected: str) -> None:
    assert rate(done, "executions") == expected


def test_a_censored_rate_is_never_the_count_over_the_time_waited() -> None:
    done = Completion(finished=100, expected=1000, seconds=100.0)

    assert done.rate == 1.0  # not 1000 / 100
    assert not done.complete
    assert "10.0" not in rate(done, "workflows")


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        pytest.param(Completion(1000, 1000, 41.25), "41.2s", id="all finished"),
        pytest.param(
            Completion(700, 1000, 900.4),
            ">900s (censored: only 700/1000 finished before the deadline, 900s in)",
            id="the deadline came first: longer than the wait",
        ),
    ],
)
def test_a_duration_that_ran_out_is_printed_as_longer_than_the_wait(done: Completion, expected: str) -> None:
    assert duration(done) == expected


def test_latencies_count_the_unobserved_as_longer_than_the_window() -> None:
    observed = [1.0, 2.0, 3.0]

    assert summary(observed, 3, 600) == "n=3 p50=2.000s p99=3.000s max=3.000s mean=2.000s"
    assert summary(observed, 10, 600) == "n=3/10 p50>600s p99>600s max>600s mean of observed=2.000s"
    assert summary([], 10, 600) == "no samples"


@pytest.mark.parametrize(
    ("measured", "reference", "expected"),
    [
        pytest.param(12.0, 4.0, "3.00x", id="beside the floor"),
        pytest.param(math.inf, 4.0, "n/a (censored)", id="the measurement ran out: no ratio"),
        pytest.param(12.0, None, "n/a (no podfloor in this run)", id="no reference from the same run"),
    ],
)
def test_a_ratio_is_only_printed_between_two_complete_figures(
    measured: float, reference: float | None, expected: str
) -> None:
    assert ratio(measured, reference) == expected


def test_the_summary_table_has_one_aligned_row_per_figure() -> None:
    lines = table([Row("pod observed p99", "12.00s", "4.00s", "3.00x", "<= 2x"), Row("writes", "2.10")])

    assert lines[0].split() == ["figure", "measured", "reference", "ratio", "target"]
    assert set(lines[1].strip()) <= {"-", " "}
    assert lines[2].split()[-1] == "2x" and "3.00x" in lines[2]
    assert lines[3].index("2.10") == lines[2].index("12.00s")
