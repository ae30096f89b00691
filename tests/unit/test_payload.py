"""Payload templates: the period is rendered in, and a hostile template costs the operator nothing.

Each attack below once could kill or stall the leader (it renders templates in
its own process, on every fire and resume). Now each is refused as invalid
input naming the field, within the render's bounds — a count of steps and
sizes, so the same template always fails the same way. Ordinary templates
still render.
"""

from __future__ import annotations

import gc
import tracemalloc
from datetime import UTC, datetime
from types import CodeType
from typing import Any

import pytest
from jinja2 import Environment

from tests.hostile_templates import ESCAPES
from vigil.core.payload import PayloadError, _environment, occurrence_variables, render_payload
from vigil.core.templatebudget import DEFAULT_BUDGETS
from vigil.core.templatelimits import MAX_CODE, MAX_NUMBER, MAX_RANGE, MAX_TEXT, MAX_TOKENS

VALUE_BYTES = DEFAULT_BUDGETS.value_bytes

VARIABLES = occurrence_variables(
    period_start=datetime(2026, 7, 31, tzinfo=UTC),
    period_end=datetime(2026, 8, 1, tzinfo=UTC),
    scheduled_for=datetime(2026, 8, 1, 2, tzinfo=UTC),
    execution_id="ex-abc",
    job_name="reconcile",
    job_namespace="billing",
)


def render(template: Any, *, timezone: str = "UTC") -> str:
    return render_payload(payload=None, template=template, variables=VARIABLES, timezone=timezone)


@pytest.mark.parametrize(
    ("template", "rendered"),
    [
        pytest.param("{{ periodStart | date }}", "2026-07-31", id="the period, as a date"),
        pytest.param("{{ scheduledFor | date('%H:%M') }}", "03:00", id="the job's own zone (London, summer)"),
        pytest.param("{{ job.name | upper }}-{{ executionId }}", "RECONCILE-ex-abc", id="filters and names"),
        pytest.param("{% for i in range(3) %}{{ i }},{% endfor %}", "0,1,2,", id="a small loop"),
        pytest.param("{{ ['a', 'b'] | join(',') }}", "a,b", id="join"),
        pytest.param("{{ '%s-%05d' % ('x', 42) }}", "x-00042", id="percent formatting"),
        pytest.param("{{ '{}:{:>4}'.format('k', 7) }}", "k:   7", id="str.format"),
        pytest.param("{{ 'a-b'.replace('-', '_') }}", "a_b", id="replace"),
        pytest.param("{{ 'ab' * 3 }}", "ababab", id="a short repeat"),
        pytest.param("{{ 2 ** 10 }}", "1024", id="a small power"),
    ],
)
def test_ordinary_templates_render(template: str, rendered: str) -> None:
    timezone = "Europe/London" if "H:%M" in template else "UTC"
    assert render({"v": template}, timezone=timezone) == '{"v":"' + rendered + '"}'


ATTACKS = [
    pytest.param('{{ "x" * 2000000000 }}', "the result of '*' would be 2000000000 bytes", id="2 GB string"),
    pytest.param("{{ [1] * 100000000 }}", "the result of '*' would be", id="huge list"),
    pytest.param('{{ (["x" * 30000] * 10000) | join }}', "the result of '*' would be", id="list of big strings"),
    pytest.param(
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        f"larger than {MAX_NUMBER}",
        id="nested range(100000)",
    ),
    pytest.param(
        "{% for a in range(9000) %}{% for b in range(9000) %}{% endfor %}{% endfor %}",
        "steps to render",
        id="nested loops within the range cap",
    ),
    pytest.param("{{ 10 ** 100000000 }}", "exponent", id="a power that never ends"),
    pytest.param('{{ "{:>999999999}".format(1) }}', "str.format would be 1000000015 bytes", id="str.format width"),
    pytest.param('{{ "{0:>{1}}".format("x", 999999999) }}', f"larger than {MAX_NUMBER}", id="nested width"),
    pytest.param('{{ "%999999999s" % 1 }}', "the result of '%' would be 1000000013 bytes", id="percent width"),
    pytest.param('{{ "x" | center(999999999) }}', f"larger than {MAX_NUMBER}", id="center filter"),
    pytest.param('{{ "x" | indent(999999999) }}', f"larger than {MAX_NUMBER}", id="indent filter"),
    pytest.param('{{ ("x" * 30000).replace("", "y" * 30000) }}', "str.replace would be 900060000 bytes", id="replace blow-up"),
    pytest.param('{{ "\t\t".expandtabs(100000) }}', "str.expandtabs is not available", id="expandtabs"),
    pytest.param('{{ "ab".zfill(5) }}', "str.zfill is not available", id="an unlisted str method"),
    pytest.param(
        '{% for i in range(10000) %}{{ "x" * 30000 }}{% endfor %}', f"passes {VALUE_BYTES}", id="output explosion"
    ),
    pytest.param('{% set s = "x" * 40000 %}{{ s + s }}', "the result of '+' would be 80000 bytes", id="concatenation"),
    pytest.param("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recursion", id="endless recursion"),
    pytest.param(f"{{{{ range({MAX_RANGE + 1}) | list }}}}", f"larger than {MAX_NUMBER}", id="range past the cap"),
    pytest.param("{{ job.name }}" * MAX_TEXT, "the template would be", id="a source past the size cap"),
    pytest.param("{{ [" + "1," * MAX_TOKENS + "] }}", f"more than {MAX_TOKENS} tokens", id="a source past the token cap"),
    pytest.param("{{ job.name }}," * 120, f"characters of code; the limit is {MAX_CODE}", id="code past the code cap"),
    # Mistakes rather than attacks: they fail when rendered, and a retry would fail the same way.
    pytest.param("{{ 1 // 0 }}", "ZeroDivisionError", id="division by zero"),
    pytest.param('{{ "a" + 1 }}', "TypeError", id="text plus a number"),
    pytest.param('{{ "{0:d}".format("x") }}', "ValueError", id="a format refusing its argument"),
]


@pytest.mark.parametrize(("template", "message"), ATTACKS)
def test_a_hostile_template_is_invalid_input_naming_the_field(template: str, message: str) -> None:
    with pytest.raises(PayloadError) as caught:
        render({"nested": [{"k": template}]})
    assert str(caught.value).startswith("spec.payloadTemplate.nested[0].k: "), caught.value
    assert message in str(caught.value)


def test_after_a_refused_template_the_next_render_is_unaffected() -> None:
    with pytest.raises(PayloadError):
        render({"k": "{% for a in range(9000) %}{% for b in range(9000) %}{% endfor %}{% endfor %}"})
    assert render({"k": "{{ periodEnd | date }}"}) == '{"k":"2026-08-01"}'


# Compiling: CPython's compile() of the code Jinja generates passes through 80 to 140 bytes per
# character of that code for a moment, so the code is bounded (MAX_CODE) before compile() sees it.

#: A large but ordinary template: one report query over twenty-five tables, 76 substitutions.
REPORT = "\n".join(
    f"SELECT '{{{{ job.name }}}}' AS job, count(*) FROM ledger_{i} "
    f"WHERE day >= '{{{{ periodStart | date }}}}' AND day < '{{{{ periodEnd | date }}}}' UNION ALL"
    for i in range(25)
) + "\nSELECT '{{ executionId }}', 0"


def test_a_large_ordinary_template_compiles_and_renders() -> None:
    assert len(_environment("UTC").compile(REPORT, raw=True)) <= MAX_CODE
    rendered = render({"sql": REPORT})
    assert "FROM ledger_24 WHERE day >= '2026-07-31' AND day < '2026-08-01'" in rendered
    assert rendered.endswith("SELECT 'ex-abc', 0\"}")


def test_code_past_the_bound_is_refused_naming_the_field_before_python_compiles_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four times the report's expressions in one string (under the token cap): refused with the
    field named, and CPython's compile() is never called; the same split across strings renders."""
    compiled: list[int] = []
    compile_ = Environment._compile

    def recording(env: Environment, source: str, filename: str) -> CodeType:
        compiled.append(len(source))
        return compile_(env, source, filename)

    monkeypatch.setattr(Environment, "_compile", recording)
    big = "\n".join([REPORT] * 4)
    with pytest.raises(PayloadError) as caught:
        render({"sql": big})
    assert str(caught.value).startswith("spec.payloadTemplate.sql: the template compiles to "), caught.value
    assert f"characters of code; the limit is {MAX_CODE}" in str(caught.value)
    assert "split it across several strings" in str(caught.value)
    assert all(size <= MAX_CODE for size in compiled), "compile() was given code past the bound"
    assert "ledger_24" in render({f"sql{n}": REPORT for n in range(4)})


def test_compiling_the_densest_code_under_the_bound_passes_through_under_3_mib() -> None:
    """A list literal of 200 expressions, as close to the bound as the catalogue's escape gets."""
    dense = next(e.template for e in ESCAPES if e.name == "literals of many distinct values")
    source = _environment("UTC").compile(dense, raw=True)
    assert MAX_CODE * 0.9 < len(source) <= MAX_CODE
    gc.collect()
    tracemalloc.start()
    try:
        compile(source, "<template>", "exec")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * 1024 * 1024, f"compiling {len(source)} characters passed through {peak} bytes"
