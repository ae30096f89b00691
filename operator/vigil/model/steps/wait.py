"""The ``wait`` step's block: a duration from the step's start, or a time (exactly one).

The simplest kind's block: copy this module for a new kind.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Self

from pydantic import Field, model_validator

from vigil.model.common import CelRule, PositiveDuration, SpecModel, Timestamp, cel_rules
from vigil.model.steps.block import StepBlock

MESSAGE_WAIT_DURATION_OR_UNTIL = "exactly one of duration or until must be set"

_WAIT_RULES = cel_rules(
    CelRule(rule="has(self.duration) != has(self.until)", message=MESSAGE_WAIT_DURATION_OR_UNTIL)
)


class Wait(SpecModel, json_schema_extra=_WAIT_RULES):
    """A durable timer: wait a duration from when the step starts, or until a time."""

    duration: PositiveDuration | None = Field(
        default=None, description="How long to wait, from when the step becomes ready."
    )
    until: Timestamp | None = Field(default=None, description="Wait until this time.")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.duration is None) == (self.until is None):
            raise ValueError(MESSAGE_WAIT_DURATION_OR_UNTIL)
        return self


def _step_def(wait: Wait) -> dict[str, Any]:
    duration = None if wait.duration is None else timedelta(seconds=wait.duration.total_seconds())
    return {"wait_for": duration, "wait_until": wait.until}


WAIT: StepBlock[Wait] = StepBlock(field="wait", step_def=_step_def)
