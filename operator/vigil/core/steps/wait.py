"""The ``wait`` step: a durable timer. The simplest kind: copy this module for a new one.

When ready it records when it fires (``fireAt``: a duration from the start, or a fixed time);
its one input is that timer, which the orchestrator's ``timers`` owes any running step with a
``fireAt``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from vigil.core.steps.kind import Wanted
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import Definition, StepDef, StepKind, StepState


class WaitStep:
    kind = StepKind.WAIT
    awaits_decision = False
    has_pod_logs = False

    def start_detail(self, definition: Definition, step_def: StepDef, *, at: datetime) -> dict[str, object]:
        fire_at = step_def.wait_until or at + (step_def.wait_for or timedelta(0))
        return {"fireAt": format_rfc3339(fire_at)}

    def wanted(self, definition: Definition, step_def: StepDef, step: StepState) -> Wanted | None:
        return None

    def waiting_for(self, step: StepState) -> list[str]:
        return []


WAIT = WaitStep()
