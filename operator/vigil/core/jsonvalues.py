"""Values refused at the door: the JSON a tenant hands in, checked once, the same way everywhere.

PostgreSQL's `jsonb` and `text` refuse a string holding NUL (U+0000) or a lone
surrogate; JSON has no NaN or infinity (Python's `json` writes them anyway, and
PostgreSQL refuses what it wrote); a value nested thousands deep exhausts
recursion in whoever walks it next; and a payload is a row, not a blob. A value
that gets past the door with any of these fails later, far from its author, in
a batch it shares with other tenants' work (issue 36). So every entry point —
the HTTP API's 422, `QueueStore.submit`, the rendered payload at fire time on
both tiers — asks this one module, which answers with the first offending
place as a path a person can find (`payload.a[3].b`) and why.

The walk is iterative (a deep value cannot exhaust this module's own stack),
stops at the first refusal, and measures the size only of a value that passed
(compact JSON, ASCII-escaped, as the HTTP API has always counted it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: Deepest nesting of objects and arrays: ample for any real payload, far below any recursion limit.
MAX_DEPTH = 64
#: Largest payload, as compact JSON: executions are rows, not blobs, and a pod's payload travels in
#: one environment variable (`vigil.core.payload` bounds a rendered payload by this same limit).
MAX_PAYLOAD_BYTES = 32 * 1024
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_SHOWN_KEY = 40  # characters of an odd key quoted in a path


class UnsafeValue(ValueError):
    """A value refused at the door; `path` names the place (`payload.a[3].b`), `why` says what."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


def string_refusal(text: str) -> str | None:
    """Why PostgreSQL would refuse `text` in a `text` or `jsonb` value, or None."""
    if "\x00" in text:
        return "holds NUL (\\u0000), which PostgreSQL refuses in text and jsonb"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate (\\ud800-\\udfff without its pair), which is not Unicode text"
    return None


def _key_path(path: str, key: str) -> str:
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key[:_SHOWN_KEY])}]"  # ASCII-escaped: a NUL in a key is shown, not sent


def _scalar_refusal(value: Any) -> str | None:
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if value == value and value not in (float("inf"), float("-inf")) else (
            f"is {value!r}: JSON has no NaN or infinity"
        )
    if isinstance(value, str):
        return string_refusal(value)
    return f"is a {type(value).__name__}, not a JSON value"


def refusal(
    value: Any, *, path: str, max_depth: int = MAX_DEPTH, max_bytes: int | None = MAX_PAYLOAD_BYTES
) -> UnsafeValue | None:
    """The first reason to refuse `value` (named from `path`, the field it arrived in), or None.

    Refused: a string or key with NUL or a lone surrogate, NaN or an infinity, a key that is not
    a string, anything that is no JSON value, objects and arrays nested deeper than `max_depth`,
    and (unless `max_bytes` is None) more than `max_bytes` bytes as compact JSON.
    """
    stack: list[tuple[str, Any, int]] = [(path, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth >= max_depth:
                return UnsafeValue(where, f"is nested deeper than {max_depth} objects and arrays")
            children = _children(where, item)
            if isinstance(children, UnsafeValue):
                return children
            stack.extend((child_path, child, depth + 1) for child_path, child in reversed(children))
            continue
        why = _scalar_refusal(item)
        if why is not None:
            return UnsafeValue(where, why)
    if max_bytes is not None:
        return _size_refusal(json.dumps(value, separators=(",", ":")), path=path, max_bytes=max_bytes)
    return None


def _size_refusal(text: str, *, path: str, max_bytes: int) -> UnsafeValue | None:
    size = len(text.encode())
    return UnsafeValue(path, f"is {size} bytes as JSON; at most {max_bytes}") if size > max_bytes else None


def _children(where: str, item: Mapping[Any, Any] | Sequence[Any]) -> list[tuple[str, Any]] | UnsafeValue:
    """An object's or array's children with their paths; an object's first bad key refuses it."""
    if not isinstance(item, Mapping):
        return [(f"{where}[{i}]", child) for i, child in enumerate(item)]
    children: list[tuple[str, Any]] = []
    for key, child in item.items():
        if not isinstance(key, str):
            return UnsafeValue(f"{where}[{key!r}]", "is a key that is not a string")
        why = string_refusal(key)
        if why is not None:
            return UnsafeValue(_key_path(where, key), f"its key {why}")
        children.append((_key_path(where, key), child))
    return children


def check(value: Any, *, path: str, max_bytes: int | None = MAX_PAYLOAD_BYTES) -> None:
    """Raise UnsafeValue naming the first place `value` is refused (see `refusal`)."""
    found = refusal(value, path=path, max_bytes=max_bytes)
    if found is not None:
        raise found


def check_object(value: Any, *, path: str, max_bytes: int | None = MAX_PAYLOAD_BYTES) -> dict[str, Any]:
    """`value` if it is a JSON object that passes `check`; UnsafeValue otherwise."""
    found = _object(value, path)
    check(found, path=path, max_bytes=max_bytes)
    return found


def checked_object_text(value: Any, *, path: str, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """`checked_text` of a JSON object; UnsafeValue for anything else."""
    return checked_text(_object(value, path), path=path, max_bytes=max_bytes)


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UnsafeValue(path, "must be a JSON object")
    return value


def checked_text(value: Any, *, path: str, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """`value` as compact JSON text (ASCII-escaped, as sizes are counted) if it passes `check`;
    UnsafeValue otherwise. The text measured is the text returned, so whoever stores it writes
    exactly what was checked (a task's return value: vigil.worker.outputs).

    Also refused here: what the walk lets through but `json` cannot write — a mapping that is not
    a dict, an int with more digits than Python will print."""
    found = refusal(value, path=path, max_bytes=None)
    if found is not None:
        raise found
    try:
        text = json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise UnsafeValue(path, f"cannot be written as JSON: {error}") from None
    too_large = _size_refusal(text, path=path, max_bytes=max_bytes)
    if too_large is not None:
        raise too_large
    return text


def check_text(text: str, *, path: str, max_bytes: int | None = MAX_PAYLOAD_BYTES) -> Any:
    """The value of JSON `text` (a rendered payload) if it passes `check`; UnsafeValue otherwise.

    Python's `json` writes NUL and lone surrogates as escapes and NaN as a bare word, all of
    which read back; so the text is read and its value walked, as any other entry's."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise UnsafeValue(path, f"is nested deeper than {MAX_DEPTH} objects and arrays") from None
    except ValueError as err:
        raise UnsafeValue(path, f"is not JSON: {err}") from None
    check(value, path=path, max_bytes=max_bytes)
    return value
