"""The bound on a stored log tail (vigil.core.logtail): a tenant writes the log, so whatever it
holds — NUL bytes, invalid UTF-8, a character split by the cut, gigabytes — the text kept is
at most the limit in UTF-8 bytes, is the log's end, and is valid text without NUL; the
streaming buffer keeps that bound in bounded memory; the policy says whose tails are kept.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vigil.core.logtail import (
    LogPolicy,
    LogTail,
    TailBuffer,
    bounded_text,
    log_tail_from_json,
    log_tail_to_json,
    wanted,
)


@pytest.mark.parametrize(
    ("policy", "failed", "kept"),
    [
        pytest.param(LogPolicy.ALL, False, True, id="all keeps a success"),
        pytest.param(LogPolicy.ALL, True, True, id="all keeps a failure"),
        pytest.param(LogPolicy.FAILED, False, False, id="failed skips a success"),
        pytest.param(LogPolicy.FAILED, True, True, id="failed keeps a failure"),
        pytest.param(LogPolicy.NONE, True, False, id="none keeps nothing"),
    ],
)
def test_the_policy_says_whose_tail_is_kept(policy: LogPolicy, failed: bool, kept: bool) -> None:
    assert wanted(policy, failed=failed) is kept


def test_a_short_log_is_kept_whole() -> None:
    assert bounded_text(b"hello\nworld\n", limit=1024) == ("hello\nworld\n", False)


def test_the_end_is_kept_not_the_start() -> None:
    text, cut = bounded_text(b"a" * 100 + b"THE END", limit=10)
    assert (text, cut) == ("aaaTHE END", True)


def test_nul_bytes_are_dropped_and_do_not_count() -> None:
    assert bounded_text(b"\x00" * 50 + b"a\x00b", limit=2) == ("ab", False)


def test_a_cut_never_splits_a_character() -> None:
    text, cut = bounded_text("é".encode() * 10, limit=5)  # 2 bytes each: 5 bytes would split one
    assert (text, cut) == ("éé", True)


def test_invalid_utf8_grows_when_replaced_and_is_still_bounded() -> None:
    text, cut = bounded_text(b"\xff" * 10, limit=10)  # ten U+FFFD are 30 bytes
    assert cut and text == "\ufffd" * 3 and len(text.encode()) <= 10


@given(st.binary(max_size=3000), st.integers(min_value=1, max_value=600))
def test_any_bytes_give_bounded_valid_text_without_nul(raw: bytes, limit: int) -> None:
    text, cut = bounded_text(raw, limit=limit)
    assert len(text.encode("utf-8")) <= limit
    assert "\x00" not in text
    whole, _ = bounded_text(raw, limit=10**6)
    assert whole.endswith(text)
    assert cut is (text != whole)


@given(st.lists(st.binary(max_size=700), max_size=40), st.integers(min_value=1, max_value=500))
def test_the_buffer_keeps_what_the_whole_log_would_give(chunks: list[bytes], limit: int) -> None:
    buffer = TailBuffer(limit)
    for chunk in chunks:
        buffer.feed(chunk)
    assert buffer.text() == bounded_text(b"".join(chunks), limit=limit)
    assert buffer.seen == sum(map(len, chunks))


def test_the_buffer_holds_at_most_twice_its_limit_of_a_huge_log() -> None:
    buffer = TailBuffer(64 * 1024)
    for _ in range(2000):  # 128 MiB streamed
        buffer.feed(b"x" * 65536)
        assert len(buffer._kept) <= 2 * 64 * 1024  # the bound is on what it holds, not only on what it returns
    text, cut = buffer.text()
    assert cut and len(text) == 64 * 1024


def test_a_tail_round_trips_through_the_apis_json() -> None:
    at = datetime(2026, 12, 5, 2, tzinfo=UTC)
    tail = LogTail(
        execution_id="e", attempt=2, namespace="ns", job="j", pod="e-2", scheduled_for=at, captured_at=at,
        text="x\ufffd", truncated=True, log_bytes=9, note="",
    )  # fmt: skip
    assert log_tail_from_json(log_tail_to_json(tail)) == tail
