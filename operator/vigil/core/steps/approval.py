"""The ``approval`` step: waits for a decision by one of its approvers.

When ready it records who may decide; nothing runs meanwhile (the approval tokens and their
notifications follow the recorded start: ``vigil.core.approvaltokens``). The result is a
person's input (approve, reject, complete) or, past the timeout, escalation (in the
orchestrator's deadline handling, which only approval steps may ask for).
"""

from __future__ import annotations

from datetime import datetime

from vigil.core.steps.kind import Wanted
from vigil.core.workflow import Definition, StepDef, StepKind, StepState


class ApprovalStep:
    kind = StepKind.APPROVAL
    awaits_decision = True
    has_pod_logs = False

    def start_detail(self, definition: Definition, step_def: StepDef, *, at: datetime) -> dict[str, object]:
        return {"approvers": list(step_def.approvers)}

    def wanted(self, definition: Definition, step_def: StepDef, step: StepState) -> Wanted | None:
        return None

    def waiting_for(self, step: StepState) -> list[str]:
        parts = [f"awaiting {', '.join(step.approvers) or 'a decision'}"]
        if step.level:
            parts.append(f"escalated to level {step.level}")
        return parts


APPROVAL = ApprovalStep()
