"""What one payload render may cost, and the running tally that holds it to that.

A template's cost cannot be bounded by listing the operators that can grow text: `~`, `join`,
`format`, filters, macros and literals built in loops each grow it some other way, and the next
Jinja release adds another. So the bound is on what is *built*. Every value the sandbox sees
produced (`vigil.core.templatelimits` funnels operators, calls, filters, `~`, macro and block
output, `set` on a namespace, slices and the output itself through one check) is weighed
before it is built where the size can be foreseen, and after it is built always:

* **value bytes**: no single string (or container, by the text it would turn into) past
  `Budgets.value_bytes`. This also bounds the transient cost of turning a checked value into
  text (`repr`, JSON escapes: a small constant times the value).
* **built bytes**: all values built by one render together at most `Budgets.built_bytes`, so a
  render that keeps many values of allowed size (a literal list of a thousand slices) still
  holds at most that much memory.
* **steps**: interpreter events of the render and the Python code it calls, counted by a trace
  function, plus one per item the checks walk when they weigh a value. A count, not a clock: a
  template passes or fails the same way at admission and at every fire.
* **seconds**: a wall-clock budget, read only from a monotonic clock the caller injects (the
  core reads no clock of its own); without one, the step budget alone bounds the time.

Past any budget, `TemplateLimitExceeded`. Pure: no I/O; the clock is injected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from types import FrameType
from typing import cast

from jinja2.utils import Namespace


@dataclasses.dataclass(frozen=True)
class Budgets:
    """The bounds of one render. Each is far above what a real payload template needs."""

    #: Largest string any step may build, and the whole output (UTF-8 bytes): twice the rendered
    #: payload's own 32 KiB limit, so no template that can yield a valid payload is refused.
    value_bytes: int = 64 * 1024
    #: Bytes all the values of one render may add up to: bounds its peak memory (16x one value,
    #: 32x the rendered payload's limit). A real template builds a few KiB, a 30 KiB text passed
    #: through four filters 180 KiB. At 4 MiB, three known escapes each held a render at 4 MiB.
    #: Refused now, accepted before: a string grown piece by piece in a `namespace()` (charged
    #: the square of its length) past about 6 KiB of 32-byte pieces; loop output or `join` is linear.
    built_bytes: int = 1024 * 1024
    #: Interpreter steps (trace events): a real payload template takes a few hundred to a few
    #: thousand; 200,000 take about 0.3 s on this project's 2-core machines.
    steps: int = 200_000
    #: Wall-clock seconds (with an injected monotonic clock): a backstop for work the steps
    #: cannot see (C code between two events). Several times what the steps take on a busy
    #: machine, so a template admitted by its steps does not fail at fire time by the clock.
    seconds: float = 2.0


DEFAULT_BUDGETS = Budgets()
#: Steps between two readings of the injected clock: reading costs more than counting.
CLOCK_EVERY = 512


class TemplateLimitExceeded(Exception):
    """A template asked for more than a payload may cost; the message says which budget."""


class RenderBudget:
    """The tally of one render: bytes built, steps taken, time spent; raises past a budget.

    It is also the render's trace function (`sys.settrace`). Once a budget is broken it stays
    broken: every later check raises too, so code that swallows one exception (and with it the
    trace function, which Python removes after it raises) cannot carry the render on.
    """

    def __init__(self, budgets: Budgets, *, monotonic: Callable[[], float] | None = None) -> None:
        self.budgets = budgets
        self.built = 0
        self.steps = 0
        self.broken: str | None = None
        self._monotonic = monotonic
        self._deadline = None if monotonic is None else monotonic() + budgets.seconds

    def fail(self, reason: str) -> TemplateLimitExceeded:
        self.broken = self.broken or reason
        return TemplateLimitExceeded(self.broken)

    def check(self) -> None:
        if self.broken is not None:
            raise TemplateLimitExceeded(self.broken)

    def charge(self, size: int, what: str) -> None:
        """Count a value of `size` bytes about to be (or just) built by `what`."""
        if self.broken is not None:
            raise TemplateLimitExceeded(self.broken)
        if size > self.budgets.value_bytes:
            raise self.fail(f"{what} would be {size} bytes; the limit is {self.budgets.value_bytes}")
        self.built += size
        if self.built > self.budgets.built_bytes:
            raise self.fail(f"the template builds more than {self.budgets.built_bytes} bytes in all")

    def __call__(self, frame: FrameType, event: str, arg: object) -> RenderBudget | None:
        self.steps += 1  # take(1), inline: this runs on every event of the render
        if self.steps > self.budgets.steps or (self._deadline is not None and self.steps % CLOCK_EVERY == 0):
            self.take(0)
        if event == "call" and frame.f_code.co_filename in UNTRACED_FILES:
            return None  # the checks' own lines: counted by what they walk (`shape`), not traced
        return self

    def take(self, steps: int) -> None:
        """Count `steps` more; past the budget (or, every CLOCK_EVERY steps, the deadline), raise."""
        before = self.steps
        self.steps += steps
        if self.steps > self.budgets.steps:
            raise self.fail(f"the template takes more than {self.budgets.steps} steps to render")
        if self._deadline is not None and (not steps or self.steps // CLOCK_EVERY != before // CLOCK_EVERY):
            assert self._monotonic is not None
            if self._monotonic() > self._deadline:
                raise self.fail(f"the template takes more than {self.budgets.seconds} s to render")


#: Source files whose frames the trace function does not follow line by line: the checks. A
#: check's cost is its walk over a value, which `shape` adds to the steps itself; tracing every
#: line of every check would make an ordinary render half again as slow for nothing.
UNTRACED_FILES: set[str] = {__file__}

_current: ContextVar[RenderBudget | None] = ContextVar("vigil_template_render", default=None)


#: The running render's tally, or None outside a render.
running = _current.get


def current() -> RenderBudget:
    """The running render's tally; outside a render (Jinja folding constants while it compiles),
    a fresh one that holds each value to the default bound."""
    return _current.get() or RenderBudget(DEFAULT_BUDGETS)


@contextlib.contextmanager
def rendering(budget: RenderBudget) -> Iterator[RenderBudget]:
    """Run the block as one render: its checks charge `budget`, its steps are traced."""
    token = _current.set(budget)
    previous = sys.gettrace()
    sys.settrace(budget)
    try:
        yield budget
    finally:
        sys.settrace(previous)
        _current.reset(token)


def text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


_FIXED_WEIGHT = 32  # a float, a date, a macro, any other object: its text is short
_SEPARATOR = 2  # ", " or ": " between items when a container is turned into text


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a value stands for as text: its weight (bytes), its nodes and its nesting depth."""

    weight: int
    nodes: int
    depth: int


def shape(value: object, limit: int) -> Shape:
    """The weight of `value` as text (a string's bytes, a number's digits, a container's items
    and separators), walking no further than needed to pass `limit`: a walk costs at most
    `limit` steps, cycles and shared items included (each visit adds at least one)."""
    weight = nodes = depth = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack and weight <= limit:
        item, level = stack.pop()
        nodes += 1
        depth = max(depth, level)
        quotes = 0 if level == 1 else 2  # a string inside a container is quoted
        if isinstance(item, str):
            weight += text_bytes(item) + quotes
        elif isinstance(item, bytes | bytearray):
            weight += len(item) + quotes + 1
        elif isinstance(item, bool) or item is None:
            weight += 5
        elif isinstance(item, int):
            weight += item.bit_length() // 3 + 2  # decimal digits, and a sign
        elif isinstance(item, list | tuple | set | frozenset):
            weight += 2 + len(item) * _SEPARATOR
            if weight <= limit:
                stack.extend((child, level + 1) for child in item)
        elif isinstance(item, Mapping | Namespace):
            items = _namespace_items(item) if isinstance(item, Namespace) else item
            weight += 2 + len(items) * 2 * _SEPARATOR
            if weight <= limit:
                stack.extend((child, level + 1) for pair in items.items() for child in pair)
        else:  # a float, a date, a macro, a loop: text of a few dozen bytes
            weight += _FIXED_WEIGHT
    budget = _current.get()
    if budget is not None:
        budget.take(nodes)  # a walk costs a step per node: a check on a big value is not free
    return Shape(weight, nodes, depth)


def _namespace_items(namespace: Namespace) -> Mapping[str, object]:
    attrs: Mapping[str, object] = object.__getattribute__(namespace, "_Namespace__attrs")
    return attrs


def weight(value: object, limit: int) -> int:
    """`shape(value, limit).weight`, with the common cases first (and no walk)."""
    kind = type(value)
    if kind is str:  # `type(...) is`, the fast path: mypy narrows only on isinstance
        text = cast(str, value)
        return len(text) if text.isascii() else text_bytes(text)
    if kind is int:
        return cast(int, value).bit_length() // 3 + 2
    if value is None or kind is bool or kind is float:
        return _FIXED_WEIGHT
    return shape(value, limit).weight
