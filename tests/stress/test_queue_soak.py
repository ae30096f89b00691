"""The queue store's soak, long: a steady rate over many retention periods keeps it flat.

The short soak of tests/queue/test_bounded.py (eight periods of 1,200 executions) at a larger
size: VIGIL_STRESS_QUEUE_PERIODS (24) retention periods of an hour (the clock injected), each in
12 steps of VIGIL_STRESS_QUEUE_PER_STEP (2,000) executions settled or cancelled a step later,
the upkeep (retention and quota recount) run each step. The rows of executions, once_marks and
jobs, and the tables' bytes, must stay within 10 % and 15 % of the second period's over the rest:
what is finished leaves as fast as it comes.
"""

from __future__ import annotations

import os

import pytest

from tests.queue.conftest import dsn, postgres, store
from tests.queue.test_bounded import soak
from tests.stress.figures import Figures
from vigil.queue.store import QueueStore

__all__ = ["dsn", "postgres", "store"]

pytestmark = [pytest.mark.stress, pytest.mark.postgres]

PERIODS = int(os.environ.get("VIGIL_STRESS_QUEUE_PERIODS", "24"))
PER_STEP = int(os.environ.get("VIGIL_STRESS_QUEUE_PER_STEP", "2000"))


def test_the_queue_store_stays_flat_over_many_retention_periods(
    store: QueueStore, dsn: str, figures: Figures
) -> None:
    counts, sizes = soak(store, dsn, periods=PERIODS, steps_per_period=12, per_step=PER_STEP)
    figures.add("executions through the store", f"{PERIODS * 12 * PER_STEP:,}")
    figures.add("rows kept, per period", ", ".join(f"{c:,}" for c in counts))
    figures.add("bytes kept, per period (MiB)", ", ".join(f"{s / 2**20:.1f}" for s in sizes))
    steady = counts[1:]
    assert max(steady) <= min(steady) * 1.1, counts
    assert max(sizes[2:]) <= sizes[1] * 1.15, sizes
