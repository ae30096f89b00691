"""A namespace's queue quota from the chart and its TaskQueues, through a real operator.

The operator runs with the volume tier on (the session's real PostgreSQL) and the chart's
`queue.quota` in its config; its leader's TaskQueue pass writes each namespace's limits into the
store: a TaskQueue's `spec.quota` lowers its namespace's, the smallest of two TaskQueues wins, a
TaskQueue asking for more than the chart's gets the chart's, and a namespace without a TaskQueue
gets the chart's default. Submissions past the limit get `QuotaExceeded`; another namespace's go on.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.test_task_queues import create, postgres, queue_dsn
from tests.waiting import wait_for
from vigil.core.queue import QuotaExceeded
from vigil.queue.store import QueueStore, Submission

__all__ = ["postgres", "queue_dsn"]

CHART_MAX_READY = 4
CHART_MAX_BYTES = 100_000


@pytest.fixture
def quota_fleet(
    cluster: KubeCluster, tmp_path: Path, queue_dsn: str, request: pytest.FixtureRequest
) -> Iterator[OperatorFleet]:
    """A leader with the volume tier on, a TaskQueue pass a second, and the chart's quota small."""
    quota = {"maxReadyExecutions": CHART_MAX_READY, "maxPayloadBytes": CHART_MAX_BYTES}
    fleet = OperatorFleet(cluster, tmp_path, queue={"dsn": queue_dsn, "statusIntervalSeconds": 1, "quota": quota})
    fleet.start(http={"metricsPort": 0, "apiPort": 0})
    fleet.leader()
    yield fleet
    fleet.finish(request)


def limits(store: QueueStore, namespace: str) -> tuple[int | None, int | None] | None:
    found = store.quota_use(namespace)
    return None if found is None else (found[2], found[3])


def test_the_taskqueues_quota_lowers_the_charts_and_submissions_past_it_are_refused(
    cluster: KubeCluster, namespace: str, quota_fleet: OperatorFleet, queue_dsn: str
) -> None:
    store = QueueStore(queue_dsn)
    now = datetime.now(UTC)
    create(cluster, namespace, "small", {"quota": {"maxReadyExecutions": 2}})
    create(cluster, namespace, "smaller", {"quota": {"maxReadyExecutions": 3, "maxPayloadBytes": 10**9}})
    wait_for(lambda: limits(store, namespace) == (2, CHART_MAX_BYTES), timeout=30, what="the TaskQueues' quota in the store")
    store.submit(f"{namespace}/small", [Submission("t")], now=now)
    store.submit(f"{namespace}/smaller", [Submission("t")], now=now)
    with pytest.raises(QuotaExceeded) as refused:
        store.submit(f"{namespace}/small", [Submission("t")], now=now)
    assert (refused.value.namespace, refused.value.limit, refused.value.used) == (namespace, 2, 2)

    other = f"{namespace}-canary"  # no TaskQueue: the chart's default, counted on its own
    store.submit(f"{other}/q", [Submission("t") for _ in range(CHART_MAX_READY)], now=now)
    assert limits(store, other) == (CHART_MAX_READY, CHART_MAX_BYTES)
    with pytest.raises(QuotaExceeded):
        store.submit(f"{other}/q", [Submission("t")], now=now)
