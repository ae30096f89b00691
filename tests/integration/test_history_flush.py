"""The history flusher writes a new leader's backlog a batch at a time, and loses nothing.

A new leader's Execution cache announces every retained Execution, so its first flush has all of
them pending (10,000 in the memory benchmark). The flusher reads a batch from the cache, writes
it and lets it go before it reads the next: here 450 Executions on the real API server, read
through the real watch-fed cache and written to a real SQLite history database, are all written,
no write carries more than one batch, and no more than one batch was read before the first write.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import create_job
from vigil.core.history import AttemptRecord
from vigil.core.ids import execution_id
from vigil.history.store import SqlHistory
from vigil.kube.controllers.historyflush import BATCH, HistoryFlusher
from vigil.kube.stores.executions import ExecutionStore, execution_body, execution_cache

pytestmark = pytest.mark.integration

EXECUTIONS = 2 * BATCH + 50
FIRST = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)


class ReadCounting(ExecutionStore):
    """The real store; counts what the flusher reads from its cache."""

    reads = 0

    def cached(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return super().cached(namespace, name)


class WriteRecording(SqlHistory):
    """The real SQLite history; notes, at each write, how many executions it carries and how many
    the flusher had read by then."""

    def __init__(self, dsn: str, store: ReadCounting) -> None:
        super().__init__(dsn)
        self.store = store
        self.writes: list[tuple[int, int]] = []

    def write(self, records: list[AttemptRecord]) -> None:
        self.writes.append((len({r.execution_id for r in records}), self.store.reads))
        super().write(records)


def test_a_backlog_is_written_a_batch_at_a_time_and_every_execution_is_written(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    job = create_job(cluster, namespace, "backlog", cron="0 2 * * *")
    creator = ExecutionStore(cluster.api)
    nominals = [FIRST + timedelta(days=i) for i in range(EXECUTIONS)]

    def create(nominal: datetime) -> bool:
        body = execution_body(
            job=job, execution_id=execution_id(job["metadata"]["uid"], nominal), scheduled_for=nominal,
            period_start=nominal - timedelta(days=1), period_end=nominal, source="Backfill",
        )  # fmt: skip
        return creator.create(body)

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(create, nominals))

    cache = execution_cache(cluster.api)  # every Vigil Execution in the cluster, other tests' too
    store = ReadCounting(cluster.api, cache=cache)
    history = WriteRecording(f"sqlite:///{tmp_path}/history.db", store)
    history.migrate()
    told: list[tuple[str, str, str]] = []
    flusher = HistoryFlusher(store=store, sink=history, on_written=lambda *job: told.append(job))
    cache.add_handler(flusher.changed)  # as the leader wires it: every announced one is pending
    stop = threading.Event()
    threading.Thread(target=cache.run, args=(stop,), daemon=True).start()
    try:
        assert cache.synced.wait(60), "the Execution cache never listed"
        written = flusher.flush()
    finally:
        stop.set()

    ours = [(n, reads) for n, reads in history.writes if n]
    assert written >= EXECUTIONS
    assert max(n for n, _ in ours) <= BATCH, ours
    assert ours[0][1] <= BATCH, f"{ours[0][1]} executions read before the first write"
    recorded = history.job_executions(namespace, "backlog", limit=EXECUTIONS + 10).executions
    assert len(recorded) == EXECUTIONS
    assert (namespace, "backlog", job["metadata"]["uid"]) in told
    assert flusher.pending == 0
    history.close()
