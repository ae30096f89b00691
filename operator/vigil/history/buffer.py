"""Holding history records through a database outage: the in-process buffer in front of a HistorySink.

The history database is off the firing path (DESIGN invariant 7): when it is
down, firing goes on and the records wait. `BufferedHistory.record()` never
raises. It writes through while the database answers; once a write reports
`HistoryUnavailable` it only buffers — so callers never wait on a dead
database's connect timeout — until a `flush()` (the owner calls it
periodically) gets through again.

The buffer holds one record per (execution id, attempt), in arrival order; a
record that supersedes the buffered one for its key replaces it (and moves to
the back), one that does not is ignored (vigil.history.precedence), so the
record finally written is the one the database would have kept anyway. The sink
upserts idempotently, so a batch written twice — a flush that lost its answer —
is still one row per key.

This is the in-process part only: the durable buffer across operator restarts
is the CR status, fed from `pending()`. What the buffer cannot keep is counted,
never silent: `dropped` (the oldest records, past `capacity`) and `rejected`
(records the database refused for a reason other than being unreachable — a
bug or bad data — written one at a time so they cannot block the rest).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from vigil.core.history import AttemptRecord
from vigil.core.ports import HistorySink, HistoryUnavailable
from vigil.history.precedence import AttemptKey, key_of, supersedes

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 100_000  # records held through an outage; at ~1 KB each, about 100 MB at most
DEFAULT_BATCH_SIZE = (
    500  # records per write: one transaction, a few milliseconds on either database
)


class BufferedHistory:
    """A HistorySink wrapper whose `record()` never raises (see the module docstring)."""

    def __init__(
        self,
        sink: HistorySink,
        *,
        capacity: int = DEFAULT_CAPACITY,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        if capacity < 1 or batch_size < 1:
            raise ValueError("capacity and batch_size must be positive")
        self._sink = sink
        self._capacity = capacity
        self._batch_size = batch_size
        self._buffer: dict[AttemptKey, AttemptRecord] = {}
        self._lock = threading.Lock()  # guards the buffer and the counters
        self._flushing = (
            threading.Lock()
        )  # one flush at a time, so a batch is never written twice at once
        self._unavailable = False  # the last write found the database unreachable
        self.dropped = 0
        self.rejected = 0

    @property
    def depth(self) -> int:
        """Records waiting to be written."""
        with self._lock:
            return len(self._buffer)

    @property
    def unavailable(self) -> bool:
        """True from a write that found the database unreachable until one that succeeds."""
        return self._unavailable

    def pending(self) -> list[AttemptRecord]:
        """The records not yet written, oldest first (for the durable copy in CR status)."""
        with self._lock:
            return list(self._buffer.values())

    def record(self, records: Iterable[AttemptRecord]) -> None:
        """Buffer the records and, unless the database is known to be down, write them now."""
        with self._lock:
            for record in records:
                self._add(record)
            self._drop_overflow()
        if not self._unavailable:
            self.flush()

    def flush(self) -> int:
        """Write what is buffered, batch by batch; stop at the first outage. Returns records written."""
        with self._flushing:
            written = 0
            for batch in self._batches():
                count, reachable = self._write_batch(batch)
                written += count
                if not reachable:
                    break
            return written

    def _add(self, record: AttemptRecord) -> None:
        key = key_of(record)
        current = self._buffer.get(key)
        if current is not None and not supersedes(record, current):
            return
        self._buffer.pop(key, None)
        self._buffer[key] = record

    def _drop_overflow(self) -> None:
        excess = len(self._buffer) - self._capacity
        if excess <= 0:
            return
        for key in list(self._buffer)[:excess]:
            del self._buffer[key]
        self.dropped += excess
        log.warning(
            "history buffer full (%d): dropped the %d oldest records", self._capacity, excess
        )

    def _batches(self) -> list[list[AttemptRecord]]:
        with self._lock:
            records = list(self._buffer.values())
        size = self._batch_size
        return [records[start : start + size] for start in range(0, len(records), size)]

    def _forget(self, written: Iterable[AttemptRecord]) -> None:
        """Remove written records — unless a newer one for the key arrived meanwhile."""
        with self._lock:
            for record in written:
                key = key_of(record)
                if self._buffer.get(key) is record:
                    del self._buffer[key]

    def _note_outage(self, error: HistoryUnavailable) -> None:
        if not self._unavailable:
            log.warning(
                "history database unavailable, buffering (%d records): %s", self.depth, error
            )
        self._unavailable = True

    def _write_batch(self, batch: list[AttemptRecord]) -> tuple[int, bool]:
        """Write one batch; (records written, whether the database was reachable)."""
        try:
            self._sink.write(batch)
        except HistoryUnavailable as error:
            self._note_outage(error)
            return 0, False
        except Exception:  # not an outage: find the record(s) at fault instead of retrying forever
            log.exception("history batch refused; writing its %d records one by one", len(batch))
            return self._write_singly(batch)
        self._forget(batch)
        self._unavailable = False
        return len(batch), True

    def _write_singly(self, batch: list[AttemptRecord]) -> tuple[int, bool]:
        """Write one record at a time, rejecting those refused; (written, database reachable)."""
        written = 0
        for record in batch:
            try:
                self._sink.write([record])
            except HistoryUnavailable as error:
                self._note_outage(error)
                return written, False
            except Exception:
                log.exception("history record refused, dropped: %s", key_of(record))
                with self._lock:
                    self.rejected += 1
                self._forget([record])
                continue
            self._forget([record])
            written += 1
        self._unavailable = False
        return written, True
