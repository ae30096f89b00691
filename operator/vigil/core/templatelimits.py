"""Jinja2's sandbox, with every value a payload template builds held to the render's budgets.

Jinja2's sandbox keeps a template away from Python's internals, but not from the machine:
``{% set a = 'a' * 30000 %}`` and fifteen ``{% set a = a ~ a %}`` ask for 1 GB, two nested
loops run for hours. The operator renders templates in its own process, at admission and on
every fire, so one such job would kill or stall firing for every tenant.

Limits written operator by operator always miss one (`~`, `join`, `format`, a filter, a literal
built in a loop), so here the bound is on what is built (`vigil.core.templatebudget`). Jinja's
compiled code produces values in few places, and each goes through this environment:

* binary operators (`call_binop`, all of them intercepted) and calls (`call`: str methods,
  globals, macros, `loop(...)` of recursive loops, `caller()`);
* every filter (wrapped as it is registered; `map` and `select` reach filters through them too);
* `~` (the compiled module's `str_join`/`markup_join`, replaced when a template is made),
  the output of macros, `{% set %}` blocks and `{% filter %}` blocks (`concat`);
* assignment to a `namespace()` attribute, the one value a template can carry across loop
  iterations; slices (`getitem`, where the code generator sends them); and each piece of
  output (`finalize`).

Each weighs what it will build before building it where the size can be foreseen
(`vigil.core.templatesizes`), and charges what it built after. Rendering in a child process
with a memory rlimit was measured against this and is slower per fire (docs/security.md).
Blocks, `extends`, `include` and `import` are refused at compile (a payload has no use for
them, and a block's output is joined by Jinja's runtime, outside these hooks); `lipsum` and
`urlize` are not offered.

Compiling is bounded too, before it starts: the source by its length and tokens (so Jinja's own
parser and code generator stay small), and the Python code Jinja generates from it by its length,
before CPython's `compile()` sees it. That compile is the expensive step: it passes through 80 to
140 bytes per character of the code (a list literal of 400 slices: 40,000 characters, 4.6 MiB for
a moment), whatever the template means, so it is bounded by what it is given.
Pure: no I/O, and a clock only if the caller injects one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import CodeType, FrameType
from typing import Any, TypeVar

from jinja2 import Template, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import TemplateSyntaxError
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import Namespace

from vigil.core.templatebudget import (
    DEFAULT_BUDGETS,
    UNTRACED_FILES,
    Budgets,
    RenderBudget,
    TemplateLimitExceeded,
    current,
    rendering,
    running,
    text_bytes,
    weight,
)
from vigil.core.templatesizes import (
    FILTER_SIZES,
    MAX_NUMBER,
    check_number,
    check_power,
    format_size,
    percent_values,
    repeat_size,
    str_method_size,
)

__all__ = [
    "MAX_CODE", "MAX_NUMBER", "MAX_RANGE", "MAX_STEPS", "MAX_TEXT", "MAX_TOKENS", "BoundedSandbox", "Budgets", "TemplateLimitExceeded",
    "compile_bounded", "render_bounded", "render_compiled", "render_within",
]  # fmt: skip

#: Longest template source: a payload's own limit, and what the CRD schema admits.
MAX_TEXT = 32 * 1024
#: Most tokens (names, literals, operators, text between tags) one template may have: bounds
#: Jinja's lexer, parser and code generator (at 4,000 tokens, a few hundred KiB); ordinary payload
#: templates have under 400.
MAX_TOKENS = 4_000
#: Most characters of Python code Jinja may generate for one template, refused before CPython
#: compiles it. That compile passes through 80 to 140 bytes per character for a moment, so this
#: holds it to about 2 MiB (at 4,000 tokens, up to 8 MiB: a tenant editing such templates raised
#: the operator's peak RSS by that). Each expression is about 140 characters (`{{ job.name }}`,
#: `{{ periodStart | date }}`, an `{% if %}`), so a string may hold some 110; text between them
#: costs nothing, and a payload's other strings are templates of their own.
MAX_CODE = 16 * 1024
#: Most numbers one range yields.
MAX_RANGE = 10_000
#: Interpreter steps one render may take (`Budgets.steps`).
MAX_STEPS = DEFAULT_BUDGETS.steps

#: The str methods a template may call; the rest (expandtabs, zfill, center, ...) can be
#: asked to build huge strings from small inputs and are not worth bounding one by one.
SAFE_STR_METHODS = frozenset({
    "capitalize", "casefold", "count", "endswith", "find", "isalnum", "isalpha", "isdigit",
    "islower", "isspace", "isupper", "join", "lower", "lstrip", "partition", "removeprefix",
    "removesuffix", "replace", "rfind", "rpartition", "rsplit", "rstrip", "split", "splitlines",
    "startswith", "strip", "swapcase", "title", "upper", "format", "format_map",
})  # fmt: skip
#: Filters and globals a payload has no use for, that build text from small inputs.
WITHHELD = frozenset({"urlize", "lipsum"})
#: Template constructs refused at compile (see the module doc).
_REFUSED_NODES = (nodes.Block, nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)
UNTRACED_FILES.add(__file__)  # the checks: see vigil.core.templatebudget


def _foresee(size: int, what: str) -> None:
    """Refuse, before building it, a value that would pass the bound of one value."""
    budget = running() or current()
    budget.check()
    if size > budget.budgets.value_bytes:
        raise budget.fail(f"{what} would be {size} bytes; the limit is {budget.budgets.value_bytes}")


_V = TypeVar("_V")


def _built(value: _V, what: str) -> _V:
    """Charge a value just built to the render, and hand it on."""
    budget = running() or current()
    budget.charge(weight(value, budget.budgets.value_bytes), what)
    return value


def _check_inputs(args: Sequence[Any], kwargs: Mapping[str, Any], what: str, *, first_is_value: bool) -> None:
    budget = running() or current()
    limit = budget.budgets.value_bytes
    for index, value in enumerate((*args, *kwargs.values())):
        if (index > 0 or not first_is_value) and type(value) in (int, float):
            check_number(value, what)
        if weight(value, limit) > limit:
            _foresee(weight(value, limit), f"an input of {what}")


def bounded_range(*args: int) -> range:
    for value in args:
        check_number(value, "range")
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise TemplateLimitExceeded(f"a range of {len(numbers)} numbers; the limit is {MAX_RANGE}")
    return numbers


def _listed(value: Any) -> Any:
    """An iterator (a `map`, a `batch`) made a list, so its items can be weighed; bounded, as its
    source is."""
    return list(value) if isinstance(value, Iterator) else value


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    estimate = FILTER_SIZES.get(name)

    passed = getattr(function, "jinja_pass_arg", None) is not None

    def bounded(*args: Any, **kwargs: Any) -> Any:
        lead, values = (args[:1], args[1:]) if passed else ((), args)
        if name == "join" and values:
            values = (_listed(values[0]), *values[1:])
        what = f"filter {name}"
        _check_inputs(values, kwargs, what, first_is_value=True)
        if estimate is not None and values:
            _foresee(estimate(values, kwargs, current().budgets.value_bytes), f"the result of {what}")
        return _built(function(*lead, *values, **kwargs), f"the result of {what}")

    if hasattr(function, "jinja_pass_arg"):  # keep the marker that hands the filter its context
        bounded.__dict__["jinja_pass_arg"] = function.jinja_pass_arg  # a function attribute Jinja reads
    return bounded


def _bounded_join(join: Callable[[Iterable[Any]], str]) -> Callable[[Iterable[Any]], str]:
    """`~`: each side turned to text and joined; weighed first (each side is a bounded value)."""

    def bounded(seq: Iterable[Any]) -> str:
        items = list(seq)
        limit = current().budgets.value_bytes
        _foresee(sum(weight(item, limit) for item in items), "a joined text ('~')")
        return _built(join(items), "a joined text ('~')")

    return bounded


class BoundedNamespace(Namespace):
    """`namespace()`, whose every assignment is charged: it carries values across iterations."""

    def __setitem__(self, name: str, value: Any) -> None:
        _built(value, f"namespace attribute {name}")
        super().__setitem__(name, value)


class BoundedTemplate(Template):
    """A template whose `~` goes through the render's checks (the compiled module imports
    `str_join`/`markup_join` from Jinja's runtime by name: they are replaced in its namespace)."""

    @classmethod
    def _from_namespace(cls, environment: Any, namespace: Any, globals: Any) -> Template:
        namespace["str_join"] = _bounded_join(str_join)
        namespace["markup_join"] = _bounded_join(markup_join)
        return super()._from_namespace(environment, namespace, globals)


class BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, but a slice goes through `environment.getitem` like an index
    (Jinja compiles `a[1:]` to plain Python slicing: a new string past every hook)."""

    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:
        if not isinstance(node.arg, nodes.Slice):
            super().visit_Getitem(node, frame)
            return
        self.write("environment.getitem(")
        self.visit(node.node, frame)
        self.write(", slice(")
        for index, part in enumerate((node.arg.start, node.arg.stop, node.arg.step)):
            self.write(", " if index else "")
            if part is None:
                self.write("None")
            else:
                self.visit(part, frame)
        self.write("))")


def _finalize(value: Any) -> Any:
    """Each piece of output, before Jinja turns it into text (`_built`, inline: the commonest hook)."""
    budget = running() or current()
    budget.charge(weight(value, budget.budgets.value_bytes), "a piece of output")
    return value


class BoundedSandbox(SandboxedEnvironment):
    """Jinja2's sandbox with every value a template builds weighed and charged (module doc)."""

    template_class = BoundedTemplate
    code_generator_class = BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "-", "%", "/", "//"})

    def __init__(self, **options: Any) -> None:
        super().__init__(finalize=_finalize, **options)
        for name in WITHHELD:
            self.globals.pop(name, None)
            self.filters.pop(name, None)
        self.globals["range"] = bounded_range
        self.globals["namespace"] = BoundedNamespace
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}

    def add_filter(self, name: str, function: Callable[..., Any]) -> None:
        self.filters[name] = _bounded_filter(name, function)

    def _compile(self, source: str, filename: str) -> CodeType:
        """Jinja's hook between its code generator and CPython's compile(): code past MAX_CODE
        is refused here, so compile() never sees it (module doc)."""
        if len(source) > MAX_CODE:
            raise TemplateLimitExceeded(
                f"the template compiles to {len(source)} characters of code; the limit is {MAX_CODE} "
                "(about 110 expressions in one string: split it across several strings of the payload)"
            )
        return super()._compile(source, filename)

    @staticmethod
    def concat(pieces: Iterable[str]) -> str:
        """The output of a macro, a `{% set %}` block or a `{% filter %}` block, joined."""
        items = list(pieces)
        _foresee(sum(text_bytes(piece) for piece in items), "the output of a macro or block")
        return _built("".join(items), "the output of a macro or block")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        limit = current().budgets.value_bytes
        what = f"the result of '{operator}'"
        if operator == "*":
            _foresee(repeat_size(left, right, limit), what)
        elif operator == "**":
            check_power(left, right)
        elif operator == "%" and isinstance(left, str):
            values = percent_values(right)
            _check_inputs(values, {}, "'%' formatting", first_is_value=False)
            _foresee(format_size(left, values, limit), what)
        else:
            _foresee(weight(left, limit) + weight(right, limit), what)
        return _built(super().call_binop(context, operator, left, right), what)

    def getitem(self, obj: Any, argument: Any) -> Any:
        """A slice is a new value; an item or attribute is one that exists already."""
        value = super().getitem(obj, argument)
        return _built(value, "a slice") if isinstance(argument, slice) else value

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """str.format and format_map are wrapped by the sandbox when looked up: weigh them there."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        owner, name = value.__self__, value.__name__

        def bounded(*args: Any, **kwargs: Any) -> str:
            _check_inputs(args, kwargs, f"str.{name}", first_is_value=False)
            _foresee(str_method_size(owner, name, args, kwargs, current().budgets.value_bytes), f"str.{name}")
            return _built(wrapped(*args, **kwargs), f"the result of str.{name}")

        return bounded

    # Jinja's own signature: dunder names so they cannot clash with the call's keyword arguments.
    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "") or "a function"
        if isinstance(owner, str):
            if name not in SAFE_STR_METHODS:
                raise TemplateLimitExceeded(f"str.{name} is not available in payload templates")
            if name == "join" and args:
                args = (_listed(args[0]), *args[1:])
        _check_inputs(args, kwargs, f"a call of {name}", first_is_value=False)
        if isinstance(owner, str):
            limit = current().budgets.value_bytes
            _foresee(str_method_size(owner, name, args, kwargs, limit), f"str.{name}")
        return _built(super().call(__context, __obj, *args, **kwargs), f"the result of {name}")


def compile_bounded(environment: BoundedSandbox, text: str) -> Template:
    """Compile `text` (at most MAX_TEXT long, MAX_TOKENS tokens, MAX_CODE characters of generated
    code). Compiling is linear in the source: untraced.

    A compiled template holds no render state, so callers may keep it and render it many times.
    """
    if len(text) > MAX_TEXT:
        raise TemplateLimitExceeded(f"the template would be {len(text)} long; the limit is {MAX_TEXT}")
    for count, _ in enumerate(environment.lex(text), start=1):  # counted as lexed: nothing kept
        if count > MAX_TOKENS:
            raise TemplateLimitExceeded(f"the template has more than {MAX_TOKENS} tokens; the limit is {MAX_TOKENS}")
    tree = environment.parse(text)
    for refused in _REFUSED_NODES:
        for node in tree.find_all(refused):
            construct = type(node).__name__.lower()
            raise TemplateSyntaxError(f"{construct} is not available in payload templates", node.lineno)
    return environment.from_string(tree)


def render_compiled(
    template: Template,
    variables: dict[str, Any],
    *,
    budgets: Budgets = DEFAULT_BUDGETS,
    monotonic: Callable[[], float] | None = None,
) -> str:
    """Render a template from `compile_bounded` within `budgets` (seconds only with `monotonic`)."""
    return render_within(template, variables, RenderBudget(budgets, monotonic=monotonic))


def render_within(template: Template, variables: dict[str, Any], budget: RenderBudget) -> str:
    """Render with `budget` as the render's tally (afterwards it tells what the render cost)."""
    with rendering(budget):
        out: list[str] = []
        total = 0
        try:
            for piece in template.generate(**variables):
                total += text_bytes(piece)
                if total > budget.budgets.value_bytes:
                    raise budget.fail(f"the rendered text passes {budget.budgets.value_bytes} bytes")
                out.append(piece)
        except BaseException as error:
            out.clear()
            _let_go(error)
            raise
        budget.check()  # broken inside code that swallowed the error: still broken
        return "".join(out)


def _let_go(error: BaseException) -> None:
    """Drop what a failed render's frames still hold: the values it built, up to its budgets.

    The error's traceback keeps the render's frames, and each frame the one that called it, the
    template's own among them (with the list a block collects its output in). Jinja rewrites a
    template's traceback through frames that hold the exception itself, so those frames, and
    every value they built, stay in a reference cycle until the garbage collector's oldest
    generation is collected: in the operator, seldom, so a tenant whose templates fail at every
    fire kept megabytes per render. Every frame the error passed through, up to the one still
    running (this render's caller), is cleared; the error keeps its type, message and lines.
    """
    errors: list[BaseException] = []
    pending: BaseException | None = error
    while pending is not None and pending not in errors:
        errors.append(pending)
        pending = pending.__cause__ or pending.__context__
    cleared: set[int] = set()
    for each in errors:
        tb = each.__traceback__
        while tb is not None:
            frame: FrameType | None = tb.tb_frame
            while frame is not None and id(frame) not in cleared:
                cleared.add(id(frame))
                try:
                    frame.clear()
                except RuntimeError:  # still running: this render's caller and theirs
                    break
                if frame.f_locals is not frame.f_globals:  # a traced frame's copy of its locals
                    frame.f_locals.clear()
                frame = frame.f_back
            tb = tb.tb_next


def render_bounded(
    environment: BoundedSandbox,
    text: str,
    variables: dict[str, Any],
    *,
    budgets: Budgets = DEFAULT_BUDGETS,
    monotonic: Callable[[], float] | None = None,
) -> str:
    """Compile and render `text` within every budget; raises TemplateLimitExceeded past one."""
    return render_compiled(compile_bounded(environment, text), variables, budgets=budgets, monotonic=monotonic)
