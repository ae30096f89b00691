"""Bounds on what one payload template may cost, enforced while it renders.

Jinja2's sandbox keeps a template away from Python's internals, but not from
the machine: ``{{ "x" * 2000000000 }}`` asks for 2 GB, ``10 ** 10 ** 10`` never
ends, and two nested ``range(100000)`` loops run for hours. The operator renders
templates in its own process, on every fire and every resume, so one such job
would kill or stall firing for every tenant. Each render here is bounded:

* **work**: a budget of interpreter steps (line events of the compiled template
  and the runtime code it calls), counted by a trace function while it renders.
  A count, not a clock: the same template always fails or passes. Compiling is
  left untraced: it is linear in the source, which is at most `MAX_TEXT` long.
* **sizes**: ``*``, ``+``, ``%`` and ``**`` are intercepted and refused when
  their result would pass `MAX_TEXT` (or an exponent is out of bounds);
  numeric arguments to filters and calls are capped at `MAX_NUMBER`; only a
  list of harmless ``str`` methods may be called; the output is assembled piece
  by piece and cut off at `MAX_TEXT`.
* **ranges**: ``range`` yields at most `MAX_RANGE` numbers.

Anything over a bound raises `TemplateLimitExceeded`, which the payload
renderer reports as invalid input naming the field. Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from jinja2 import Template
from jinja2.sandbox import SandboxedEnvironment

#: Longest text a template may build at any step, and its whole output: the rendered payload's
#: own limit (it travels in one environment variable), so no legitimate template is refused.
MAX_TEXT = 32 * 1024
#: Largest number a filter, call or range may be given (widths, counts, repeats).
MAX_NUMBER = 10_000
#: Most numbers one range yields.
MAX_RANGE = 10_000
#: Interpreter steps one render may take: a real payload template takes a few hundred.
MAX_STEPS = 200_000
#: Largest exponent `**` may use, and the largest base it may raise to one above 64.
MAX_EXPONENT = 64

#: The str methods a template may call; the rest (expandtabs, zfill, center, ...) can be
#: asked to build huge strings from small inputs and are not worth bounding one by one.
SAFE_STR_METHODS = frozenset({
    "capitalize", "casefold", "count", "endswith", "find", "isalnum", "isalpha", "isdigit",
    "islower", "isspace", "isupper", "join", "lower", "lstrip", "partition", "removeprefix",
    "removesuffix", "replace", "rfind", "rpartition", "rsplit", "rstrip", "split", "splitlines",
    "startswith", "strip", "swapcase", "title", "upper", "format", "format_map",
})  # fmt: skip

#: A run of digits as long as MAX_NUMBER's or longer: in a format string, a width past the cap.
_LARGE_NUMBER = re.compile(rf"\d{{{len(str(MAX_NUMBER))},}}")


class TemplateLimitExceeded(Exception):
    """A template asked for more than a payload may cost; the message says which bound."""


def _weight(value: object, depth: int = 0) -> int:
    """How much text `value` stands for: a string's length, a sequence's items and their weights."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, range):
        return len(value)
    if isinstance(value, list | tuple | set | frozenset) and depth < 4:
        return len(value) + sum(_weight(item, depth + 1) for item in value)
    if isinstance(value, dict) and depth < 4:
        return len(value) + sum(_weight(k, depth + 1) + _weight(v, depth + 1) for k, v in value.items())
    return 1


def _check_length(length: int, what: str) -> None:
    if length > MAX_TEXT:
        raise TemplateLimitExceeded(f"{what} would be {length} long; the limit is {MAX_TEXT}")


def _checked(value: Any, what: str) -> Any:
    _check_length(_weight(value), what)
    return value


def _check_number(value: object, what: str) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
        raise TemplateLimitExceeded(f"{what}: {value} is larger than {MAX_NUMBER}")


def _check_format(text: object, what: str) -> None:
    """A format string (for `%` or str.format) must not ask for a width or precision past the cap."""
    if isinstance(text, str) and _LARGE_NUMBER.search(text):
        raise TemplateLimitExceeded(f"{what}: a format width or precision above {MAX_NUMBER}")


def _check_arguments(args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> None:
    for value in (*args, *kwargs.values()):
        _check_number(value, what)
        _checked(value, what)


def _repeat(left: Any, right: Any) -> Any:
    sequence, count = (right, left) if isinstance(left, int) else (left, right)
    if isinstance(count, int) and not isinstance(sequence, int | float):
        _check_length(max(0, count) * _weight(sequence), "a repeated sequence")
    return left * right


def _power(left: Any, right: Any) -> Any:
    if isinstance(right, int | float) and right > MAX_EXPONENT:
        raise TemplateLimitExceeded(f"an exponent of {right}; the limit is {MAX_EXPONENT}")
    if isinstance(left, int) and abs(left) > 2**64:
        raise TemplateLimitExceeded("a power of a number above 2**64")
    return left**right


def _replace(text: str, old: str, new: str, count: int = -1) -> str:
    found = text.count(old) if old else len(text) + 1
    if count >= 0:
        found = min(found, count)
    _check_length(len(text) + found * max(0, len(new) - len(old)), "a replaced text")
    return text.replace(old, new, count)


def _join(separator: str, items: Any) -> str:
    items = list(items)
    _check_length(_weight(items) + len(separator) * len(items), "a joined text")
    return separator.join(items)


def bounded_range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise TemplateLimitExceeded(f"a range of {len(numbers)} numbers; the limit is {MAX_RANGE}")
    return numbers


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _check_arguments(args[1:] if args else args, kwargs, f"filter {name}")
        if name in ("join", "format") and args:
            _check_length(len(args) + sum(_weight(a) for a in args), f"the input of filter {name}")
        if name == "format" and args:
            _check_format(args[0], "filter format")
        return _checked(function(*args, **kwargs), f"the result of filter {name}")

    for attribute in ("jinja_pass_arg",):  # keep context/environment passing markers
        if hasattr(function, attribute):
            setattr(bounded, attribute, getattr(function, attribute))
    return bounded


class BoundedSandbox(SandboxedEnvironment):
    """Jinja2's sandbox with every cost a template can run up bounded (see the module doc)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals["range"] = bounded_range
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}

    def add_filter(self, name: str, function: Callable[..., Any]) -> None:
        self.filters[name] = _bounded_filter(name, function)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            return _checked(_repeat(left, right), "a product")
        if operator == "**":
            return _power(left, right)
        if operator == "%":
            _check_format(left, "'%' formatting")
            _check_arguments(right if isinstance(right, tuple) else (right,), {}, "'%' formatting")
        else:  # "+"
            _check_length(_weight(left) + _weight(right), "a sum")
        return _checked(super().call_binop(context, operator, left, right), f"the result of '{operator}'")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """str.format and format_map are wrapped by the sandbox when looked up: bound them there."""
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            _check_format(value.__self__, "str.format")
        return wrapped

    # Jinja's own signature: dunder names so they cannot clash with the call's keyword arguments.
    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "") or "a function"
        _check_arguments(args, kwargs, f"a call of {name}")
        if isinstance(owner, str):
            if name not in SAFE_STR_METHODS:
                raise TemplateLimitExceeded(f"str.{name} is not available in payload templates")
            if name == "replace":
                return _replace(owner, *args, **kwargs)
            if name == "join":
                return _join(owner, *args, **kwargs)
        return _checked(super().call(__context, __obj, *args, **kwargs), f"the result of {name}")


class _StepBudget:
    """A trace function that counts interpreter steps and stops the render past the budget."""

    def __init__(self, steps: int) -> None:
        self.left = steps

    def __call__(self, frame: FrameType, event: str, arg: object) -> _StepBudget:
        self.left -= 1
        if self.left < 0:
            raise TemplateLimitExceeded(f"the template takes more than {MAX_STEPS} steps to render")
        return self


def render_bounded(environment: BoundedSandbox, text: str, variables: dict[str, Any]) -> str:
    """Compile and render `text` within every bound; raises TemplateLimitExceeded past one."""
    return render_compiled(compile_bounded(environment, text), variables)


def compile_bounded(environment: BoundedSandbox, text: str) -> Template:
    """Compile `text` (at most MAX_TEXT long). Compiling is linear in the source: untraced.

    A compiled template holds no render state, so callers may keep it and render it many times.
    """
    _check_length(len(text), "the template")
    return environment.from_string(text)


def render_compiled(template: Template, variables: dict[str, Any]) -> str:
    """Render a template from `compile_bounded` within every bound."""
    previous = sys.gettrace()
    sys.settrace(_StepBudget(MAX_STEPS))
    try:
        return _join_bounded(template.generate(**variables))
    finally:
        sys.settrace(previous)


def _join_bounded(pieces: Iterator[str]) -> str:
    out: list[str] = []
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > MAX_TEXT:
            raise TemplateLimitExceeded(f"the rendered text passes {MAX_TEXT} characters")
        out.append(piece)
    return "".join(out)
