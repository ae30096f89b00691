"""Payload templates that once grew past every bound: one catalogue, named, for every test that needs them.

Issue #36: the render's bounds were written operator by operator, and `~`, `join`,
`format`, filters, literals built in loops and macros calling themselves each
escaped them. Each entry is one such escape: the template, and the words the
refusal must contain (most are refused while they render; one is refused before CPython
compiles the code Jinja generates for it). The unit tests render each
(tests/unit/test_template_budgets.py), the integration test puts them on ScheduledJobs
(tests/integration/test_triggering.py), and the benchmark loads a namespace with them
(bench/hostile.py).
"""

from __future__ import annotations

from typing import NamedTuple

from vigil.core.templatebudget import DEFAULT_BUDGETS
from vigil.core.templatelimits import MAX_CODE, MAX_NUMBER

BUILT = DEFAULT_BUDGETS.built_bytes


class Escape(NamedTuple):
    name: str
    template: str
    message: str  # what the refusal says, in part


def escape(template: str, message: str, *, name: str) -> Escape:
    return Escape(name, template, message)


A = "{% set a = 'a' * 30000 %}"
NS = "{% set ns = namespace(l=[]) %}"

ESCAPES = [
    escape(A + "{% set a = a ~ a %}" * 15 + "{{ a | length }}", "a joined text ('~') would be 120000",
           name="30000 doubled 15 times by ~"),
    escape(A + "{% set a = [a, a] | join %}" * 15, "an input of filter join", name="doubling by join"),
    escape(A + "{% set a = ''.join([a, a]) %}" * 15, "an input of a call of join", name="doubling by str.join"),
    escape(A + "{% set a = '{}{}'.format(a, a) %}" * 15, "str.format would be 120004", name="doubling by format"),
    escape(A + "{% set a = '%s%s' % (a, a) %}" * 15, "the result of '%' would be", name="doubling by %"),
    escape(A + "{% set a = '%s%s' | format(a, a) %}" * 15, "filter format would be", name="by the format filter"),
    escape(A + "{% set a = a | replace('a', 'aa') %}" * 15, "filter replace would be 120000", name="by replace"),
    escape(A + NS + "{% for i in range(10000) %}{% set ns.l = ns.l + [a ~ i] %}{% endfor %}",
           "the result of '+' would be", name="a list grown in a loop"),
    escape(A + NS + "{% for i in range(10000) %}{% set ns.l = [ns.l, a ~ i] %}{% endfor %}",
           "namespace attribute l would be", name="a nested literal grown in a loop"),
    # As many literals as the code bound lets through (MAX_CODE): the render budget refuses them.
    escape(A + "{{ [" + ",".join(f"a ~ {i}" for i in range(200)) + "] | length }}",
           f"builds more than {BUILT} bytes in all", name="literals of many distinct values"),
    escape(A + "{{ [" + ",".join(f"a[{i}:]" for i in range(150)) + "] | length }}",
           f"builds more than {BUILT} bytes in all", name="literals of many slices"),
    escape(A + "{{ [" + ",".join(f"a[{i}:]" for i in range(400)) + "] | length }}",
           f"characters of code; the limit is {MAX_CODE}", name="a literal past the code bound"),
    escape(A + "{{ [a, a, a] | string }}", "an input of filter string would be", name="string of a big list"),
    escape("{{ range(10000) | list | string }}", "the result of filter list would be", name="string of a range"),
    escape("{% macro g(s, n) %}{% if n %}{{ g(s ~ s, n - 1) }}{% else %}{{ s | length }}{% endif %}"
           "{% endmacro %}{{ g('a' * 30000, 15) }}", "a joined text ('~')", name="doubling by a recursive macro"),
    escape("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}x{% endmacro %}{{ f(30) }}",
           "steps to render", name="fan-out by a recursive macro"),
    escape("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursion", name="endless macro recursion"),
    escape("{{ ('\\n' * 30000) | indent(9999) }}", "filter indent would be 300009999", name="indent width"),
    escape("{{ ('\\n' * 30000) | indent('x' * 9999) }}", "filter indent would be", name="indent by a string"),
    escape("{{ ('x' * 60000) | center(9999) }}", "filter center would be 69999", name="center width"),
    escape("{{ ('x ' * 30000) | wordwrap(1, wrapstring='y' * 1000) }}", "filter wordwrap would be",
           name="wordwrap width and wrapstring"),
    escape("{{ ('x' * 60000) | truncate(9999, end='y' * 60000) }}", "filter truncate would be 120000",
           name="truncate's end"),
    escape("{{ 'x' | truncate(999999) }}", f"larger than {MAX_NUMBER}", name="truncate length"),
    escape("{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
           "steps to render", name="nested range loops"),
    escape("{{ range(100000) }}", f"larger than {MAX_NUMBER}", name="range past the cap"),
    escape(A + "{% set d = {1: a, 2: a, 3: a} %}{{ d | dictsort }}", "an input of filter dictsort",
           name="dictsort of a big mapping"),
    escape("{{ {}.fromkeys(range(10000), 'x' * 30000) | dictsort }}", "the result of fromkeys",
           name="a mapping built by a call"),
    escape(A + "{{ ['x'] | batch(10000, a) | list }}", "the result of filter list would be",
           name="batch filled with a big value"),
    escape("{{ range(5000) | list | tojson(indent=9999) }}", "filter tojson would be 100047660",
           name="tojson of a big list"),
    escape(NS + "{% for i in range(3000) %}{% set ns.l = [ns.l, 1] %}{% endfor %}{{ ns.l | pprint }}",
           "steps to render", name="pprint of a deep structure"),
    escape("{% set n = 2 ** 64 %}" + "{% set n = n * n %}" * 25, "the result of '*' would be",
           name="an integer squared again and again"),
    escape("{{ ('%(a)9999s' * 6000) % {'a': 1} }}", "the result of '%' would be 60060001",
           name="many widths in one format"),
    escape(A + "{{ ('{0}' * 10000).format(a) }}", "str.format would be 300030000", name="one value, many fields"),
    escape("{{ range(1000) | map('string') | map('center', 9999) | join }}", "builds more than",
           name="filters applied by map"),
    escape("{% filter upper %}{% for i in range(10000) %}{{ 'x' * 30000 }}{% endfor %}{% endfilter %}",
           "builds more than", name="a filter block"),
    escape("{% set b %}{% for i in range(10000) %}{{ 'x' * 30000 }}{% endfor %}{% endset %}{{ b }}",
           "builds more than", name="a set block"),
    escape("{% for x in [[[[[[]]]]]] recursive %}{{ 'x' * 30000 }}{{ loop(x) }}{{ loop(x) }}{% endfor %}",
           "the output of a macro or block would be", name="a recursive loop"),
    escape("{% macro m() %}{% for i in range(100) %}{{ caller() }}{% endfor %}{% endmacro %}"
           "{% call m() %}{{ 'x' * 30000 }}{% endcall %}", "builds more than", name="caller in a loop"),
    escape(A + "{{ ''.join(range(100) | map('string') | map('replace', '', a)) }}",
           "filter replace would be", name="a generator joined"),
    escape("{{ lipsum(10000) }}", "'lipsum' is undefined", name="lipsum is not offered"),
    escape("{{ 'x' | urlize }}", "No filter named 'urlize'", name="urlize is not offered"),
    escape("{% block b %}x{% endblock %}{{ self.b() }}", "block is not available", name="blocks are refused"),
]
