"""What the workflow engine counts as mirrored while a background writer writes (vigil.kube.controllers.mirrorwriter.MirrorBook).

Pure bookkeeping, no database. Hypothesis drives one workflow through random passes (each records
a few entries and offers what is not yet offered), writes that succeed or fail in the order
offered, statuses that count what the book says, and settles: the book never counts an entry the
database lacks (entries count from the first, so a write after a failed one counts for nothing),
never offers an entry twice while it is in flight, and once writes succeed again every entry gets
counted. Then named cases: a workflow made again under its name, and forgetting.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vigil.kube.controllers.mirrorwriter import MirrorBook, Offer

KEY = ("team-a", "publish")
UID = "uid-1"

steps = st.lists(
    st.one_of(
        st.tuples(st.just("pass"), st.integers(0, 3)),  # a pass recording this many entries
        st.tuples(st.just("write"), st.booleans()),  # the writer writes the oldest offer, or fails to
        st.just(("settle", 0)),  # a pass that wrote a status counting what the book counts
    ),
    max_size=40,
)


def offer(book: MirrorBook, status: int, end: int) -> tuple[int, Offer | None]:
    """One pass: what it counts, and what it offers (None: nothing new)."""
    counted = book.counted(KEY, UID, status, end)
    if counted >= end:
        return counted, None
    start = book.claim(KEY, UID, counted, end)
    return counted, (Offer(KEY, UID, start, end, []) if start < end else None)


@given(steps)
def test_the_book_counts_only_what_is_in_from_the_first(script: list[tuple[str, int]]) -> None:
    book = MirrorBook()
    in_flight: list[tuple[Offer, bool]] = []  # (offer, offered after the last failed write)
    database: set[int] = set()  # the seqs written
    status = end = 0  # what the status counts; how many entries are recorded
    for action, arg in script:
        if action == "pass":
            end += arg
            status, new = offer(book, status, end)
            if new is not None:
                fresh = [old for old, since in in_flight if since]
                assert all(new.start >= old.end or new.end <= old.start for old in fresh), "offered twice"
                in_flight.append((new, True))
        elif action == "write" and in_flight:
            written, _ = in_flight.pop(0)
            if arg:
                database.update(range(written.start, written.end))
            else:
                in_flight = [(old, False) for old, _ in in_flight]
            book.done(written, bool(arg))
        elif action == "settle":
            status = book.counted(KEY, UID, status, end)
            book.settle(KEY, UID, status)
        assert set(range(book.counted(KEY, UID, status, end))) <= database, "counted an entry the database lacks"
    for written, _ in in_flight:  # what is in flight, then the passes that offer again, all written
        database.update(range(written.start, written.end))
        book.done(written, True)
    for _ in range(3):
        status, new = offer(book, status, end)
        if new is not None:
            database.update(range(new.start, new.end))
            book.done(new, True)
    assert book.counted(KEY, UID, status, end) == end


def test_a_workflow_made_again_under_its_name_starts_from_nothing() -> None:
    book = MirrorBook()
    book.wrote(KEY, UID, 5)
    assert book.counted(KEY, UID, 0, 5) == 5
    assert book.counted(KEY, "uid-2", 0, 3) == 0
    assert book.claim(KEY, "uid-2", 0, 3) == 0


def test_a_settled_workflow_is_forgotten_and_one_with_entries_in_flight_is_not() -> None:
    book = MirrorBook()
    assert book.claim(KEY, UID, 0, 4) == 0
    book.settle(KEY, UID, 0)  # four in flight, none counted: kept
    assert len(book) == 1 and book.claim(KEY, UID, 0, 4) == 4
    book.done(Offer(KEY, UID, 0, 4, []), True)
    book.settle(KEY, UID, 4)
    assert len(book) == 0


def test_an_offer_done_after_its_workflow_was_forgotten_is_dropped() -> None:
    book = MirrorBook()
    book.claim(KEY, UID, 0, 2)
    book.forget(KEY)
    book.done(Offer(KEY, UID, 0, 2, []), True)
    assert len(book) == 0
