"""Rendering an occurrence's payload: the job is told its period, never left to guess it.

A job that works out "yesterday" for itself cannot be re-run for a missed day;
one that is handed `periodStart` can. So `payloadTemplate` is rendered per
occurrence with the occurrence's explicit period, in Jinja2's sandbox (no
attribute access to Python internals, no I/O), with undefined names an error
rather than an empty string. The `date` filter formats in the job's timezone.
Every render is bounded by what it builds, its steps and (with a clock the caller
injects) its time (`vigil.core.templatelimits`): a template that would take the
operator's memory or time is invalid input, at admission and at every fire.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from jinja2 import StrictUndefined, Template, TemplateError

from vigil.core import jsonvalues
from vigil.core.templatecache import CompiledTemplates
from vigil.core.templatelimits import (
    BoundedSandbox,
    TemplateLimitExceeded,
    compile_bounded,
    render_compiled,
)

MAX_PAYLOAD_BYTES = jsonvalues.MAX_PAYLOAD_BYTES  # rendered JSON; one limit for every door
_TEMPLATE_MARKS = frozenset("{")  # every Jinja2 construct ({{ }}, {% %}, {# #}) opens with a brace


#: What a template's own mistake raises when it renders ({{ 1 // 0 }}, {{ "a" + 1 }}; Jinja's own
#: filters assert some arguments: {{ "a" | truncate(0) }}).
TEMPLATE_MISTAKES = (ArithmeticError, TypeError, ValueError, LookupError, AttributeError, AssertionError)


class PayloadError(ValueError):
    """A payload or template that cannot be rendered; the message names the field."""


@functools.lru_cache(maxsize=64)
def _environment(timezone: str) -> BoundedSandbox:
    zone = ZoneInfo(timezone)
    env = BoundedSandbox(undefined=StrictUndefined, autoescape=False)

    def date(value: datetime, fmt: str = "%Y-%m-%d") -> str:
        return value.astimezone(zone).strftime(fmt)

    def isoformat(value: datetime) -> str:
        return value.astimezone(zone).isoformat()

    env.add_filter("date", date)
    env.add_filter("isoformat", isoformat)
    return env


def occurrence_variables(
    *,
    period_start: datetime,
    period_end: datetime,
    scheduled_for: datetime,
    execution_id: str,
    job_name: str,
    job_namespace: str,
) -> dict[str, Any]:
    return {
        "periodStart": period_start,
        "periodEnd": period_end,
        "scheduledFor": scheduled_for,
        "executionId": execution_id,
        "job": {"name": job_name, "namespace": job_namespace},
    }


def _compile(timezone: str, text: str) -> Template:
    return compile_bounded(_environment(timezone), text)


#: Compiled templates per zone and text, bounded by what they hold (vigil.core.templatecache).
COMPILED = CompiledTemplates(_compile)
_compiled = COMPILED.get


#: A monotonic clock (seconds), injected by adapters that may read one: the render's wall-clock
#: budget. Without one, the step budget alone bounds a render's time (admission: deterministic).
Monotonic = Callable[[], float]


def render_template_string(
    text: str, variables: Mapping[str, Any], *, timezone: str, field: str, monotonic: Monotonic | None = None
) -> str:
    try:
        return render_compiled(_compiled(timezone, text), dict(variables), monotonic=monotonic)
    except (TemplateLimitExceeded, RecursionError) as err:
        COMPILED.forget(timezone, text)
        raise PayloadError(f"{field}: {err}") from err
    except TemplateError as err:
        raise PayloadError(f"{field}: {err}") from err
    except TEMPLATE_MISTAKES as err:
        # The template's own mistake at render time ({{ 1 // 0 }}, {{ "a" + 1 }}): bad input like
        # any other, never an error that a retry of the occurrence could get past.
        raise PayloadError(f"{field}: {type(err).__name__}: {err}") from err


def _render(value: Any, variables: Mapping[str, Any], timezone: str, field: str, monotonic: Monotonic | None) -> Any:
    if isinstance(value, str):
        if not _TEMPLATE_MARKS.intersection(value):  # plain text renders as itself: skip the sandbox
            return value
        return render_template_string(value, variables, timezone=timezone, field=field, monotonic=monotonic)
    if isinstance(value, list):
        return [_render(v, variables, timezone, f"{field}[{i}]", monotonic) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _render(v, variables, timezone, f"{field}.{k}", monotonic) for k, v in value.items()}
    return value


def render_payload(
    *,
    payload: Any | None,
    template: Any | None,
    variables: Mapping[str, Any],
    timezone: str,
    monotonic: Monotonic | None = None,
) -> str:
    """The payload as compact JSON: the literal `payload`, or `payloadTemplate` rendered (each
    string its own render, within its own budgets)."""
    if template is not None:
        value = _render(template, variables, timezone, "spec.payloadTemplate", monotonic)
        field = "spec.payloadTemplate"
    else:
        value = payload if payload is not None else {}
        field = "spec.payload"
    text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise PayloadError(f"{field}: rendered payload is {len(text.encode())} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    return text
