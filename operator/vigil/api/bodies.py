"""Request bodies read the one way: UTF-8 JSON, its depth and text checked, nothing of it quoted.

Python's `json` reads ``NaN``, ``Infinity``, ``\\u0000`` and lone surrogates, and recurses once per
level of nesting: a body nested ~1,000 deep raised RecursionError, and a body that was not UTF-8
came back as an error quoting the offending byte. Every route that reads a body reads it here,
and what it then holds is checked by `vigil.core.jsonvalues` (the same door the queue store and
the payload templates use), so each of these is a 4xx naming the field, never a 500 and never
an echo.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vigil.core import jsonvalues

#: A key named back to its sender as the field at fault; any other is not shown.
PLAIN_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def field_name(key: str, *, instead: str) -> str:
    """`key` as the field at fault when it is a plain name, else `instead` (the place holding it):
    a key is caller's text, and is not quoted back when it could be anything."""
    return key if PLAIN_FIELD.fullmatch(key) else instead


def read_json(raw: bytes, *, field: str) -> Any:
    """The JSON value of a request body; jsonvalues.UnsafeValue(`field`) when it is not UTF-8,
    not JSON, or nested too deep to read. The reason names a position, never the bytes there."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise jsonvalues.UnsafeValue(field, f"is not UTF-8 text (at byte {error.start})") from None
    try:
        return json.loads(text)
    except RecursionError:  # nesting deeper than the decoder's stack
        raise jsonvalues.UnsafeValue(
            field, f"is nested deeper than {jsonvalues.MAX_DEPTH} objects and arrays"
        ) from None
    except json.JSONDecodeError as error:  # its msg says what was expected where: no input in it
        raise jsonvalues.UnsafeValue(field, f"is not JSON: {error.msg} at character {error.pos}") from None
