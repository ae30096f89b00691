"""The workflow engine's side of the history database: mirroring what passes record, reading
back the outputs that left the status.

Entries are mirrored as they are recorded (the rows: :func:`vigil.core.workflowmirror.history_rows`,
the first of which carries the pinned definition, so the history can be read without the
Workflow once it is deleted). ``historyMirrored`` in status counts them from the first once they
are in. The leader's engine offers the rows to a background writer that puts many workflows'
entries in one transaction (:mod:`vigil.kube.controllers.mirrorwriter`; the runtime starts its thread); a
pass run by a tool or a test writes its own. A pass never waits for the database: while it is
down, entries stay in the status (up to the hard cap of :mod:`vigil.core.workflowpass`) and a
later pass offers them again (rewriting is idempotent).

Past a budget the oldest mirrored entries leave the status for its checkpoint, and large step
outputs leave with them; :meth:`WorkflowHistory.output` reads one back for a dependent's pod,
checked against the digest kept (:func:`vigil.core.checkpoint.read_back_output`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vigil.core.checkpoint import OutputUnavailable, offloaded_seq, output_source, read_back_output
from vigil.core.ports import HistoryUnavailable, WorkflowHistorySink
from vigil.core.workflow import Record, WorkflowState
from vigil.core.workflowmirror import history_rows
from vigil.kube.controllers.mirrorwriter import Key, MirrorBook, MirrorWriter, Offer

#: Entries kept in a cache of outputs read back from the database.
OUTPUT_CACHE_ENTRIES = 256


class WorkflowHistory:
    """Mirrors the entries passes record, and reads back outputs that left the status.

    ``background``: offer the rows to a background writer (:meth:`run`, started by the runtime)
    rather than write them in the pass. ``finished(key)``: a finished workflow's entries are all
    in; no pass comes by itself to count them, so the engine queues one (and its
    ttlAfterFinished may then delete it).
    """

    def __init__(
        self, sink: WorkflowHistorySink | None, *, background: bool, finished: Callable[[Key], None]
    ) -> None:
        self.sink = sink
        self._finished = finished
        #: Of each workflow: the entries this process wrote or offered that its status may not
        #: count yet (its historyMirrored lags at least a pass behind).
        self._book = MirrorBook()
        self._writer = MirrorWriter(sink, done=self._written) if sink is not None and background else None
        self._lock = threading.Lock()
        #: Outputs read back from the database, by (workflow uid, seq), oldest first.
        self._outputs: dict[tuple[str, int], Any] = {}

    def run(self, stop: threading.Event) -> None:
        """The background writer, until ``stop`` (nothing to run when passes write their own)."""
        if self._writer is not None:
            self._writer.run(stop)

    def mirror(
        self,
        obj: Mapping[str, Any],
        pinned: Mapping[str, Any],
        base: int,
        entries: Sequence[Record],
        mirrored: int,
        *,
        finished: bool = False,
    ) -> int:
        """Send the recorded-but-unmirrored entries to the database; how many from the first are
        in it now.

        ``entries`` are the history from seq ``base`` on; ``mirrored`` entries from the first
        are in the database already, and so are those this process wrote. Offered rows are
        counted by a later pass once written; rows written here count at once. ``finished``: the
        workflow has ended, so no pass comes by itself: once the background writer has its
        entries in, ``finished`` is told; what a direct write wrote is not remembered (a later
        pass over it writes those rows again, idempotently, and brings the count up).
        """
        end = base + len(entries)
        if self.sink is None:
            return mirrored
        meta = obj["metadata"]
        key, uid = (meta["namespace"], meta["name"]), str(meta["uid"])
        mirrored = self._book.counted(key, uid, mirrored, end)
        if mirrored >= end:
            return mirrored
        if self._writer is not None:
            start = self._book.claim(key, uid, mirrored, end)
            if start < end:
                rows = history_rows(entries, base=base, mirrored=start, meta=meta, pinned=pinned)
                self._writer.offer(Offer(key, uid, start, end, rows, finished=finished))
            return mirrored
        rows = history_rows(entries, base=base, mirrored=mirrored, meta=meta, pinned=pinned)
        try:
            self.sink.write_workflow_events(rows)
        except HistoryUnavailable:
            return mirrored  # kept in status; written on a later pass
        if finished:
            self._book.forget(key)
        else:
            self._book.wrote(key, uid, end)
        return end

    def settle(self, key: Key, uid: str, counted: int) -> None:
        """The workflow's status counts ``counted`` entries and no pass of it is due."""
        self._book.settle(key, uid, counted)

    def forget(self, key: Key) -> None:
        """The workflow was deleted."""
        self._book.forget(key)

    def output(self, obj: Mapping[str, Any], state: WorkflowState, step_id: str) -> Any:
        """A step's output: from the state, or, when it left the status, from the database entry
        it came in (checked against the digest kept)."""
        step = state.steps[step_id]
        seq = offloaded_seq(step)
        if seq is None:
            return step.output
        key = (str(obj["metadata"]["uid"]), seq)
        with self._lock:
            if key in self._outputs:
                return self._outputs[key]
        if self.sink is None:
            raise OutputUnavailable(f"{output_source(step_id, step)}: no history database")
        entry = self.sink.workflow_event(*key)
        output = read_back_output(step_id, step, None if entry is None else entry.data or {})
        with self._lock:
            self._outputs[key] = output
            while len(self._outputs) > OUTPUT_CACHE_ENTRIES:
                self._outputs.pop(next(iter(self._outputs)))
        return output

    def _written(self, offer: Offer, written: bool) -> None:
        """The background writer's answer."""
        self._book.done(offer, written)
        if written and offer.finished:
            self._finished(offer.key)
