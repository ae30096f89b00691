"""Execution ids, pod names and the RFC 3339 helpers they rest on.

Covers the documented derivation (pinned values, so an id never changes between versions),
determinism, DNS-1123 safety and length, distinctness over a sample of distinct occurrences,
equality of the same instant written in different zones, rejection of naive or sub-second
nominal times and bad uids, pod names, and RFC 3339 formatting and parsing.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vigil.core.ids import (
    DNS_LABEL_MAX_LENGTH,
    ExecutionId,
    execution_id,
    is_dns_label,
    one_off_execution_id,
    pod_name,
    step_execution_id,
)
from vigil.core.timeparse import format_rfc3339, parse_rfc3339

UID = "5b0a3f3e-8d0c-4a57-9b7e-7c1d2f0e9a11"
NOMINAL = datetime(2026, 8, 1, 2, 0, tzinfo=UTC)
MAX_ID_LENGTH = 20
#: The largest attempt number a pod name must still hold within 63 characters.
LARGE_ATTEMPT = 10**9

UIDS = st.one_of(st.uuids().map(str), st.text(min_size=1, max_size=40).filter(lambda text: "|" not in text))
NOMINALS = st.datetimes(
    min_value=datetime(2000, 1, 1),  # noqa: DTZ001 - hypothesis requires naive bounds; timezones= makes the values aware
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001 - hypothesis requires naive bounds; timezones= makes the values aware
    timezones=st.just(UTC),
).map(lambda moment: moment.replace(microsecond=0))


def test_execution_id_is_pinned() -> None:
    assert execution_id(UID, NOMINAL) == "ex-qxzftbw6zsdy3zvg"
    assert step_execution_id(UID, "encode_480") == "st-a67ldwsxvy6yhhbh"


def test_execution_id_follows_the_documented_derivation() -> None:
    digest = hashlib.sha256(f"{UID}|2026-08-01T02:00:00Z".encode()).digest()[:10]
    assert execution_id(UID, NOMINAL) == "ex-" + base64.b32encode(digest).decode().lower()


@settings(max_examples=300, deadline=None)
@given(uid=UIDS, nominal=NOMINALS)
def test_execution_id_is_deterministic_short_and_dns_safe(uid: str, nominal: datetime) -> None:
    first = execution_id(uid, nominal)
    assert first == execution_id(uid, nominal)
    assert len(first) <= MAX_ID_LENGTH
    assert is_dns_label(first)
    assert first.startswith("ex-")


@settings(max_examples=300, deadline=None)
@given(entropy=st.binary(min_size=10, max_size=32))
def test_a_one_off_id_is_its_entropy_in_the_same_format(entropy: bytes) -> None:
    made = one_off_execution_id(entropy)
    assert made == "ex-" + base64.b32encode(entropy[:10]).decode().lower()
    assert len(made) <= MAX_ID_LENGTH
    assert is_dns_label(made)


def test_a_one_off_id_needs_ten_bytes_of_entropy() -> None:
    with pytest.raises(ValueError, match="at least 10 bytes"):
        one_off_execution_id(b"123456789")


@settings(max_examples=200, deadline=None)
@given(uid=UIDS, step=st.text(min_size=1, max_size=200))
def test_step_execution_id_is_deterministic_short_and_dns_safe(uid: str, step: str) -> None:
    first = step_execution_id(uid, step)
    assert first == step_execution_id(uid, step)
    assert len(first) <= MAX_ID_LENGTH
    assert is_dns_label(first)
    assert first.startswith("st-")


def test_distinct_occurrences_get_distinct_ids() -> None:
    uids = [f"00000000-0000-4000-8000-{index:012d}" for index in range(20)]
    nominals = [NOMINAL + index * timedelta(seconds=1) for index in range(250)]
    nominals += [NOMINAL + index * timedelta(days=1) for index in range(1, 250)]
    ids = {execution_id(uid, nominal) for uid in uids for nominal in nominals}
    assert len(ids) == len(uids) * len(nominals)
    steps = {step_execution_id(uid, f"step-{index}") for uid in uids for index in range(100)}
    assert len(steps) == len(uids) * 100
    assert not ids & steps


def test_the_same_instant_in_any_zone_gets_the_same_id() -> None:
    in_london = NOMINAL.astimezone(ZoneInfo("Europe/London"))
    in_offset = NOMINAL.astimezone(timezone(timedelta(hours=-7)))
    assert execution_id(UID, in_london) == execution_id(UID, in_offset) == execution_id(UID, NOMINAL)


@pytest.mark.parametrize(
    ("uid", "nominal", "message"),
    [
        pytest.param(UID, datetime(2026, 8, 1, 2, 0), "timezone-aware", id="naive"),  # noqa: DTZ001 - a naive time on purpose: the call must refuse it
        pytest.param(UID, NOMINAL.replace(microsecond=1), "whole second", id="sub-second"),
        pytest.param("", NOMINAL, "non-empty", id="empty-uid"),
        pytest.param("a|b", NOMINAL, "free of", id="separator-in-uid"),
    ],
)
def test_bad_execution_id_inputs_are_refused(uid: str, nominal: datetime, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        execution_id(uid, nominal)


def test_empty_step_id_is_refused() -> None:
    with pytest.raises(ValueError, match="step_id"):
        step_execution_id(UID, "")


def test_pod_name_appends_the_attempt_and_stays_a_label() -> None:
    execution = execution_id(UID, NOMINAL)
    assert pod_name(execution, 1) == f"{execution}-1"
    longest = pod_name(execution, LARGE_ATTEMPT)
    assert len(longest) <= DNS_LABEL_MAX_LENGTH
    assert is_dns_label(longest)
    with pytest.raises(ValueError, match="negative"):
        pod_name(execution, -1)
    with pytest.raises(ValueError, match="DNS-1123"):
        pod_name(ExecutionId("Not_A_Label"), 1)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("ex-abc234", True),
        ("a", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("-abc", False),
        ("abc-", False),
        ("ABC", False),
        ("a.b", False),
        ("", False),
    ],
)
def test_dns_label_check(name: str, valid: bool) -> None:
    assert is_dns_label(name) is valid


# --- RFC 3339 ---------------------------------------------------------------------------------


def test_format_is_utc_with_z_to_the_second() -> None:
    assert format_rfc3339(NOMINAL) == "2026-08-01T02:00:00Z"
    assert format_rfc3339(NOMINAL.astimezone(ZoneInfo("Europe/London"))) == "2026-08-01T02:00:00Z"
    assert format_rfc3339(NOMINAL.replace(microsecond=999_999)) == "2026-08-01T02:00:00Z"
    with pytest.raises(ValueError, match="timezone-aware"):
        format_rfc3339(datetime(2026, 8, 1))  # noqa: DTZ001 - a naive time on purpose: the call must refuse it


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-08-01T02:00:00Z", NOMINAL),
        ("2026-08-01t02:00:00z", NOMINAL),
        ("2026-08-01 02:00:00Z", NOMINAL),
        ("2026-08-01T03:00:00+01:00", NOMINAL),
        ("2026-07-31T21:30:00-04:30", NOMINAL),
        ("2026-08-01T02:00:00.250Z", NOMINAL + timedelta(milliseconds=250)),
    ],
)
def test_parse_accepts_rfc3339_and_returns_utc(text: str, expected: datetime) -> None:
    parsed = parse_rfc3339(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    ["2026-08-01T02:00:00", "2026-08-01", "2026-08-01T02:00Z", "yesterday", "2026-13-01T02:00:00Z", ""],
)
def test_parse_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_rfc3339(text)


@settings(max_examples=200, deadline=None)
@given(moment=NOMINALS)
def test_format_and_parse_round_trip(moment: datetime) -> None:
    assert parse_rfc3339(format_rfc3339(moment)) == moment
