"""Compiled payload templates, kept within a bound on what they hold, and compiled one at a time.

A trigger renders one template for many occurrences (100,000 jobs may share one), and compiling
costs far more than rendering, so compiled templates are kept. But a compiled template holds
about 40 bytes per character of its source (0.7 MiB for a 17 KiB one), so a cache bounded by
count alone (1,024 entries) would let a tenant who edits templates of the CRD's 32 KiB fill it
with 1.4 GiB. This one is bounded by the source it holds, too. And compiling passes through the
parser's and Python's compiler's own objects for a moment (some 40 MiB for a 32 KiB template
before the generated code was bounded; at most about 2 MiB now, `templatelimits.MAX_CODE`), so
compiles are made one at a time: four reconcile workers compiling at once would make four such
peaks. Compiling holds the GIL throughout, so one at a time costs no throughput.

Pure: no clock, no I/O (a lock is neither).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from jinja2 import Template

#: Compiled templates kept at most, and the most source (characters) they may have in all: about
#: 20 MiB of compiled code, and room for every template of an ordinary cluster many times over.
MAX_ENTRIES = 1024
MAX_SOURCE = 512 * 1024


class CompiledTemplates:
    """A least-recently-used cache of compiled templates by (zone, text), bounded by count and by
    source; `compile` is called with the cache's lock held (one compile at a time)."""

    def __init__(self, compile: Callable[[str, str], Template], *, entries: int = MAX_ENTRIES,
                 source: int = MAX_SOURCE) -> None:  # fmt: skip
        self._compile = compile
        self._entries = entries
        self._source = source
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, str], Template] = OrderedDict()
        self._held = 0  # characters of source kept

    def get(self, timezone: str, text: str) -> Template:
        key = (timezone, text)
        with self._lock:
            template = self._kept.get(key)
            if template is not None:
                self._kept.move_to_end(key)
                return template
            template = self._compile(timezone, text)  # raises for a template that does not compile
            self._kept[key] = template
            self._held += len(text)
            while len(self._kept) > self._entries or (self._held > self._source and len(self._kept) > 1):
                (_, dropped), _ = self._kept.popitem(last=False)
                self._held -= len(dropped)
            return template

    def forget(self, timezone: str, text: str) -> None:
        """Drop (zone, text): a template whose render broke its budgets is not worth keeping. Its
        job is Invalid and fails again at each fire, so keeping it would only let a tenant who
        edits such templates fill the cache (and the operator's memory) with them."""
        with self._lock:
            if self._kept.pop((timezone, text), None) is not None:
                self._held -= len(text)

    def held(self) -> tuple[int, int]:
        """(templates, characters of source) kept now."""
        with self._lock:
            return len(self._kept), self._held
