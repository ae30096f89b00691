"""What a task's return value becomes: its execution's output, checked as a payload is.

A task function's return value is kept on its execution when the attempt succeeds
(`executions.output`): a workflow's `task` step takes it as the step's output, which the steps
that depend on it get in their inputs. It must be what a payload may be
(`vigil.core.jsonvalues`): JSON, no NUL or lone surrogate in a string, no NaN or infinity,
nested at most 64 deep, at most `MAX_OUTPUT_BYTES` as compact JSON. A task that returns None
keeps null.

A return value that is not — a set, an object, a dataclass, 40 KiB of text, a string with a NUL —
does not fail the attempt, and does not reach the acknowledgement: the attempt succeeds with
null as its output, and a warning names the task, the execution and why. The task's work is done
by then (a card charged, a row written), and the queue cannot undo it; failing the attempt would
run that work again for what is a problem of presentation, and would turn every task written
before outputs were kept — which returned whatever it liked, ignored then — into a failing one.
What is sent is the JSON text made here, so nothing the task still holds can change it on the way
and nothing unwritable reaches the acknowledgement's batch, which other attempts share.

The check runs where the task ran: in its worker thread for a sync task, so a large value is
walked beside the task and not on the loop that leases and acknowledges for every slot.
"""

from __future__ import annotations

import logging
from typing import Any

from vigil.core import jsonvalues

log = logging.getLogger(__name__)

#: Largest output kept, as compact JSON: the payload's bound (an execution is a row, not a blob).
MAX_OUTPUT_BYTES = jsonvalues.MAX_PAYLOAD_BYTES


def output_of(value: Any, *, task: str, execution_id: str) -> str | None:
    """What the store keeps of a task's return value: its JSON text, or None (null) when the task
    returned None or something the store cannot keep (then a warning says so; see the module doc)."""
    if value is None:
        return None
    try:
        return jsonvalues.checked_text(value, path="output", max_bytes=MAX_OUTPUT_BYTES)
    except jsonvalues.UnsafeValue as refused:
        log.warning(
            "task %s (execution %s) succeeded, but its return value is not kept (its output is null): %s",
            task, execution_id, refused,
        )  # fmt: skip
        return None
