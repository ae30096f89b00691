"""The request bodies' pydantic models: what validates each body, and what the OpenAPI document shows.

One source for both (vigil.api.openapi generates the document from these classes): a body is
read by vigil.api.bodies (UTF-8 JSON, its depth bounded), then its shape is checked here — types,
required and unknown fields, lengths, patterns, ranges — by `validated`, then what a schema
cannot say is checked by the route (a runAt's offset and window, a payload's size and values
through vigil.core.jsonvalues, a cron, a time zone and a template through the core).

`validated` turns pydantic's first error into a `BodyInvalid` naming the field (``priority``,
``payload``) and the rule it broke, in the API's own words: never pydantic's message, and never
the value sent (pydantic's errors carry the input; it is dropped here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from vigil.api.bodies import field_name

NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
QUEUE_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
TEXT_MAX_LENGTH = 253  # task, tenant and idempotency key: as long as an object name
MAX_ATTEMPTS_LIMIT = 1000
SMALLINT = (-32768, 32767)
BY_MAX_LENGTH = 253  # an approver: a user name
REASON_MAX_LENGTH = 1024


def _plain(value: str) -> str:
    if not value.isprintable() or value != value.strip():
        raise PydanticCustomError("printable", "must be printable, without leading or trailing spaces")
    return value


#: A name, key or expression a caller gives: printable, trimmed, as long as an object name.
Text = Annotated[str, Field(min_length=1, max_length=TEXT_MAX_LENGTH), AfterValidator(_plain)]
Namespace = Annotated[str, Field(pattern=NAMESPACE_PATTERN, description="A namespace (a DNS label).")]
QueueName = Annotated[str, Field(pattern=QUEUE_PATTERN, description="A TaskQueue's name (a DNS subdomain).")]
Priority = Annotated[int, Field(ge=SMALLINT[0], le=SMALLINT[1])] | Literal["high", "normal", "low"]
MaxAttempts = Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT)]


class Body(BaseModel):
    """A request body: exactly these members. `rules` words the errors of a field that reads one
    way whatever went wrong; `unknown` the error of a member the model does not have."""

    model_config = ConfigDict(extra="forbid", strict=True)
    rules: ClassVar[Mapping[str, str]] = {}
    unknown: ClassVar[str] = "unknown field"


_SUBMISSION_RULES = {
    "namespace": "is not a namespace name (a DNS label)",
    "queue": "is not a TaskQueue name (a DNS subdomain)",
    "priority": f"must be a whole number from {SMALLINT[0]} to {SMALLINT[1]} (lower runs first) or a name "
                "(high, normal, low)",
    "maxAttempts": f"must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}",
    "runAt": "must be an RFC 3339 timestamp string, like '2026-08-01T02:00:00Z'",
    "expectedMaxInterval": "must be a duration string, like '26h'",
    "payload": "must be a JSON object",
    "payloadTemplate": "must be a JSON object",
}  # fmt: skip


class QueueRef(BaseModel):
    """What a submission is authorised against, read before anything else of it."""

    model_config = ConfigDict(extra="ignore", strict=True)
    rules: ClassVar[Mapping[str, str]] = _SUBMISSION_RULES
    unknown: ClassVar[str] = "unknown field"

    namespace: Namespace
    queue: QueueName


class OneOffSubmission(Body):
    rules: ClassVar[Mapping[str, str]] = _SUBMISSION_RULES

    namespace: Namespace
    queue: QueueName
    task: Text
    payload: dict[str, Any] = Field(default_factory=dict, description="A JSON object, at most 32 KiB compact.")
    runAt: str | None = Field(default=None, description="RFC 3339; default now.")
    priority: Priority = "normal"
    maxAttempts: MaxAttempts | None = None
    idempotencyKey: Text | None = None
    tenant: Text | None = None


class RecurringSubmission(Body):
    rules: ClassVar[Mapping[str, str]] = _SUBMISSION_RULES

    namespace: Namespace
    queue: QueueName
    task: Text
    cron: Text
    timezone: Text = "UTC"
    payloadTemplate: dict[str, Any] = Field(default_factory=dict, description="Rendered for each occurrence.")
    expectedMaxInterval: str | None = Field(default=None, description="A duration: 26h, 90s.")
    priority: Priority = "normal"
    maxAttempts: MaxAttempts | None = None
    idempotencyKey: Text | None = None
    tenant: Text | None = None


class ActionBody(Body):
    """A cancel's or retry's body: nothing (an empty object, or none)."""

    unknown: ClassVar[str] = "is not a field: a cancel or retry takes no body (or an empty JSON object)"


class ApprovalBody(Body):
    unknown: ClassVar[str] = "is not a field of a decision: only 'by' and 'reason' are accepted"

    by: str = Field(default="", max_length=BY_MAX_LENGTH, description="The token's approver (the only one it may be).")
    reason: str = Field(default="", max_length=REASON_MAX_LENGTH)


class BodyInvalid(ValueError):
    """A body's field that is wrong: `field` names it, `why` says which rule, never its value."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


Model = TypeVar("Model", bound=BaseModel)


def validated(model: type[Model], data: Any, *, body: str = "body") -> Model:
    """`data` (a decoded JSON body) as `model`; BodyInvalid naming the first wrong field (`body`
    for the whole)."""
    if not isinstance(data, dict):
        raise BodyInvalid(body, "must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        raise _invalid(model, first, body) from None


def _invalid(model: type[BaseModel], error: ErrorDetails, body: str) -> BodyInvalid:
    loc = [part for part in error["loc"] if isinstance(part, str)]
    key = loc[0] if loc else ""
    if error["type"] == "extra_forbidden":
        unknown = str(getattr(model, "unknown", "unknown field"))
        if unknown == "unknown field":
            unknown += f"; the fields are {', '.join(sorted(model.model_fields))}"
        return BodyInvalid(field_name(key, instead=body), unknown)
    if error["type"] == "missing":
        return BodyInvalid(key, "is required")
    if error["type"] == "printable":  # ours: its message holds no input
        return BodyInvalid(key, error["msg"])
    rules: Mapping[str, str] = getattr(model, "rules", {})
    if key in rules:
        return BodyInvalid(key, rules[key])
    return BodyInvalid(key, _rule(model, key, error))


def _rule(model: type[BaseModel], key: str, error: ErrorDetails) -> str:
    """The rule a field broke, in words, from the error's kind and the field's own constraints."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "string_type":
        return "must be a string"
    if kind in ("string_too_long", "string_too_short"):
        info = model.model_fields.get(key)
        shortest = next((m.min_length for m in (info.metadata if info else []) if hasattr(m, "min_length")), None)
        longest = ctx.get("max_length") or next(
            (m.max_length for m in (info.metadata if info else []) if hasattr(m, "max_length")), None
        )
        if shortest is not None and longest is not None:
            return f"must be {shortest} to {longest} characters long"
        return f"is longer than {longest} characters" if kind == "string_too_long" else "must not be empty"
    if kind == "dict_type":
        return "must be a JSON object"
    return "is not valid here"
