"""A worker's settings: every field with its unit and why its default.

`lease`, `heartbeat` and `backoff` are fallbacks: when the queue has a declaration (a TaskQueue,
published to the store by the operator), the declaration's values win, so every worker of a
queue leases alike. The rest (concurrency, batch, intervals, drain) are each worker's own.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from vigil.core.backoff import Backoff

DEFAULT_BACKOFF = Backoff(initial=timedelta(seconds=10), factor=2.0, max=timedelta(minutes=10))


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    #: Executions this process runs at once. Sync tasks each take a thread of a pool this size.
    concurrency: int = 10
    #: Executions leased per round trip, at most the free slots; 0 means `concurrency`.
    batch: int = 0
    #: How long a lease lasts without a heartbeat: the longest a crashed worker's execution waits.
    lease: timedelta = timedelta(seconds=30)
    #: How often held leases are extended: a third of the lease survives two missed heartbeats.
    heartbeat: timedelta = timedelta(seconds=10)
    #: The longest an idle worker waits before looking again when no NOTIFY arrives (the fallback).
    poll_interval: timedelta = timedelta(seconds=1)
    #: Results wait at most this long to be acknowledged together in one transaction.
    ack_interval: timedelta = timedelta(milliseconds=20)
    #: ... or until this many are waiting.
    ack_batch: int = 200
    #: How often this worker returns expired leases (any worker's) to the queue.
    expiry_interval: timedelta = timedelta(seconds=1)
    #: After SIGTERM, how long in-flight executions may finish before the worker exits anyway
    #: (what is left then is re-run by another worker once its lease expires).
    drain_timeout: timedelta = timedelta(seconds=30)
    #: The wait before a failed attempt is retried: the core's full-jitter backoff.
    backoff: Backoff = DEFAULT_BACKOFF
    #: How often the queue's declaration (its TaskQueue, published to the store) is read again:
    #: how long a changed TaskQueue takes to reach running workers.
    declaration_refresh: timedelta = timedelta(seconds=10)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.batch < 0:
            raise ValueError(f"batch must not be negative, got {self.batch}")
        if self.ack_batch < 1:
            raise ValueError(f"ack_batch must be at least 1, got {self.ack_batch}")
        for name in ("lease", "heartbeat", "poll_interval", "expiry_interval", "declaration_refresh"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.heartbeat >= self.lease:
            raise ValueError(f"heartbeat ({self.heartbeat}) must be shorter than lease ({self.lease})")
        if self.ack_interval < timedelta(0) or self.drain_timeout < timedelta(0):
            raise ValueError("ack_interval and drain_timeout must not be negative")

    @property
    def lease_batch(self) -> int:
        return self.batch or self.concurrency
