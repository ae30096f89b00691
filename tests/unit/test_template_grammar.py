"""Payload templates made by hypothesis from a grammar of Jinja constructs end inside the budgets.

The named escapes (tests/unit/test_template_budgets.py) are the ones we know of; this
property is for the ones we do not. Templates are built from loops, `set` (plain
and on a namespace, so values carry across iterations), `~`, `join`, `format`,
`%`, filters that pad, wrap, replace, batch and serialise, literals, slices,
repeats and a macro that calls itself twice. Each render must end with a string
within the value bound, or with a clear error (a budget broken, or the template's
own mistake) — and either way inside the budgets: the steps, the bytes built,
its peak memory (tracemalloc) and its time. The budgets are small here (4 KiB a
value), so examples are fast; nothing in the bounds depends on their scale.
"""

from __future__ import annotations

import time
import tracemalloc

from hypothesis import event, given, settings
from hypothesis import strategies as st
from jinja2 import StrictUndefined, TemplateError

from tests.unit.test_template_budgets import VARIABLES
from vigil.core.payload import TEMPLATE_MISTAKES
from vigil.core.templatebudget import Budgets, RenderBudget, TemplateLimitExceeded, text_bytes
from vigil.core.templatelimits import BoundedSandbox, compile_bounded, render_within

SMALL = Budgets(value_bytes=4096, built_bytes=64 * 1024, steps=20_000, seconds=0.5)
#: A render's peak: everything it may build, one value's transient text (repr, JSON escapes,
#: 16x), and the interpreter's own frames when a macro recurses to Python's recursion limit.
PEAK = SMALL.built_bytes + 16 * SMALL.value_bytes + 2 * 1024 * 1024
#: Slack over the wall-clock budget for a machine shared with others: the clock is read every
#: few hundred steps, and between two readings runs only C code on values within the bound.
SLACK_SECONDS = 2.0
ENVIRONMENT = BoundedSandbox(undefined=StrictUndefined, autoescape=False)

PRELUDE = (
    "{% macro grow(s, n) %}{% if n > 0 %}{{ grow(s ~ s, n - 1) }}{{ grow(s, n - 1) }}"
    "{% else %}{{ s }}{% endif %}{% endmacro %}"
    "{% set a = 'a' %}{% set b = 'b' %}{% set ns = namespace(v='') %}"
)
NUMBERS = st.sampled_from([0, 1, 2, 3, 15, 100, 1000, 9999])
ATOMS = st.sampled_from(["a", "b", "ns.v", "'x'", "('xy' * 40)", "executionId", "job.name", "7", "(periodStart | string)"])


def _pairs(inner: st.SearchStrategy[str], shape: str) -> st.SearchStrategy[str]:
    return st.tuples(inner, inner).map(lambda t: shape.format(*t))


def _with_number(inner: st.SearchStrategy[str], shape: str) -> st.SearchStrategy[str]:
    return st.tuples(inner, NUMBERS).map(lambda t: shape.format(*t))


def _grown(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        _pairs(inner, "({} ~ {})"),
        _pairs(inner, "([{}, {}] | join)"),
        _pairs(inner, "''.join([{} | string, {} | string])"),
        _pairs(inner, "('{{}}{{}}'.format({}, {}))"),
        _pairs(inner, "('%s%s' % ({}, {}))"),
        _pairs(inner, "('%s-%s' | format({}, {}))"),
        _pairs(inner, "({} + {})"),
        _pairs(inner, "[{}, {}, {}]".replace(", {}]", "]")),
        _pairs(inner, "({{'k': {}, 'j': {}}} | dictsort)"),
        inner.map("({} | string | replace('x', 'xx'))".format),
        inner.map("({} | string)".format),
        inner.map("({} | tojson)".format),
        inner.map("({} | pprint)".format),
        inner.map("({} | string)[1:]".format),
        inner.map("({} | string | upper)".format),
        _with_number(inner, "(({} | string) * {})"),
        _with_number(inner, "({} | string | indent({}))"),
        _with_number(inner, "({} | string | center({}))"),
        _with_number(inner, "({} | string | wordwrap({}))"),
        _with_number(inner, "({} | string | truncate({}))"),
        _with_number(inner, "([{}] | batch({}, 'z') | list)"),
        _with_number(inner, "grow({} | string, {})"),
        NUMBERS.map("(range({}) | list)".format),
        NUMBERS.map("(range({}) | map('string') | join(','))".format),
    )


EXPRESSIONS = st.recursive(ATOMS, _grown, max_leaves=8)


def _loop(numbers_and_body: tuple[int, list[str]]) -> str:
    count, body = numbers_and_body
    return f"{{% for i in range({count}) %}}{''.join(body)}{{% endfor %}}"


STATEMENTS = st.recursive(
    st.one_of(
        EXPRESSIONS.map("{{{{ {} }}}}".format),
        st.tuples(st.sampled_from(["a", "b"]), EXPRESSIONS).map(lambda t: f"{{% set {t[0]} = {t[1]} %}}"),
        EXPRESSIONS.map("{{% set ns.v = {} %}}".format),
        EXPRESSIONS.map("{{% set ns.v = ns.v ~ {} %}}".format),
    ),
    lambda inner: st.tuples(NUMBERS, st.lists(inner, min_size=1, max_size=3)).map(_loop),
    max_leaves=6,
)
TEMPLATES = st.lists(STATEMENTS, min_size=1, max_size=5).map(lambda body: PRELUDE + "".join(body))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(TEMPLATES)
def test_every_template_of_the_grammar_ends_inside_the_budgets(text: str) -> None:
    template = compile_bounded(ENVIRONMENT, text)
    budget = RenderBudget(SMALL, monotonic=time.monotonic)
    started = time.monotonic()
    tracemalloc.start()
    try:
        out = render_within(template, dict(VARIABLES), budget)
        assert text_bytes(out) <= SMALL.value_bytes
        event("rendered")
    except TemplateLimitExceeded as err:
        event(f"refused: {str(err).split(' would be ')[0].split(' takes ')[-1][:40]}")
    except (TemplateError, RecursionError, *TEMPLATE_MISTAKES) as err:
        event(f"the template's own mistake: {type(err).__name__}")  # {{ 'a' + 7 }}
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert budget.steps <= SMALL.steps + SMALL.value_bytes + 1  # the last walk counts in full
    assert budget.built <= SMALL.built_bytes + SMALL.value_bytes
    assert peak <= PEAK, f"the render held {peak} bytes"
    assert time.monotonic() - started <= SMALL.seconds + SLACK_SECONDS
