"""The trigger's fired markers, written behind its passes: one write per bucket at a time.

A mark rewrites its bucket, a large object (a busy minute's bucket holds hundreds of entries),
and took a quarter of a second or more under load. So a pass hands its markers over and goes
on. The markers given for a bucket while its write is in flight wait, and go together in its
next write: a bucket is written at most once at a time, and as often as the writes allow, not
once a pass. Until a write is in, the markers it carries count as written (`in_flight`): a pass
repeats none of them. A write that fails drops its markers (counted in `failures`): their
entries come due again, and the next pass repeats them, harmlessly.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from vigil.core.buckets import Bucket, Mark

log = logging.getLogger(__name__)

#: Writes the markers onto the bucket (read again on a conflict), giving the bucket as written.
Write = Callable[[Bucket, dict[str, Mark]], Bucket]

#: Buckets written at once. Their own threads: a bucket's writer holds one while its write is in
#: flight, and on the passes' pool the writers could hold every thread a pass needs.
WRITERS = 8


@dataclasses.dataclass
class _Pending:
    """One bucket's markers: those being written, those waiting for the next write."""

    base: Bucket  # the bucket as last known (read, or as the last write left it)
    writing: dict[str, Mark] = dataclasses.field(default_factory=dict)
    waiting: dict[str, Mark] = dataclasses.field(default_factory=dict)
    idle: threading.Event = dataclasses.field(default_factory=threading.Event)


class Marker:
    def __init__(self, write: Write, *, writers: int = WRITERS) -> None:
        self._write = write
        self._pool = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="marker")
        self._lock = threading.Lock()
        self._buckets: dict[str, _Pending] = {}
        self._failures = 0

    def add(self, bucket: Bucket, marks: dict[str, Mark]) -> None:
        """Write `marks` onto the bucket: now, or with its next write when one is in flight."""
        with self._lock:
            pending = self._buckets.get(bucket.name)
            if pending is None:
                pending = self._buckets[bucket.name] = _Pending(base=bucket)
                self._pool.submit(self._run, bucket.name)
            pending.waiting.update(marks)

    def in_flight(self) -> dict[str, dict[str, Mark]]:
        """Each bucket's markers not yet written. Taken before the buckets are read: a write
        that lands in between is in what is read (a store's answer goes to what it reads)."""
        with self._lock:
            return {name: {**p.writing, **p.waiting} for name, p in self._buckets.items()}

    def wait(self, names: Iterable[str]) -> bool:
        """Wait until the buckets have nothing in flight; True if any had."""
        with self._lock:
            busy = [self._buckets[name] for name in names if name in self._buckets]
        for pending in busy:
            pending.idle.wait()
        return bool(busy)

    def drain(self) -> None:
        with self._lock:
            names = list(self._buckets)
        self.wait(names)

    def failures(self) -> int:
        """Writes that failed since the last call."""
        with self._lock:
            failures, self._failures = self._failures, 0
        return failures

    def _run(self, name: str) -> None:
        """The bucket's writer: what waits goes out in one write, until nothing waits."""
        while True:
            with self._lock:
                pending = self._buckets[name]
                if not pending.waiting:
                    del self._buckets[name]
                    pending.idle.set()
                    return
                pending.writing, pending.waiting = pending.waiting, {}
                batch, base = pending.writing, pending.base
            written: Bucket | None = None
            try:
                written = self._write(base, batch)
            except Exception:
                log.exception("trigger: %d markers of bucket %s not written; their entries come due again", len(batch), name)
            with self._lock:
                pending.writing = {}
                if written is not None:
                    pending.base = written
                else:
                    self._failures += 1
