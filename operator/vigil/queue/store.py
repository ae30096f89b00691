"""The queue store's adapter: PostgreSQL through psycopg 3, one named query per operation.

The store is split by who uses it, one module each; this module composes them and is what
callers import:

- `submitstore.SubmitStore`: submit and read back (a program that enqueues work, the operator's
  task submitter, a test or the benchmark) and the HTTP API's operations (vigil.api.queue):
  one-off and recurring jobs, timelines, cancel and retry, listings, in typed rows of
  vigil.core.queue, a database that cannot be reached raised as QueueUnavailable. The
  operator's API runs them through vigil.queue.apistore.ApiQueueStore, which sends the same
  blocks as functions, acting as the namespace's API role instead of the owner (`_acting`).
- `declarestore.DeclarationStore`: the TaskQueue controller's declarations and queue counts (with
  the watchdog's last summary of each queue).
- `upkeepstore.UpkeepStore`: the operator's upkeep: partitions, retention, quotas.
- `workerstore.WorkerStore` (asynchronous, on the worker's own connection): lease, heartbeat,
  settle, expire, once.
- `storebase.StoreBase`: the DSN, connections and migrations the synchronous parts share.

The trigger (vigil.queue.trigger, vigil.queue.catalogue) and the watchdog (vigil.queue.watchdog)
open their own connections and need no part of `QueueStore`.

`QueueStore` is all the synchronous parts at once, as the operator, the CLI and the tests use it.

Every time is a parameter: the caller's injected clock. Workers on hosts whose
clocks disagree see leases expire by their own clock; keep them synchronised
(NTP) and the lease several heartbeats long.
"""

from __future__ import annotations

from vigil.core.queue import Submission
from vigil.queue.declarestore import DeclarationStore, declaration_from_row
from vigil.queue.queries import QUERIES
from vigil.queue.submitstore import SubmitStore
from vigil.queue.upkeepstore import PURGE_BATCH, UpkeepStore
from vigil.queue.workerstore import (
    EXPIRY_BATCH,
    NOTIFY_CHANNEL,
    Finished,
    Leased,
    SettleReport,
    WorkerStore,
)

__all__ = [
    "EXPIRY_BATCH",
    "NOTIFY_CHANNEL",
    "PURGE_BATCH",
    "QUERIES",
    "DeclarationStore",
    "Finished",
    "Leased",
    "QueueStore",
    "SettleReport",
    "Submission",
    "SubmitStore",
    "UpkeepStore",
    "WorkerStore",
    "declaration_from_row",
]


class QueueStore(SubmitStore, DeclarationStore, UpkeepStore):
    """Migrate, submit and inspect, the HTTP API's operations, declarations and upkeep: every
    synchronous part of the store (see the module docstring). `dsn`: libpq string or URL."""
