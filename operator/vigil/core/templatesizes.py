"""How big a value an operation would build, foreseen from its inputs before it runs.

The render's tally (`vigil.core.templatebudget`) weighs every value after it is built; that
bounds what a render keeps, but not the moment of building: `"x" * 2000000000` must be refused
before Python allocates 2 GB. Most operations build at most a small constant times their inputs'
weight, which are already bounded, so the inputs' weight is their estimate. The few that can
build far more than they are given (a repeat, padding to a width, a replacement per match, a
format field per specifier, an indent per line) have their own estimate here, an upper bound
computed from the inputs, and numbers given to filters and calls (widths, counts) are capped.
Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vigil.core.templatebudget import (
    UNTRACED_FILES,
    TemplateLimitExceeded,
    shape,
    text_bytes,
    weight,
)

#: Largest number a filter or call may be given (widths, counts, repeats, range bounds).
MAX_NUMBER = 10_000
#: Largest exponent `**` may use, and the largest base it may raise to one above 64.
MAX_EXPONENT = 64

#: A `%` specifier (its width and precision) and the start of a `{}` field up to its end.
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*)(?:\.(\d*))?")
_BRACE_FIELD = re.compile(r"\{[^}]*")
_DIGITS = re.compile(r"\d+")

Estimate = Callable[[Sequence[Any], Mapping[str, Any], int], int]
UNTRACED_FILES.add(__file__)


def check_number(value: object, what: str) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
        raise TemplateLimitExceeded(f"{what}: {value} is larger than {MAX_NUMBER}")


def inputs_weight(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    return sum(weight(value, limit) for value in (*args, *kwargs.values()))


def format_size(fmt: object, values: Sequence[Any], limit: int) -> int:
    """At most what `fmt % values` or `fmt.format(*values)` builds: the format's own text, each
    specifier filled with the widest value, and every width and precision it names in full."""
    if not isinstance(fmt, str):
        return weight(fmt, limit) + inputs_weight(values, {}, limit)
    fields = fmt.count("%") + fmt.count("{")
    widest = max((weight(value, limit) for value in values), default=0)
    widths = sum(int(n or 0) for spec in _PERCENT_SPEC.findall(fmt) for n in spec)
    widths += sum(int(n) for field in _BRACE_FIELD.findall(fmt) for n in _DIGITS.findall(field))
    nested = sum(abs(v) for v in values if isinstance(v, int) and not isinstance(v, bool))  # {:{}}
    return text_bytes(fmt) + fields * widest + widths + min(nested, fields * MAX_NUMBER)


def percent_values(right: Any) -> Sequence[Any]:
    if isinstance(right, tuple):
        return right
    if isinstance(right, Mapping):
        return list(right.values())
    return (right,)


def repeat_size(left: Any, right: Any, limit: int) -> int:
    """`left * right`: a sequence repeated (its weight times the count) or a product of numbers
    (its digits: the sum of both sides')."""
    if isinstance(left, int) and isinstance(right, int):
        return weight(left, limit) + weight(right, limit)
    sequence, count = (right, left) if isinstance(left, int) else (left, right)
    if isinstance(count, int) and not isinstance(sequence, int | float):
        return max(0, count) * weight(sequence, limit)
    return weight(left, limit) + weight(right, limit)


def check_power(left: Any, right: Any) -> None:
    if isinstance(right, int | float) and right > MAX_EXPONENT:
        raise TemplateLimitExceeded(f"an exponent of {right}; the limit is {MAX_EXPONENT}")
    if isinstance(left, int) and abs(left) > 2**64:
        raise TemplateLimitExceeded("a power of a number above 2**64")


def replace_size(text: Any, old: Any, new: Any, count: Any = -1) -> int:
    if not (isinstance(text, str) and isinstance(old, str) and isinstance(new, str)):
        return 0
    found = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return text_bytes(text) + found * max(0, text_bytes(new) - text_bytes(old))


def join_size(separator: Any, items: Sequence[Any], limit: int) -> int:
    return inputs_weight(items, {}, limit) + weight(separator, limit) * len(items)


def _arg(args: Sequence[Any], kwargs: Mapping[str, Any], index: int, name: str, default: Any) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _lines(text: Any) -> int:
    return text.count("\n") + 1 if isinstance(text, str) else 1


def _center(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    width = _arg(args, kwargs, 1, "width", 80)
    return weight(args[0], limit) + (width if isinstance(width, int) else 0)


def _indent(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    width = _arg(args, kwargs, 1, "width", 4)
    pad = width if isinstance(width, int) else weight(width, limit)
    return weight(args[0], limit) + _lines(args[0]) * max(0, pad)


def _wordwrap(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    text = args[0]
    width = _arg(args, kwargs, 1, "width", 79)
    wrap = _arg(args, kwargs, 3, "wrapstring", None) or "\n"
    size = weight(text, limit)
    lines = _lines(text) + size // max(1, width if isinstance(width, int) else 1)
    return size + lines * weight(wrap, limit)


def _replace(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    count = _arg(args, kwargs, 3, "count", None)
    return replace_size(args[0], _arg(args, kwargs, 1, "old", ""), _arg(args, kwargs, 2, "new", ""),
                        -1 if count is None else count)  # fmt: skip


def _format(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    return format_size(args[0], [*args[1:], *kwargs.values()], limit)


def _join(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    items = args[0]
    sequence = items if isinstance(items, Sequence) else [items]
    return join_size(_arg(args, kwargs, 1, "d", ""), sequence, limit)


def _tojson(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    indent = _arg(args, kwargs, 1, "indent", None)
    of = shape(args[0], limit)
    return of.weight + (of.nodes * of.depth * indent if isinstance(indent, int) else 0)


def _pprint(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    of = shape(args[0], limit)
    return of.weight + of.nodes * of.depth  # pprint indents each nested line by its depth


def _truncate(args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    return weight(args[0], limit) + weight(_arg(args, kwargs, 3, "end", "..."), limit)


#: The filters that can build more than they are given, and an upper bound of what they build.
FILTER_SIZES: dict[str, Estimate] = {
    "center": _center, "indent": _indent, "wordwrap": _wordwrap, "replace": _replace,
    "format": _format, "join": _join, "tojson": _tojson, "pprint": _pprint, "truncate": _truncate,
}  # fmt: skip


def str_method_size(owner: str, name: str, args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> int:
    """At most what `owner.name(*args, **kwargs)` builds, for the str methods a template may call."""
    if name == "replace":
        return replace_size(owner, *args[:3])
    if name == "join":
        return join_size(owner, args[0] if args and isinstance(args[0], Sequence) else args, limit)
    if name in ("format", "format_map"):
        values = [*args, *kwargs.values()]
        if name == "format_map" and args and isinstance(args[0], Mapping):
            values = list(args[0].values())
        return format_size(owner, values, limit)
    return text_bytes(owner) + inputs_weight(args, kwargs, limit)
