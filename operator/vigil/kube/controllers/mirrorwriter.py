"""Workflow history written to the database in the background, many workflows per transaction.

A pass that records entries offers their rows here and goes on; one thread writes everything
offered since its last write in one call (:meth:`WorkflowHistorySink.write_workflow_events`:
a transaction per few hundred rows) and then says, per offer, whether it is in. The engine counts
an entry as mirrored only once it is in, so ``historyMirrored`` never claims a row the database
lacks, and a write that fails leaves its entries to be offered again by a later pass.

Why a thread: a pass should never wait for the database. Before, every pass opened one or two
transactions of its own, so the workers all waited for the first use's migration (a child
process), for a slow or unreachable PostgreSQL, and for each other on SQLite's single writer
lock; resuming a thousand workflows after a failover wrote two thousand transactions, and here a
handful. (The resume figure itself moved little: the API server's status writes bound it.)
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import NamedTuple

from vigil.core.history import WorkflowEventRecord
from vigil.core.ports import HistoryUnavailable, WorkflowHistorySink
from vigil.kube.kits.loops import Drain

log = logging.getLogger(__name__)

Key = tuple[str, str]

#: Rows in one write at most (the sink splits it into transactions of its own batch size).
MAX_ROWS = 5000


@dataclasses.dataclass(frozen=True)
class Offer:
    """The rows of one workflow's entries ``start`` to ``end`` (seq, from the first); ``finished``:
    the workflow has ended, so no pass comes by itself to count them."""

    key: Key
    uid: str
    start: int
    end: int
    rows: list[WorkflowEventRecord]
    finished: bool = False


class MirrorWriter:
    """Writes what passes offer, in the order offered; ``done(offer, written)`` after each write."""

    def __init__(self, sink: WorkflowHistorySink, *, done: Callable[[Offer, bool], None]) -> None:
        self._sink = sink
        self._done = done
        #: What passes offered, written a batch of up to MAX_ROWS rows at a time (at least one offer).
        self._offers: Drain[Offer] = Drain("workflow history write", self.write, size=_rows, most=MAX_ROWS)
        self._failing = False

    def offer(self, offer: Offer) -> None:
        self._offers.put(offer)

    def run(self, stop: threading.Event) -> None:
        """Write until ``stop``; what is still offered then is left to the next leader's passes
        (the statuses hold every entry not counted as mirrored)."""
        self._offers.run(stop)

    def write(self, offers: list[Offer]) -> None:
        """One write of these offers' rows; each offer's ``done`` after it."""
        written = True
        try:
            self._sink.write_workflow_events([row for offer in offers for row in offer.rows])
        except HistoryUnavailable as err:
            written = False
            if not self._failing:
                log.warning("history database unavailable; workflow entries wait in their statuses: %s", err)
        except Exception:
            written = False
            log.exception("writing workflow history failed; its entries are offered again by later passes")
        if written and self._failing:
            log.info("history database reachable again; writing workflow entries")
        self._failing = not written
        for offer in offers:
            self._done(offer, written)


def _rows(offer: Offer) -> int:
    return len(offer.rows)


class Held(NamedTuple):
    """Of one workflow: how many entries from the first this process has in the database, and
    how many it has written or offered."""

    uid: str
    written: int
    offered: int


class MirrorBook:
    """What this process has written or offered of each workflow's entries that its status may
    not count yet. Without it a status's historyMirrored, a pass behind at least, would have
    every pass write the previous pass's entries again; with it, an entry is offered once and
    counted once it is in. Keyed by (namespace, name) and checked against the uid, so a
    workflow deleted and made again under its name starts from nothing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Key, Held] = {}

    def counted(self, key: Key, uid: str, mirrored: int, end: int) -> int:
        """Of the entries up to ``end``, how many from the first are in the database: the status
        says ``mirrored``, and this process may have written more."""
        with self._lock:
            return max(mirrored, min(self._get(key, uid).written, end))

    def claim(self, key: Key, uid: str, mirrored: int, end: int) -> int:
        """Where to offer the entries up to ``end`` from (``end``: nothing to offer); those are
        noted as offered. ``mirrored``: how many are in (from :meth:`counted`)."""
        with self._lock:
            held = self._get(key, uid)
            start = max(mirrored, min(held.offered, end))
            if start < end:
                self._held[key] = Held(uid, max(held.written, mirrored), end)
            return start

    def wrote(self, key: Key, uid: str, end: int) -> None:
        """The entries up to ``end`` were written (by the pass itself)."""
        with self._lock:
            self._held[key] = Held(uid, end, end)

    def done(self, offer: Offer, written: bool) -> None:
        """The writer wrote ``offer``, or failed to: then it and what follows is offered again
        (what is in flight of those too: written twice, a row stays one). An offer written after
        one that failed counts for nothing (entries count from the first) until that is in."""
        with self._lock:
            held = self._held.get(offer.key)
            if held is None or held.uid != offer.uid:
                return  # forgotten meanwhile
            if written and offer.start <= held.written:
                self._held[offer.key] = held._replace(written=max(held.written, offer.end))
            elif not written:
                self._held[offer.key] = held._replace(offered=min(held.offered, max(held.written, offer.start)))

    def settle(self, key: Key, uid: str, counted: int) -> None:
        """The workflow's status counts ``counted`` entries and no pass of it is due: forgotten,
        unless some it does not count are in flight or written (a later pass counts them)."""
        with self._lock:
            held = self._held.get(key)
            if held is None or held.uid != uid or counted >= held.offered:
                self._held.pop(key, None)

    def forget(self, key: Key) -> None:
        with self._lock:
            self._held.pop(key, None)

    def __len__(self) -> int:
        return len(self._held)

    def _get(self, key: Key, uid: str) -> Held:
        held = self._held.get(key)
        return held if held is not None and held.uid == uid else Held(uid, 0, 0)
