"""The history database's log tails (`attempt_logs`), run against SQLite and a real PostgreSQL.

A stored tail round-trips with every field and aware UTC times; it is read back by the
execution's namespace and attempt (or its latest attempt); writing it again keeps the
first, except that a tail that was read replaces a note that it could not be; a tail with
a NUL is refused before the database sees it (PostgreSQL's TEXT cannot hold one, so the
bound in vigil.core.logtail strips them); hostile content — invalid UTF-8, every control
character, a huge log — is stored as the bounded text `bounded_text` makes of it; and
retention deletes tails at the attempts' whole-day cutoff.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.contract.historydb import RETENTION_DAYS
from vigil.core.logtail import LogTail, bounded_text
from vigil.core.ports import HistoryUnavailable
from vigil.history.store import SqlHistory

SCHEDULED = datetime(2026, 12, 5, 2, 0, tzinfo=UTC)


def a_tail(**changes: Any) -> LogTail:
    base = LogTail(
        execution_id="nightly-29000000", attempt=1, namespace="team-a", job="nightly", pod="nightly-29000000-1",
        scheduled_for=SCHEDULED, captured_at=SCHEDULED + timedelta(minutes=3), text="Traceback …\nboom\n",
        truncated=False, log_bytes=18,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_a_tail_round_trips_with_every_field(history: SqlHistory) -> None:
    tail = a_tail(truncated=True, log_bytes=10_000_000)
    history.write_log_tail(tail)

    assert history.log_tail("team-a", "nightly-29000000", attempt=1) == tail
    assert history.has_log_tail("nightly-29000000", 1)


def test_without_an_attempt_the_latest_stored_one_is_read(history: SqlHistory) -> None:
    history.write_log_tail(a_tail(attempt=1, text="first"))
    history.write_log_tail(a_tail(attempt=3, text="third"))

    latest = history.log_tail("team-a", "nightly-29000000")
    assert latest is not None and (latest.attempt, latest.text) == (3, "third")
    assert history.log_tail("team-a", "nightly-29000000", attempt=2) is None


def test_another_namespace_reads_nothing(history: SqlHistory) -> None:
    history.write_log_tail(a_tail())

    assert history.log_tail("team-b", "nightly-29000000") is None


def test_writing_again_keeps_the_first_tail(history: SqlHistory) -> None:
    history.write_log_tail(a_tail(text="first"))
    history.write_log_tail(a_tail(text="second"))

    stored = history.log_tail("team-a", "nightly-29000000")
    assert stored is not None and stored.text == "first"


def test_a_tail_that_was_read_replaces_a_note_that_it_could_not_be(history: SqlHistory) -> None:
    history.write_log_tail(a_tail(text="", note="the log could not be read: timed out"))
    assert not history.has_log_tail("nightly-29000000", 1)

    history.write_log_tail(a_tail(text="read at last"))
    history.write_log_tail(a_tail(text="", note="the log could not be read: gone"))

    stored = history.log_tail("team-a", "nightly-29000000")
    assert stored is not None and (stored.text, stored.note) == ("read at last", "")
    assert history.has_log_tail("nightly-29000000", 1)


def test_a_nul_or_a_naive_time_is_refused(history: SqlHistory) -> None:
    with pytest.raises(ValueError, match="NUL"):
        history.write_log_tail(a_tail(text="a\x00b"))
    with pytest.raises(ValueError, match="naive"):
        history.write_log_tail(a_tail(captured_at=SCHEDULED.replace(tzinfo=None)))
    assert history.log_tail("team-a", "nightly-29000000") is None


HOSTILE = {
    "nul bytes": b"\x00" * 1000 + b"before\x00after\x00\n",
    "invalid utf-8": b"\xff\xfe\xc3(\xa0\xa1\xe2\x28\xa1\xf0\x90\x28\xbc" * 500,
    "every control character": bytes(range(32)) * 100 + b"\x7f",
    "a huge log": b"line of log output\n" * 600_000,  # about 11 MiB
    "a character split by the cut": "é".encode() * 50_000,
}


@pytest.mark.parametrize("raw", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_content_is_stored_as_its_bounded_text(history: SqlHistory, raw: bytes) -> None:
    text, cut = bounded_text(raw, limit=64 * 1024)
    history.write_log_tail(a_tail(text=text, truncated=cut, log_bytes=len(raw)))

    stored = history.log_tail("team-a", "nightly-29000000")
    assert stored is not None and stored.text == text
    assert len(stored.text.encode()) <= 64 * 1024


def test_retention_deletes_tails_at_the_attempts_cutoff(history: SqlHistory) -> None:
    now = datetime(2026, 12, 20, 12, 0, tzinfo=UTC)
    old = now - timedelta(days=RETENTION_DAYS + 1)
    history.write_log_tail(a_tail(execution_id="old", scheduled_for=old, captured_at=old))
    history.write_log_tail(a_tail(execution_id="recent", scheduled_for=now, captured_at=now))

    expiry = history.drop_expired_partitions(now)

    assert expiry.log_tails_deleted == 1
    assert history.log_tail("team-a", "old") is None
    assert history.log_tail("team-a", "recent") is not None


def test_an_unreachable_database_is_history_unavailable(unreachable: SqlHistory) -> None:
    with pytest.raises(HistoryUnavailable):
        unreachable.write_log_tail(a_tail())
    with pytest.raises(HistoryUnavailable):
        unreachable.has_log_tail("nightly-29000000", 1)
