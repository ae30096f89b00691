"""The engine's background writer of workflow history (vigil.kube.controllers.mirrorwriter.MirrorWriter), on SQLite and a real PostgreSQL.

What passes offer while the writer is busy goes in with the next write, many workflows' entries in
one call to the database (the reason it exists: a pass no longer opens a transaction of its own);
each offer is told it is in, and the rows are there. An unreachable database fails the write
without raising: each offer is told it is not in, so the engine offers its entries again. The
thread writes what is offered until it is stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.contract.test_workflow_history import entry, row_count
from tests.waiting import wait_for
from vigil.core.history import WorkflowEventRecord
from vigil.history.store import SqlHistory
from vigil.kube.controllers.mirrorwriter import MirrorWriter, Offer


class Counting:
    """The real store, counting the writes made through it."""

    def __init__(self, store: SqlHistory) -> None:
        self.store, self.calls = store, 0

    def write_workflow_events(self, records: list[WorkflowEventRecord]) -> None:
        self.calls += 1
        self.store.write_workflow_events(records)

    def workflow_event(self, workflow_uid: str, seq: int) -> WorkflowEventRecord | None:
        return self.store.workflow_event(workflow_uid, seq)


def offers(workflows: int, entries: int) -> list[Offer]:
    """Each workflow's first `entries` entries, one offer each."""
    made = []
    for n in range(workflows):
        uid = f"uid-{n}"
        rows = [entry(seq, uid=uid, workflow=f"wf-{n}") for seq in range(entries)]
        made.append(Offer(("team-a", f"wf-{n}"), uid, 0, entries, rows))
    return made


def recorder() -> tuple[list[tuple[Offer, bool]], Callable[[Offer, bool], None]]:
    told: list[tuple[Offer, bool]] = []
    return told, lambda offer, written: told.append((offer, written))


def test_offers_waiting_together_go_in_with_one_write_and_each_is_told(history: SqlHistory) -> None:
    told, done = recorder()
    sink = Counting(history)
    writer = MirrorWriter(sink, done=done)
    waiting = offers(40, 3)
    for offer in waiting:
        writer.offer(offer)
    stop = threading.Event()
    thread = threading.Thread(target=writer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(told) == len(waiting) or None, timeout=30, what="every offer told")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert told == [(offer, True) for offer in waiting]
    assert sink.calls == 1  # forty workflows, one write
    assert row_count(history) == 120
    assert not thread.is_alive()


def test_an_unreachable_database_tells_each_offer_it_is_not_in(unreachable: SqlHistory) -> None:
    told, done = recorder()
    writer = MirrorWriter(unreachable, done=done)
    waiting = offers(2, 2)
    writer.write(waiting)  # raises nothing
    assert told == [(offer, False) for offer in waiting]


def test_a_write_that_fails_for_another_reason_is_told_too(history: SqlHistory) -> None:
    told, done = recorder()
    writer = MirrorWriter(history, done=done)
    bad = entry(-1, uid="uid-bad")  # refused by the store (a ValueError): no negative positions
    writer.write([Offer(("team-a", "bad"), "uid-bad", 0, 1, [bad])])
    assert [written for _, written in told] == [False]
