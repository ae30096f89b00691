"""The figures a stress test measured, kept for the end of the run.

Each test fills one `Figures` block as it goes, so a test that fails half-way still reports
what it saw up to then. tests/stress/conftest.py prints every block in the terminal summary
and writes them to `.cluster/stress-report.txt`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence


@dataclasses.dataclass
class Figures:
    title: str
    rows: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    outcome: str = "running"
    seconds: float = 0.0

    def add(self, label: str, value: str) -> None:
        self.rows.append((label, value))

    def render(self) -> str:
        width = max((len(label) for label, _ in self.rows), default=0)
        lines = [f"{self.title}  [{self.outcome}, {self.seconds:.0f} s]"]
        lines += [f"  {label:<{width}}  {value}" for label, value in self.rows]
        return "\n".join(lines)


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) by nearest rank; NaN without values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def spread(values: Sequence[float], unit: str = "s") -> str:
    """`p50 … p99 … max …` of some durations, or `none` when nothing was measured."""
    if not values:
        return "none measured"
    return (
        f"p50 {percentile(values, 0.5):.2f} {unit}, p99 {percentile(values, 0.99):.2f} {unit}, "
        f"max {max(values):.2f} {unit} (n={len(values)})"
    )
