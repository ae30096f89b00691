"""Every query parameter and form field the console reads, bounded, with an error naming the field.

A page's query string and a form's body are read here only: unknown names, repeated names,
values too long or outside their grammar are refused (400, the field named, the value never
echoed), before any review or read is made for them.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Mapping

NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
EXECUTION_ID = re.compile(
    r"[a-z0-9][-a-z0-9]{0,62}"
)  # the queue store's ids (vigil.api.queuebase.ID)
HEALTHS = ("healthy", "overdue", "failing", "suspended", "invalid", "pending")
#: Longest text filter, in characters: a name fits, a paste of a page does not.
QUERY_MAX = 100
#: Longest reason, in characters: what a job's `suspendReason` and a request's `reason` allow.
REASON_MAX = 1024
#: Longest token pasted in the login form, in characters (a ServiceAccount token is about 1,000).
TOKEN_MAX = 8192
#: Most fields in one query string or form.
FIELDS_MAX = 16


#: How a %-escape that is not UTF-8 is decoded: as a lone surrogate, which :func:`utf8` then finds
#: (the default, U+FFFD, would turn a malformed value into another, valid one).
UNDECODED = "surrogateescape"


def utf8(value: str) -> bool:
    """Whether `value` is Unicode text (no lone surrogate: no undecodable %-escape in it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class BadField(ValueError):
    """A field the console refuses: `field` names it, the message says why (never quoting it)."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def parse(text: str, allowed: frozenset[str], *, where: str = "query") -> dict[str, str]:
    """The fields of a query string or form body, each given at most once and named in `allowed`."""
    if len(text) > 2 * TOKEN_MAX:
        raise BadField(where, f"is longer than {2 * TOKEN_MAX} characters")
    try:
        pairs = urllib.parse.parse_qsl(
            text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=FIELDS_MAX, errors=UNDECODED
        )
    except ValueError:
        raise BadField(where, f"is not a form of at most {FIELDS_MAX} name=value fields") from None
    found: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            raise BadField(
                name if len(name) <= 40 and name.isidentifier() else where,
                "is not a field this page reads",
            )
        if name in found:
            raise BadField(name, "is given more than once")
        if "\x00" in value:
            raise BadField(name, "holds NUL")
        if not utf8(value):
            raise BadField(name, "is not UTF-8 text once its %-escapes are decoded")
        found[name] = value
    return found


def text(fields: Mapping[str, str], name: str, *, limit: int, required: bool = False) -> str:
    value = fields.get(name, "").strip()
    if required and not value:
        raise BadField(name, "is required")
    if len(value) > limit:
        raise BadField(name, f"is longer than {limit} characters")
    if any(ord(ch) < 32 and ch not in "\t\n\r" for ch in value):
        raise BadField(name, "holds control characters")
    return value


def choice(fields: Mapping[str, str], name: str, options: tuple[str, ...]) -> str:
    value = fields.get(name, "")
    if value and value not in options:
        raise BadField(name, f"must be one of {', '.join(options)}")
    return value


def namespace(fields: Mapping[str, str], name: str = "namespace") -> str:
    value = fields.get(name, "")
    if value and not NAMESPACE.fullmatch(value):
        raise BadField(name, "is not a namespace name (a DNS label of at most 63 characters)")
    return value


@dataclasses.dataclass(frozen=True)
class JobFilter:
    """The Jobs page's filters: a namespace (""= every one the viewer may list), a health, a text."""

    namespace: str = ""
    health: str = ""
    text: str = ""


def job_filter(query: str) -> JobFilter:
    fields = parse(query, frozenset({"namespace", "health", "q"}))
    return JobFilter(
        namespace=namespace(fields),
        health=choice(fields, "health", HEALTHS),
        text=text(fields, "q", limit=QUERY_MAX),
    )


def many(text: str, name: str, *, limit: int, also: frozenset[str]) -> tuple[list[str], str]:
    """The values of `name`, which may repeat up to `limit` times, and of the one `also` field
    (the CSRF field) in a form body."""
    if len(text) > 2 * TOKEN_MAX:
        raise BadField("form", f"is longer than {2 * TOKEN_MAX} characters")
    try:
        pairs = urllib.parse.parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=bool(text),
            max_num_fields=limit + len(also),
            errors=UNDECODED,
        )
    except ValueError:
        raise BadField(name, f"is given more than {limit} times") from None
    values, other = [], ""
    for key, value in pairs:
        if key == name and not utf8(value):
            raise BadField(name, "is not UTF-8 text once its %-escapes are decoded")
        if key == name:
            values.append(value)
        elif key in also and not other:
            other = value
        else:
            raise BadField(
                key if key.isidentifier() and len(key) <= 40 else "form",
                "is not a field this form reads",
            )
    return values, other


def csrf_of(text: str) -> str:
    """The CSRF field of a form body ("" when it has none or is not a form)."""
    try:
        pairs = urllib.parse.parse_qsl(
            text, keep_blank_values=True, max_num_fields=4 * FIELDS_MAX + 100
        )
    except ValueError:
        return ""
    return next((value for key, value in pairs if key == "csrf"), "")
