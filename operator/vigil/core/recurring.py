"""A recurring job of the volume tier, as a program declares it: validated on construction.

The catalogue (vigil.queue.catalogue) stores it and the HTTP API (vigil.api.queue) builds it from
a request, so it lives here, pure: every check uses the core's own parsers (cron, IANA zones,
jitter, payload templates), and every error names the field ("field: why").
"""

from __future__ import annotations

import dataclasses
import functools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.core import jsonvalues
from vigil.core.chain import EXPANSION_CAP, CatchUp, CatchUpPolicy
from vigil.core.jitter import default_jitter_window, shortest_cron_interval
from vigil.core.payload import PayloadError, occurrence_variables, render_payload
from vigil.core.schedule import GapPolicy, OverlapPolicy, Schedule, load_zone
from vigil.core.timeparse import parse_cron

#: The core's catch-up defaults: All, within 5 minutes, at most 100 late occurrences.
DEFAULT_CATCH_UP = CatchUp()
MAX_KEY_LENGTH = 256
#: The validation render's instant: any fixed time works, the template only needs real datetimes.
_SAMPLE_NOMINAL = datetime(2026, 1, 1, tzinfo=UTC)


def field_error(field: str, message: str) -> ValueError:
    return ValueError(f"{field}: {message}")


@dataclasses.dataclass(frozen=True)
class RecurringJob:
    """A recurring job of the volume tier, validated on construction (errors name the field).

    `queue` is the store's queue key, "<namespace>/<name>" of a TaskQueue. `cron` is a
    five-field expression evaluated in `timezone`; `gap` and `overlap` say what a wall time
    the clock springs forward over or falls back over does. `jitter` is the window the
    job's fixed offset is drawn from (None: the core's default for the cron, at most 60 s).
    `payload_template` is rendered per occurrence with its period (periodStart, periodEnd,
    scheduledFor, executionId, job). Lower `priority` runs first.
    """

    queue: str
    task: str
    cron: str
    timezone: str = "UTC"
    payload_template: dict[str, Any] = dataclasses.field(default_factory=dict)
    expected_max_interval: timedelta | None = None
    priority: int = 0
    tenant: str = ""
    max_attempts: int | None = None  # None: its TaskQueue's retry.maxAttempts, else DEFAULT_MAX_ATTEMPTS
    idempotency_key: str | None = None
    jitter: timedelta | None = None
    catch_up: CatchUp = DEFAULT_CATCH_UP
    gap: GapPolicy = GapPolicy.SHIFT
    overlap: OverlapPolicy = OverlapPolicy.ONCE

    def __post_init__(self) -> None:
        namespace, _, name = self.queue.partition("/")
        if not namespace or not name or "/" in name:
            raise field_error("queue", f"must be '<namespace>/<name>' of a TaskQueue, got {self.queue!r}")
        if not self.task:
            raise field_error("task", "must not be empty")
        self._check_schedule()
        self._check_numbers()
        self._check_catch_up()
        if self.idempotency_key is not None and not 1 <= len(self.idempotency_key) <= MAX_KEY_LENGTH:
            raise field_error("idempotency_key", f"must be 1..{MAX_KEY_LENGTH} characters when given")
        self._check_template()

    @property
    def schedule(self) -> Schedule:
        return cron_schedule(self.cron, self.timezone, GapPolicy(self.gap), OverlapPolicy(self.overlap))

    @property
    def jitter_window(self) -> timedelta:
        """The window the job's offset comes from: its own, or the core's default for the cron."""
        return self.jitter if self.jitter is not None else _default_jitter(self.schedule)

    def _check_schedule(self) -> None:
        try:
            load_zone(self.timezone)
        except ValueError as err:
            raise field_error("timezone", str(err)) from None
        try:
            parse_cron(self.cron)
        except ValueError as err:
            raise field_error("cron", str(err)) from None
        try:
            GapPolicy(self.gap)
            OverlapPolicy(self.overlap)
        except ValueError as err:
            raise field_error("gap/overlap", str(err)) from None
        if self.jitter is not None:
            shortest = shortest_cron_interval((self.cron,))
            if not timedelta(0) <= self.jitter < shortest:
                raise field_error("jitter", f"must be within [0, {shortest}) (the cron's shortest interval), got {self.jitter}")

    def _check_numbers(self) -> None:
        if self.max_attempts is not None and not 1 <= self.max_attempts <= 1000:
            raise field_error("max_attempts", f"must be within 1..1000, got {self.max_attempts}")
        if not -32768 <= self.priority <= 32767:
            raise field_error("priority", f"must fit a smallint, got {self.priority}")
        if self.expected_max_interval is not None and self.expected_max_interval <= timedelta(0):
            raise field_error("expected_max_interval", f"must be positive, got {self.expected_max_interval}")

    def _check_catch_up(self) -> None:
        try:
            CatchUpPolicy(self.catch_up.policy)
        except ValueError:
            raise field_error("catch_up.policy", f"must be one of All, Latest, None; got {self.catch_up.policy!r}") from None
        if self.catch_up.window < timedelta(0):
            raise field_error("catch_up.window", f"must not be negative, got {self.catch_up.window}")
        if not 0 <= self.catch_up.limit <= EXPANSION_CAP:
            raise field_error("catch_up.limit", f"must be within 0..{EXPANSION_CAP}, got {self.catch_up.limit}")

    def _check_template(self) -> None:
        if not isinstance(self.payload_template, dict):
            raise field_error("payload_template", f"must be a JSON object, got {type(self.payload_template).__name__}")
        try:
            text = json.dumps(self.payload_template, sort_keys=True)
        except (TypeError, ValueError) as err:  # not JSON-serialisable
            raise field_error("payload_template", str(err)) from None
        problem = _template_problem(text, self.timezone)
        if problem is not None:
            raise ValueError(problem)


@functools.lru_cache(maxsize=1024)
def cron_schedule(cron: str, timezone: str, gap: GapPolicy, overlap: OverlapPolicy) -> Schedule:
    """The core's Schedule of a catalogued cron (shared: a million jobs use a few schedules)."""
    return Schedule.from_cron(cron, timezone=timezone, gap=gap, overlap=overlap)


@functools.lru_cache(maxsize=1024)
def _default_jitter(schedule: Schedule) -> timedelta:
    return default_jitter_window(schedule)


@functools.lru_cache(maxsize=1024)
def _template_problem(text: str, timezone: str) -> str | None:
    """Why a template (as sorted JSON) cannot render with a sample period, naming the field; or None.

    Bulk onboarding catalogues many jobs with one template: each is compiled in the sandbox once.
    """
    variables = occurrence_variables(
        period_start=_SAMPLE_NOMINAL - timedelta(days=1),
        period_end=_SAMPLE_NOMINAL,
        scheduled_for=_SAMPLE_NOMINAL,
        execution_id="ex-validation",
        job_name="validation",
        job_namespace="validation",
    )
    try:
        rendered = render_payload(payload=None, template=json.loads(text), variables=variables, timezone=timezone)
        jsonvalues.check_text(rendered, path="payload_template")  # renders what the store refuses (NUL, ...)
    except PayloadError as err:
        return "payload_template" + str(err).removeprefix("spec.payloadTemplate")
    except jsonvalues.UnsafeValue as err:
        return str(err)
    return None


@dataclasses.dataclass(frozen=True)
class AddedJob:
    """What `add` answers: the job's id, its first nominal time, and whether this call created it."""

    job_id: str
    next_run: datetime | None
    created: bool
