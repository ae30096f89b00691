"""Values refused at the door (vigil.core.jsonvalues): each hostile kind is named by its path.

The HTTP API, `QueueStore.submit` and both tiers' fire-time checks ask this one
module, so a table of named values here is the rule each entry point enforces:
NUL and lone surrogates (in values and keys), NaN and infinities, nesting deeper
than 64, and a payload over the size limit. Ordinary values pass unchanged.
`checked_text` (a task's return value) refuses the same, and what `json` cannot
write besides; the text it returns is the text it measured.
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import pytest

from vigil.core.jsonvalues import (
    MAX_DEPTH,
    MAX_PAYLOAD_BYTES,
    UnsafeValue,
    check_object,
    check_text,
    checked_text,
    refusal,
)


def nested(depth: int) -> dict[str, Any]:
    """An object `depth` objects deep (the outermost counts)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


REFUSED = [
    pytest.param({"a": [1, 2, {"b": "x\x00y"}]}, "payload.a[2].b", "NUL", id="NUL deep in a value"),
    pytest.param({"a": "\ud800"}, "payload.a", "lone surrogate", id="a lone high surrogate"),
    pytest.param({"a": ["\udfff"]}, "payload.a[0]", "lone surrogate", id="a lone low surrogate"),
    pytest.param({"k\x00": 1}, 'payload["k\\u0000"]', "its key holds NUL", id="NUL in a key, shown escaped"),
    pytest.param({"a": float("nan")}, "payload.a", "NaN", id="NaN"),
    pytest.param({"a": {"b": float("-inf")}}, "payload.a.b", "NaN or infinity", id="minus infinity"),
    pytest.param({"a": {1: 2}}, "payload.a[1]", "not a string", id="a key that is no string"),
    pytest.param({"a": {1, 2}}, "payload.a", "not a JSON value", id="a set"),
    pytest.param(nested(MAX_DEPTH + 1), "payload" + ".n" * MAX_DEPTH, "nested deeper", id="65 deep"),
    pytest.param({"a": "x" * MAX_PAYLOAD_BYTES}, "payload", "bytes as JSON", id="over the size limit"),
]


@pytest.mark.parametrize(("value", "path", "why"), REFUSED)
def test_a_hostile_value_is_refused_naming_its_place(value: Any, path: str, why: str) -> None:
    found = refusal(value, path="payload")
    assert found is not None and found.path == path and why in found.why, found


PASSED = [
    pytest.param({}, id="empty"),
    pytest.param({"a": [1, 2.5, True, None, "text é ✓ 😀"]}, id="every scalar, astral text included"),
    pytest.param(nested(MAX_DEPTH), id="64 deep"),
    pytest.param({"a": "x" * (MAX_PAYLOAD_BYTES - 10)}, id="just within the size limit"),
    pytest.param({"odd key.with dots": {"": 1}}, id="odd keys"),
]


@pytest.mark.parametrize("value", PASSED)
def test_an_ordinary_value_passes(value: Any) -> None:
    assert refusal(value, path="payload") is None


def test_a_payload_must_be_an_object() -> None:
    with pytest.raises(UnsafeValue, match=r"^payload: must be a JSON object$"):
        check_object([1], path="payload")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        pytest.param(json.dumps({"a": "\x00"}), "spec.payload.a", id="NUL as Python's json writes it"),
        pytest.param(json.dumps({"a": float("nan")}), "spec.payload.a", id="NaN as Python's json writes it"),
        pytest.param("[" * 5000 + "]" * 5000, "spec.payload", id="too deep to read"),
    ],
)
def test_a_rendered_text_is_read_and_walked(text: str, path: str) -> None:
    with pytest.raises(UnsafeValue) as refused:
        check_text(text, path="spec.payload")
    assert refused.value.path == path


def test_the_size_limit_can_be_left_to_the_caller() -> None:
    assert refusal({"a": "x" * (2 * MAX_PAYLOAD_BYTES)}, path="payload", max_bytes=None) is None


@pytest.mark.parametrize(("value", "path", "why"), REFUSED)
def test_checked_text_refuses_what_refusal_does(value: Any, path: str, why: str) -> None:
    with pytest.raises(UnsafeValue) as refused:
        checked_text(value, path="payload")
    assert refused.value.path == path and why in refused.value.why


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(MappingProxyType({"a": 1}), id="a mapping that is no dict"),
        pytest.param(10**5000, id="an int longer than Python prints"),
    ],
)
def test_checked_text_refuses_what_json_cannot_write(value: Any) -> None:
    with pytest.raises(UnsafeValue, match=r"^output: cannot be written as JSON: "):
        checked_text(value, path="output")


@pytest.mark.parametrize("value", [*PASSED, pytest.param([1, "a", None], id="an array"),
                                   pytest.param((1, 2), id="a tuple, as an array"), pytest.param("é", id="a string"),
                                   pytest.param(0, id="a number")])  # fmt: skip
def test_checked_text_is_the_compact_json_it_measured(value: Any) -> None:
    text = checked_text(value, path="output")
    assert text == json.dumps(value, separators=(",", ":"))
    assert json.loads(text) == (list(value) if isinstance(value, tuple) else value)


def test_checked_text_takes_its_own_bound() -> None:
    assert checked_text("x" * 8, path="output", max_bytes=10) == '"xxxxxxxx"'
    with pytest.raises(UnsafeValue, match=r"^output: is 11 bytes as JSON; at most 10$"):
        checked_text("x" * 9, path="output", max_bytes=10)
