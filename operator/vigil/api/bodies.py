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
#: A quoted or bracketed piece of an error message: where parsers (croniter, zoneinfo, Jinja)
#: put what they were given.
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]")
#: What stands in an error message for a piece of the caller's own text.
WHAT_WAS_SENT = "(the value sent)"
#: The shortest piece of the caller's text that is looked for unquoted too.
ECHO_MIN = 4


def field_name(key: str, *, instead: str) -> str:
    """`key` as the field at fault when it is a plain name, else `instead` (the place holding it):
    a key is caller's text, and is not quoted back when it could be anything."""
    return key if PLAIN_FIELD.fullmatch(key) else instead


def unechoed(why: str, sent: str) -> str:
    """`why` (a reason a parser gave for refusing `sent`) with none of `sent` in it: every quoted
    or bracketed piece holding some of it, and `sent` itself, stand as WHAT_WAS_SENT. What the
    core says about a cron, a time zone or a template quotes what it read (`invalid cron
    expression '0 3 * * X'`, `got 'token'`); the rule it broke stays."""

    def scrub(match: re.Match[str]) -> str:
        inner = match.group(0)[1:-1].strip()
        return WHAT_WAS_SENT if inner and inner in sent else match.group(0)

    text = QUOTED.sub(scrub, why)
    if len(sent) >= ECHO_MIN and sent in text:
        text = text.replace(sent, WHAT_WAS_SENT)
    return text


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
