"""Building blocks shared by every Vigil resource model.

The models in this package are the single source of the CRD schemas (see ``crdgen``), so the
pieces here carry two things at once: how the operator validates a value (pydantic), and what
the API server is told about it (the JSON schema each type emits). Keeping both in one type is
what stops the admission rules and the operator's own checks from drifting apart.

Conventions every model follows:

* Python attributes are snake_case; YAML keys are camelCase (an alias generator), and
  ``model_dump`` writes camelCase by default.
* Specs forbid unknown keys, so a misspelt field is an error rather than silently ignored.
  Status models ignore unknown keys: the operator owns status and may grow it.
* Every field has a ``description``: it becomes the CRD field doc and ``kubectl explain`` text.
* CEL rules (``x-kubernetes-validations``) sit on the model they constrain, via
  :func:`cel_rules`, and each has a pydantic twin so a model parsed outside the API server
  (tests, the CLI, an operator reading an object admitted before a rule existed) gets the same
  error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, Self

import jinja2
import jinja2.sandbox
from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from vigil.core.templatelimits import MAX_TEXT
from vigil.model.durations import (
    DURATION_MAX_LENGTH,
    DURATION_MIN_LENGTH,
    DURATION_PATTERN,
    NONZERO_DIGIT_PATTERN,
    UNIT_SECONDS,
    format_duration,
    parse_duration,
)
from vigil.model.names import GROUP, VERSION

#: ``json_schema_extra`` for an object field whose nested fields all have defaults: the API
#: server then fills in the whole object when it is omitted (defaulting is recursive).
DEFAULT_EMPTY_OBJECT: dict[str, Any] = {"default": {}}

#: Printed by the API server when a positive duration is zero (see :class:`PositiveDuration`).
MESSAGE_DURATION_NOT_ZERO = "must be greater than zero"


# --------------------------------------------------------------------------------------------
# Base models


class SpecModel(BaseModel):
    """Base of every spec model: camelCase on the wire, unknown keys rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
    )


class StatusModel(BaseModel):
    """Base of every status model: camelCase on the wire, unknown keys ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
    )


# --------------------------------------------------------------------------------------------
# CEL rules


@dataclass(frozen=True, kw_only=True)
class CelRule:
    """One ``x-kubernetes-validations`` entry: a CEL rule and the message shown when it fails.

    ``field_path`` (e.g. ``".suspendReason"``) makes the API server report the error against
    that field instead of the object holding the rule. ``message_expression`` is a CEL string
    expression shown instead of ``message`` when it evaluates (it can name the offending item,
    e.g. ``'version ' + string(self.version) + ...``); ``message`` stays the fallback and what
    the reference docs print.
    """

    rule: str
    message: str
    message_expression: str | None = None
    field_path: str | None = None
    reason: Literal["FieldValueInvalid", "FieldValueRequired", "FieldValueForbidden"] | None = None

    def as_schema(self) -> dict[str, str]:
        """The rule as the CRD writes it."""
        entry = {"rule": self.rule, "message": self.message}
        if self.message_expression is not None:
            entry["messageExpression"] = self.message_expression
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        if self.reason is not None:
            entry["reason"] = self.reason
        return entry


def cel_rules(*rules: CelRule) -> dict[str, Any]:
    """``json_schema_extra`` attaching CEL rules to a model or field."""
    return {"x-kubernetes-validations": [rule.as_schema() for rule in rules]}


def count_set(*fields: str) -> str:
    """A CEL expression counting how many of ``fields`` are set on ``self``."""
    return " + ".join(f"(has(self.{name}) ? 1 : 0)" for name in fields)


def cel_seconds(field: str) -> str:
    """A CEL expression for the length in seconds of the duration text at ``field``.

    CEL's own ``duration()`` has no day unit, so each component of the grammar (``d``, ``h``,
    ``m``, ``s``, each at most once) is found and summed.
    """
    parts = [
        f"({field}.matches('[0-9]+{unit}') ? int({field}.find('[0-9]+{unit}').replace('{unit}', '')) * {seconds} : 0)"
        for unit, seconds in UNIT_SECONDS.items()
    ]
    return "(" + " + ".join(parts) + ")"


def names_of_set_fields(model: BaseModel, python_names: Iterable[str]) -> list[str]:
    """The camelCase names of the fields among ``python_names`` that are set (not None)."""
    fields = type(model).model_fields
    return [fields[name].alias or name for name in python_names if getattr(model, name) is not None]


# --------------------------------------------------------------------------------------------
# Durations


class Duration(timedelta):
    """A non-negative duration written as text (``"1h30m"``); a :class:`timedelta` in Python.

    It remembers the text it was parsed from, so writing a model back (for example when a
    workflow definition is pinned into status) reproduces what the user wrote. Accepts a
    string in the grammar of :mod:`vigil.model.durations`, or a ``timedelta``.
    """

    __slots__ = ("text",)
    text: str

    #: Whether zero (``"0s"``) is accepted; :class:`PositiveDuration` says no.
    allow_zero: ClassVar[bool] = True

    def __new__(cls, text: str) -> Self:
        delta = parse_duration(text)
        if not cls.allow_zero and delta == timedelta(0):
            raise ValueError(f"duration {text!r} {MESSAGE_DURATION_NOT_ZERO}")
        instance = super().__new__(cls, days=delta.days, seconds=delta.seconds)
        instance.text = text
        return instance

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.text!r})"

    def __reduce__(self) -> tuple[type[Self], tuple[str]]:
        return (type(self), (self.text,))

    @classmethod
    def coerce(cls, value: object) -> Self:
        """Build from text, a timedelta, or an instance (returned unchanged)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, timedelta):
            return cls(format_duration(value))
        if isinstance(value, str):
            return cls(value)
        raise ValueError(f"a duration must be a string such as '90s', not {value!r}")

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.coerce,
            serialization=core_schema.plain_serializer_function_ser_schema(
                str, return_schema=core_schema.str_schema()
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema: dict[str, Any] = {
            "type": "string",
            "pattern": DURATION_PATTERN,
            "minLength": DURATION_MIN_LENGTH,
            "maxLength": DURATION_MAX_LENGTH,
        }
        if not cls.allow_zero:
            json_schema |= cel_rules(
                CelRule(
                    rule=f"self.matches('{NONZERO_DIGIT_PATTERN}')",
                    message=MESSAGE_DURATION_NOT_ZERO,
                )
            )
        return json_schema


class PositiveDuration(Duration):
    """A duration greater than zero (at least ``"1s"``)."""

    __slots__ = ()
    allow_zero: ClassVar[bool] = False


# --------------------------------------------------------------------------------------------
# Timestamps, names, templates

#: RFC 3339 date-time, as the API server's ``format: date-time`` understands it.
RFC3339_PATTERN = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _require_rfc3339(value: object) -> object:
    """Reject what pydantic would otherwise coerce into a datetime (numbers, bare dates)."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and RFC3339_PATTERN.fullmatch(value):
        return value
    raise ValueError(
        f"expected an RFC 3339 date-time with a UTC offset such as "
        f"'2026-08-01T02:00:00Z', got {value!r}"
    )


#: An RFC 3339 date-time with an explicit offset; a timezone-aware ``datetime`` in Python.
Timestamp = Annotated[AwareDatetime, BeforeValidator(_require_rfc3339)]

#: DNS-1123 label pattern (namespaces, most resource names' segments).
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: DNS-1123 subdomain pattern (names of ConfigMaps, definitions, ...).
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

#: A namespace name.
NamespaceName = Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, max_length=63)]
#: The name of a Kubernetes object (DNS-1123 subdomain).
ObjectName = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)]

#: Longest template text accepted in ``idempotencyKey``.
IDEMPOTENCY_KEY_MAX_LENGTH = 253

_TEMPLATE_ENVIRONMENT = jinja2.sandbox.SandboxedEnvironment()


#: The longest template text: what the renderer accepts (vigil.core.templatelimits.MAX_TEXT).
MAX_TEMPLATE_LENGTH = MAX_TEXT


def check_template_syntax(text: str) -> str:
    """Raise ValueError if ``text`` is not a syntactically valid Jinja template.

    Only the syntax is checked here; rendering (and unknown filters or variables) is the
    payload renderer's business, at fire time, with the occurrence's period.
    """
    if len(text) > MAX_TEMPLATE_LENGTH:
        raise ValueError(f"a template is {len(text)} characters long; the limit is {MAX_TEMPLATE_LENGTH}")
    try:
        _TEMPLATE_ENVIRONMENT.parse(text)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(f"invalid template {text!r}: {error.message}") from None
    except RecursionError:  # the parser recurses per nesting level: "{{ {{ {{ ..." exhausts it
        raise ValueError(f"invalid template {text[:40]!r}...: it nests too deeply") from None
    return text


def check_template_tree(value: object) -> None:
    """Check every string inside a JSON value (dict keys excluded) as a template."""
    if isinstance(value, str):
        check_template_syntax(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            check_template_tree(item)
    elif isinstance(value, list):
        for item in value:
            check_template_tree(item)


# --------------------------------------------------------------------------------------------
# Pod templates


class Container(BaseModel):
    """A container of the pod (a Kubernetes Container; fields beyond name and image pass through)."""

    model_config = ConfigDict(extra="allow")

    name: Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, max_length=63)] = Field(
        description="The container's name, unique within the pod."
    )
    image: Annotated[str, StringConstraints(min_length=1)] = Field(
        description="The container image to run."
    )


class PodSpec(BaseModel):
    """A Kubernetes PodSpec. Only `containers` is checked here; the rest is passed through to
    the pod unchanged and checked by the API server when the pod is created."""

    model_config = ConfigDict(extra="allow")

    containers: list[Container] = Field(
        min_length=1, description="The pod's containers: at least one."
    )


class PodTemplateMetadata(SpecModel):
    """Labels and annotations added to every pod created from the template."""

    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels added to the pod (Vigil adds its own too)."
    )
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations added to the pod."
    )


class PodTemplate(SpecModel):
    """The pod run for each execution (each attempt gets its own pod)."""

    metadata: PodTemplateMetadata | None = Field(
        default=None, description="Labels and annotations for the pod."
    )
    spec: PodSpec = Field(description="The pod's spec (a Kubernetes PodSpec).")


# --------------------------------------------------------------------------------------------
# Retry


class Backoff(SpecModel):
    """Exponential backoff between attempts: initial, initial*factor, ... capped at max.
    The operator adds jitter to each wait."""

    initial: PositiveDuration = Field(
        default=PositiveDuration("10s"), description="Wait before the second attempt."
    )
    factor: float = Field(
        default=2.0, ge=1, le=10, description="Multiplier applied to the wait after each attempt."
    )
    max: PositiveDuration = Field(
        default=PositiveDuration("10m"), description="Longest wait between two attempts."
    )

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> Self:
        if self.max < self.initial:
            raise ValueError(
                f"backoff max ({self.max}) must not be shorter than initial ({self.initial})"
            )
        return self


class RetryPolicy(SpecModel):
    """How often a failed execution is retried, and how long to wait in between. Every attempt
    of one occurrence carries the same execution id."""

    max_attempts: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Attempts in total, the first included; after the last one fails the "
        "execution is dead-lettered.",
    )
    backoff: Backoff = Field(
        default_factory=Backoff,
        json_schema_extra=DEFAULT_EMPTY_OBJECT,
        description="Wait between attempts.",
    )


# --------------------------------------------------------------------------------------------
# Conditions


class ConditionStatus(StrEnum):
    """The status of a condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


#: How many conditions a status may hold.
CONDITIONS_MAX_ITEMS = 16


class Condition(StatusModel):
    """One aspect of the object's state (the standard Kubernetes metav1.Condition shape)."""

    type: Annotated[
        str,
        StringConstraints(
            max_length=316,
            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        ),
    ] = Field(description="The aspect, in CamelCase: Ready, Overdue, Suspended, Invalid, ...")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: (
        Annotated[
            str,
            StringConstraints(
                min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
            ),
        ]
        | None
    ) = Field(default=None, description="Why, as a CamelCase word a program can match on.")
    message: Annotated[str, StringConstraints(max_length=32768)] | None = Field(
        default=None, description="Why, for a human."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation this condition was computed for."
    )
    last_transition_time: Timestamp | None = Field(
        default=None, description="When the status last changed."
    )


def conditions_field() -> Any:
    """The ``conditions`` field of a status: a list keyed by condition type."""
    return Field(
        default_factory=list,
        max_length=CONDITIONS_MAX_ITEMS,
        description="The object's conditions, one per type.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


# --------------------------------------------------------------------------------------------
# Resource kinds


@dataclass(frozen=True, kw_only=True)
class PrinterColumn:
    """An ``additionalPrinterColumns`` entry: a column of ``kubectl get``."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    description: str = ""
    priority: int = 0


#: The AGE column every resource shows last.
AGE_COLUMN = PrinterColumn(
    name="Age",
    json_path=".metadata.creationTimestamp",
    type="date",
    description="Time since creation.",
)


@dataclass(frozen=True, kw_only=True)
class ResourceKind:
    """Everything the CRD of one kind needs, in one place the operator can import names from."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec_model: type[SpecModel]
    status_model: type[StatusModel]
    description: str
    printer_columns: tuple[PrinterColumn, ...] = ()
    categories: tuple[str, ...] = ("vigil",)
    internal: bool = False
    required: tuple[str, ...] = field(default=("spec",))
    #: What the models check that admission cannot, in words, for the reference docs.
    operator_checks: tuple[str, ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def group(self) -> str:
        return GROUP

    @property
    def version(self) -> str:
        return VERSION


# --------------------------------------------------------------------------------------------
# Errors


def describe_validation_error(error: ValidationError, *, prefix: str = "spec") -> list[str]:
    """One line per problem, each starting with the field path (``spec.retry.maxAttempts: ...``).

    Meant for an ``Invalid`` condition's message and its Event.
    """
    lines = []
    for problem in error.errors(include_url=False):
        path = prefix
        for part in problem["loc"]:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        message = str(problem["msg"]).removeprefix("Value error, ")
        lines.append(f"{path}: {message}")
    return lines
