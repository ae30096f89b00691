"""The ``approval`` step's block: who may approve, and who is asked when nobody does."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from vigil.core.workflow import Level, TimeoutAction
from vigil.model.common import PositiveDuration, SpecModel
from vigil.model.steps.block import StepBlock

#: Most approvers on one approval step (or one escalation level).
APPROVERS_MAX_ITEMS = 50
#: Most escalation levels on one approval step.
ESCALATION_MAX_ITEMS = 10

#: An approver: a user or group name as the approval API sees it, e.g. ``user:alice``.
Approver = Annotated[str, StringConstraints(min_length=1, max_length=253)]


class Exhausted(StrEnum):
    """What an escalated approval comes to when every level's time has run out."""

    FAIL = "fail"
    SKIP = "skip"
    APPROVE = "approve"


class Escalation(SpecModel):
    """One escalation level: after this long without a decision, these approvers are asked too."""

    after: PositiveDuration = Field(
        description="How long this level waits for a decision before the next level (or, "
        "after the last, onExhausted) applies. The first level starts when the step's "
        "timeout passes."
    )
    approvers: list[Approver] = Field(
        min_length=1, max_length=APPROVERS_MAX_ITEMS, description="Who is added at this level."
    )


class Approval(SpecModel):
    """Who may approve an approval step, and who is asked when nobody does."""

    approvers: list[Approver] = Field(
        min_length=1,
        max_length=APPROVERS_MAX_ITEMS,
        description="Users or groups who may approve, e.g. user:alice, group:editors.",
    )
    escalation: list[Escalation] = Field(
        default_factory=list,
        max_length=ESCALATION_MAX_ITEMS,
        description="Levels of escalation, in order, used when onTimeout is escalate.",
    )
    on_exhausted: Exhausted = Field(
        default=Exhausted.FAIL,
        description="With onTimeout escalate: what the step comes to when the last level's "
        "time runs out with no decision: fail, skip, or approve.",
    )


def _step_def(approval: Approval) -> dict[str, Any]:
    return {
        "approvers": tuple(approval.approvers),
        "escalation": tuple(
            Level(approvers=tuple(level.approvers), after=timedelta(seconds=level.after.total_seconds()))
            for level in approval.escalation
        ),
        "on_exhausted": TimeoutAction(str(approval.on_exhausted)),
    }


APPROVAL: StepBlock[Approval] = StepBlock(field="approval", step_def=_step_def)
