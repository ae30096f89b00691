"""The duration grammar shared by every Vigil resource, and its one parser.

Users write durations the way people say them: ``"90s"``, ``"15m"``, ``"26h"``, ``"1h30m"``,
``"7d"``. The grammar is deliberately small — whole numbers, units ``d``, ``h``, ``m``, ``s``,
each at most once and in that order — so that the CRD's regular expression (checked by the API
server at admission) and :func:`parse_duration` (used by the operator) accept exactly the same
texts. A day is always 24 hours here: durations measure elapsed time, not calendar days.

This module is pure: no pydantic, no clock. The pydantic field types built on it live in
``vigil.model.common``.
"""

from __future__ import annotations

import re
from datetime import timedelta

#: The unit letters, largest first, with their length in seconds.
UNIT_SECONDS: dict[str, int] = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}

#: The CRD ``pattern`` for a duration. Every component is optional here; the schema adds
#: ``minLength: 2`` (the shortest valid text is ``"1s"``), which rules out the empty string.
DURATION_PATTERN = r"^([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$"

#: The shortest text the grammar accepts ("1s"), used as the schema's ``minLength``.
DURATION_MIN_LENGTH = 2

#: The longest duration text accepted: bounds the CEL cost estimate and rejects absurd input.
DURATION_MAX_LENGTH = 32

#: A text in the grammar is a positive duration exactly when it contains a non-zero digit.
#: (The CEL rule using it is cheaper than matching the zero forms, which matters where the
#: rule sits deep in nested lists and the API server multiplies its cost.)
NONZERO_DIGIT_PATTERN = "[1-9]"

_DURATION_RE = re.compile(DURATION_PATTERN)
_NEGATIVE_RE = re.compile(r"^\s*-")
_EXAMPLES = "e.g. '90s', '15m', '1h30m', '7d'"


def parse_duration(text: str) -> timedelta:
    """Parse a duration such as ``"1h30m"`` into a :class:`~datetime.timedelta`.

    Zero (``"0s"``) is a valid duration; fields that need a positive one check that
    themselves. Raises :class:`ValueError` naming the offending text for anything else
    that is not in the grammar: negatives, unknown units, units out of order, decimals,
    spaces, the empty string.
    """
    if not isinstance(text, str):
        raise ValueError(f"a duration must be a string such as '90s', not {text!r}")
    if _NEGATIVE_RE.match(text):
        raise ValueError(f"negative durations are not allowed: {text!r}")
    if len(text) > DURATION_MAX_LENGTH:
        raise ValueError(
            f"duration {text[:DURATION_MAX_LENGTH]!r}... is longer than "
            f"{DURATION_MAX_LENGTH} characters"
        )
    match = _DURATION_RE.fullmatch(text)
    if not text or match is None:
        raise ValueError(
            f"invalid duration {text!r}: expected whole numbers with units d, h, m, s "
            f"in that order, {_EXAMPLES}"
        )
    seconds = sum(
        int(component[:-1]) * UNIT_SECONDS[component[-1]]
        for component in match.groups()
        if component is not None
    )
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {text!r} is too large") from None


def parse_positive_duration(text: str) -> timedelta:
    """Parse a duration that must be greater than zero (``"0s"`` is rejected)."""
    delta = parse_duration(text)
    if delta <= timedelta(0):
        raise ValueError(f"duration {text!r} must be greater than zero")
    return delta


def format_duration(delta: timedelta) -> str:
    """Render a non-negative whole-second timedelta in the canonical form (``"1h30m"``).

    The inverse of :func:`parse_duration` for canonical texts: ``parse_duration(format_duration(d)) == d``.
    """
    if delta < timedelta(0):
        raise ValueError(f"negative durations cannot be formatted: {delta!r}")
    if delta.microseconds:
        raise ValueError(f"durations are whole seconds, got {delta!r}")
    remaining = int(delta.total_seconds())
    if remaining == 0:
        return "0s"
    parts: list[str] = []
    for unit, unit_seconds in UNIT_SECONDS.items():
        count, remaining = divmod(remaining, unit_seconds)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
