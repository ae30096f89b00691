"""How the benchmarks print a figure whose measurement a deadline may have cut short.

Every measurement waits for N things with a deadline, and can end with fewer done. Printing
N / elapsed, or the deadline as "the time it took", would present an unfinished run as a
finished one. What was not observed is censored: all we know is that it takes longer than the
window. So latencies count one infinity per missing sample (printed `>window`), a duration
that ran out prints as `>seconds`, and a rate counts only what finished, says how many of how
many that was, and is marked as a lower bound (`>=`): the system did at least that much work
per second, and finishing the rest takes longer still.
"""

from __future__ import annotations

import dataclasses
import math
import statistics


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def censored(values: list[float], expected: int) -> list[float]:
    """`values` with one infinity for each sample never observed: it took longer than the window."""
    return values + [math.inf] * max(0, expected - len(values))


def summary(values: list[float], expected: int | None = None, window: float | None = None) -> str:
    """p50/p99/max over `expected` samples; those never observed count as longer than `window`."""
    if not values:
        return "no samples"
    if expected is None or len(values) >= expected:
        n, padded, mean = str(len(values)), values, "mean"
    else:
        n, padded, mean = f"{len(values)}/{expected}", censored(values, expected), "mean of observed"

    def fmt(v: float) -> str:
        return f"={v:.3f}s" if math.isfinite(v) else f">{window or 0:g}s"

    return (
        f"n={n} p50{fmt(percentile(padded, 0.5))} p99{fmt(percentile(padded, 0.99))} "
        f"max{fmt(max(padded))} {mean}={statistics.fmean(values):.3f}s"
    )


@dataclasses.dataclass(frozen=True)
class Completion:
    """`finished` of `expected` items were done when the wait ended, `seconds` after the clock started.

    The wait ends when all are done or at its deadline, whichever comes first.
    """

    finished: int
    expected: int
    seconds: float

    @property
    def complete(self) -> bool:
        return self.finished >= self.expected

    @property
    def rate(self) -> float:
        """Items per second, counting only those that finished (all of them when complete)."""
        return min(self.finished, self.expected) / max(self.seconds, 1e-9)

    @property
    def shortfall(self) -> str:
        """What a censored figure must say beside it: how many finished before the deadline."""
        return f"censored: only {self.finished}/{self.expected} finished before the deadline, {self.seconds:.0f}s in"


def rate(done: Completion, unit: str, *, digits: int = 1) -> str:
    """`12.3 executions/s (300 in 24.4s)`; when the deadline came first, a lower bound that says so."""
    figure = f"{done.rate:.{digits}f} {unit}/s"
    if done.complete:
        return f"{figure} ({done.expected} in {done.seconds:.1f}s)"
    return f">= {figure} ({done.shortfall}; the rate counts only those)"


def duration(done: Completion) -> str:
    """`41.2s` for the time to finish all; `>900s (...)` when the deadline came first."""
    if done.complete:
        return f"{done.seconds:.1f}s"
    return f">{done.seconds:.0f}s ({done.shortfall})"


@dataclasses.dataclass(frozen=True)
class Row:
    """One figure of the final table: what was measured, beside its reference from the same run."""

    figure: str
    measured: str
    reference: str = "-"
    ratio: str = "-"
    target: str = "-"


def ratio(measured: float, reference: float | None) -> str:
    """`2.31x`, or why there is none: a censored figure, or no reference in this run."""
    if reference is None:
        return "n/a (no podfloor in this run)"
    if not (math.isfinite(measured) and math.isfinite(reference)) or reference <= 0:
        return "n/a (censored)"
    return f"{measured / reference:.2f}x"


def seconds(value: float, window: float | None = None) -> str:
    return f"{value:.2f}s" if math.isfinite(value) else f">{window or 0:g}s"


def table(rows: list[Row]) -> list[str]:
    """The rows as aligned text lines, with a header."""
    header = Row("figure", "measured", "reference", "ratio", "target")
    cells = [dataclasses.astuple(r) for r in (header, *rows)]
    widths = [max(len(str(c[i])) for c in cells) for i in range(5)]
    lines = ["  " + "  ".join(str(c).ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip() for cell in cells]
    lines.insert(1, "  " + "  ".join("-" * w for w in widths))
    return lines
