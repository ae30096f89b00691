"""Payload templates: each known way to grow a value past the budgets, by name.

Issue #36: `{% set a = 'a' * 30000 %}` and fifteen `{% set a = a ~ a %}` once took
the operator to 1.5 GiB, because the bounds were written operator by operator and
`~`, `join`, `format`, filters and literals built in loops were not on the list.
Each row below is one such escape. Every one must be refused as invalid input
naming the field, within the render's budgets: the render's own memory (measured
with tracemalloc, compile excluded) stays a few MiB, whatever the template asks for.
"""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.hostile_templates import ESCAPES, NS, Escape
from vigil.core.payload import (
    COMPILED,
    PayloadError,
    _compiled,
    occurrence_variables,
    render_template_string,
)
from vigil.core.recurring import RecurringJob
from vigil.core.templatebudget import DEFAULT_BUDGETS, Budgets, RenderBudget, TemplateLimitExceeded
from vigil.core.templatecache import CompiledTemplates
from vigil.core.templatelimits import render_within

VARIABLES = occurrence_variables(
    period_start=datetime(2026, 7, 31, tzinfo=UTC),
    period_end=datetime(2026, 8, 1, tzinfo=UTC),
    scheduled_for=datetime(2026, 8, 1, 2, tzinfo=UTC),
    execution_id="ex-abc",
    job_name="reconcile",
    job_namespace="billing",
)
LIMIT = DEFAULT_BUDGETS.value_bytes
#: What one refused render may hold at its peak: the bytes it may build in all, plus the
#: transient text of one value (a repr or JSON escapes of a value within the bound).
PEAK = DEFAULT_BUDGETS.built_bytes + 16 * LIMIT


@pytest.mark.parametrize(("template", "message"), [pytest.param(e.template, e.message, id=e.name) for e in ESCAPES])
def test_each_escape_is_refused_within_the_budgets(template: str, message: str) -> None:
    with contextlib.suppress(Exception):  # a refusal at compile is reported by the render below
        _compiled("UTC", template)  # compiling is bounded by the source's length: not measured here
    tracemalloc.start()
    try:
        with pytest.raises(PayloadError) as caught:
            render_template_string(template, VARIABLES, timezone="UTC", field="spec.payloadTemplate.k")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value).startswith("spec.payloadTemplate.k: "), caught.value
    assert message in str(caught.value)
    assert peak < PEAK, f"the render held {peak} bytes at its peak"


@pytest.mark.parametrize(
    ("template", "rendered"),
    [
        pytest.param("{% set a = 'ab' * 10 %}{% set a = a ~ a %}{{ a | length }}", "40", id="a small doubling"),
        pytest.param("{{ executionId[3:] }}-{{ job.name[:3] | upper }}", "abc-REC", id="slices"),
        pytest.param("{{ 'x' | center(9999) | length }}", "9999", id="a wide center within the bound"),
        pytest.param(NS + "{% for i in range(3) %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l | join(',') }}",
                     "0,1,2", id="a namespace list"),
        pytest.param("{{ {'b': 1, 'a': 2} | dictsort | tojson }}", '[["a", 2], ["b", 1]]', id="dictsort, tojson"),
        pytest.param("{{ range(5) | batch(2) | list }}", "[[0, 1], [2, 3], [4]]", id="batch"),
        pytest.param("{% macro m(n) %}{% if n %}{{ n }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(3) }}", "321",
                     id="a recursive macro"),
    ],
)
def test_ordinary_templates_still_render(template: str, rendered: str) -> None:
    assert render_template_string(template, VARIABLES, timezone="UTC", field="k") == rendered


def test_a_render_just_under_the_value_bound_passes_and_one_over_fails() -> None:
    at = f"{{{{ 'a' * {LIMIT} }}}}"
    assert len(render_template_string(at, VARIABLES, timezone="UTC", field="k")) == LIMIT
    with pytest.raises(PayloadError, match=f"would be {LIMIT + 1} bytes"):
        render_template_string(f"{{{{ 'a' * {LIMIT + 1} }}}}", VARIABLES, timezone="UTC", field="k")


def test_the_tally_counts_what_a_render_built_and_the_steps_it_took() -> None:
    budget = RenderBudget(Budgets())
    out = render_within(_compiled("UTC", "{% set a = 'x' * 1000 %}{{ a ~ a }}"), dict(VARIABLES), budget)
    assert len(out) == 2000
    assert budget.built >= 1000 + 2000 + 2000  # the repeat, the join, the output piece
    assert 0 < budget.steps < 1000


def test_the_wall_clock_budget_reads_only_the_injected_clock() -> None:
    """A clock that jumps a minute per reading: the render stops at its first reading."""
    readings = iter(range(0, 10**6, 60))
    budget = RenderBudget(Budgets(steps=10**6), monotonic=lambda: float(next(readings)))
    loop = "{% for i in range(5000) %}{{ '' }}{% endfor %}"
    with pytest.raises(TemplateLimitExceeded, match=r"more than 2\.0 s to render"):
        render_within(_compiled("UTC", loop), dict(VARIABLES), budget)


def test_a_budget_once_broken_stays_broken() -> None:
    """The trace function is gone after it raises; code that swallowed that error cannot render on."""
    budget = RenderBudget(Budgets(steps=1))
    budget(None, "line", None)  # type: ignore[arg-type]  # a trace call with no frame: the budget reads none
    with pytest.raises(TemplateLimitExceeded, match="steps"):
        budget(None, "line", None)  # type: ignore[arg-type]  # as above
    with pytest.raises(TemplateLimitExceeded, match="steps"):
        budget.charge(1, "anything")


@pytest.mark.parametrize("escape", [pytest.param(e, id=e.name) for e in ESCAPES[:8]])
def test_a_recurring_queue_job_with_a_hostile_template_is_refused_naming_the_field(escape: Escape) -> None:
    """`POST /v1/jobs` builds a RecurringJob; its error names the field, and the API answers 422 with
    it (tests/queue/test_api.py, "hostile template")."""
    with pytest.raises(ValueError, match=r"^payload_template\.t: ") as refused:
        RecurringJob(queue="team-a/reports", task="report", cron="0 * * * *", payload_template={"t": escape.template})
    assert escape.message in str(refused.value)


def test_the_compiled_cache_is_bounded_by_the_source_it_holds() -> None:
    """A compiled template holds ~40 bytes per source character: a cache bounded by count alone
    (1,024 entries of 32 KiB) would let one tenant's edits fill 1.4 GiB."""
    compiled: list[str] = []

    def compile_(timezone: str, text: str) -> Any:
        compiled.append(text)
        return object()

    cache = CompiledTemplates(compile_, entries=100, source=10_000)
    for n in range(50):
        cache.get("UTC", f"{{# {n} #}}" + "x" * 1000)
    assert cache.held()[1] <= 10_000 + 1010
    cache.get("UTC", "{{ a }}")
    cache.get("UTC", "{{ a }}")
    assert compiled.count("{{ a }}") == 1, "a hit compiles nothing"


def test_a_template_whose_render_broke_its_budgets_is_not_kept() -> None:
    """Its job is Invalid and fails at each fire: keeping it compiled would only let a tenant who
    edits such templates fill the cache, and the operator's memory, with them (bench hostile)."""
    hostile = "{# not kept #}" + ESCAPES[0].template
    before = COMPILED.held()
    with pytest.raises(PayloadError):
        render_template_string(hostile, VARIABLES, timezone="UTC", field="t")
    assert COMPILED.held() == before
    render_template_string("{# kept #}{{ job.name }}", VARIABLES, timezone="UTC", field="t")
    assert COMPILED.held()[0] == before[0] + 1


@pytest.mark.parametrize("escape", [e for e in ESCAPES if e.name in ("a set block", "a filter block", "literals of many slices")],
                         ids=lambda e: e.name)  # fmt: skip
def test_a_refused_render_lets_go_of_what_it_built_without_the_cycle_collector(escape: Escape) -> None:
    """Jinja's rewritten traceback holds the exception in its frames: a refused render's values
    (megabytes, up to its budgets) stayed in a reference cycle until the collector's oldest
    generation ran, seldom in the operator (bench hostile: its peak RSS 1.29x the reference)."""
    with contextlib.suppress(Exception):
        _compiled("UTC", escape.template)  # the compile's own objects are not what is measured
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        for _ in range(3):
            with pytest.raises(PayloadError):
                render_template_string(escape.template, VARIABLES, timezone="UTC", field="t")
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert held < LIMIT * 8, f"{held} bytes still held after three refused renders"
