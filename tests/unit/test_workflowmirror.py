"""Which history entries the engine writes to the history database (vigil.core.workflowmirror).

Pure. Hypothesis over histories of random length, a random number of them folded into the
checkpoint (``base``) and a random number already in the database (``mirrored``, never fewer than
``base``): the rows are exactly the entries past what the database has, with contiguous seqs
ending at the last entry and each entry's data; writing in two steps gives the rows of one;
only entry 0 carries the pinned definition. Then named cases.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.workflowsim import T0, UID
from vigil.core.workflow import Event, Record
from vigil.core.workflowmirror import history_rows

META = {"namespace": "team-a", "name": "publish", "uid": UID}
PINNED = {"steps": [{"id": "a"}]}


def history(length: int) -> list[Record]:
    return [
        Record(Event.POD_SUCCEEDED, T0 + timedelta(seconds=seq), "a", seq, {"pod": f"p-{seq}"})
        for seq in range(length)
    ]


@st.composite
def statuses(draw: st.DrawFn) -> tuple[list[Record], int, int]:
    """(the whole history, base, mirrored) of a status: 0 <= base <= mirrored <= length."""
    length = draw(st.integers(0, 40))
    base = draw(st.integers(0, length))
    mirrored = draw(st.integers(base, length + 3))  # a count from a newer write may run ahead
    return history(length), base, mirrored


@given(statuses())
def test_the_rows_are_the_entries_past_what_the_database_has(status: tuple[list[Record], int, int]) -> None:
    whole, base, mirrored = status
    rows = history_rows(whole[base:], base=base, mirrored=mirrored, meta=META, pinned=PINNED)
    assert [row.seq for row in rows] == list(range(mirrored, len(whole)))
    assert [row.data for row in rows] == [whole[row.seq].to_data() for row in rows]
    assert all(row.event == str(whole[row.seq].event) and row.at == whole[row.seq].at for row in rows)
    assert all((row.namespace, row.workflow, row.workflow_uid) == ("team-a", "publish", UID) for row in rows)
    assert [row.seq for row in rows if row.definition is not None] == ([0] if mirrored == 0 and whole else [])


@given(statuses(), st.data())
def test_writing_in_two_steps_gives_the_rows_of_one(status: tuple[list[Record], int, int], data: st.DataObject) -> None:
    whole, base, mirrored = status
    middle = data.draw(st.integers(mirrored, max(mirrored, len(whole))))
    once = history_rows(whole[base:], base=base, mirrored=mirrored, meta=META, pinned=PINNED)
    first = history_rows(whole[base:middle], base=base, mirrored=mirrored, meta=META, pinned=PINNED)
    then = history_rows(whole[base:], base=base, mirrored=max(mirrored, middle), meta=META, pinned=PINNED)
    assert first + then == once


def test_entry_zero_carries_the_pinned_definition() -> None:
    rows = history_rows(history(2), base=0, mirrored=0, meta=META, pinned=PINNED)
    assert [row.definition for row in rows] == [PINNED, None]


def test_nothing_to_write_when_the_database_has_every_entry() -> None:
    assert history_rows(history(3)[1:], base=1, mirrored=3, meta=META, pinned=PINNED) == []
