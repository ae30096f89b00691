"""A task's return value is kept: `executions.output`.

A worker's acknowledgement of a success now carries what the task returned (vigil.worker.outputs:
JSON, checked and bounded as a payload is, at most 32 KiB; null when it returned None or something
the store cannot keep), and `settle_succeeded` writes it beside the state. `states_of` reads it
back, so a workflow's `task` step has its task's output as its own. NULL for every execution
settled before this revision and for every one that did not succeed.

The workers' `settle_succeeded` function gains a parameter (`p_outputs`), so the store installs it
under a new signature. The previous one is left in place, not dropped: a worker of the previous
version still acknowledges through it during a rolling upgrade (its successes keep no output),
instead of failing every acknowledgement until it is upgraded. A later revision may drop it.
The HTTP API reads the output through a function of its own, `api_execution_output`, so the
previous version's `api_timeline` keeps its columns. Downgrading drops both new functions and the
column. Frozen: later changes go in new revisions.

Revision ID: q0013output
Revises: q0012keyed
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0013output"
down_revision: str | None = "q0012keyed"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
ALTER TABLE vigil_queue.executions ADD COLUMN output jsonb NULL;
"""

DOWNGRADE = """
DROP FUNCTION IF EXISTS vigil_queue.worker_settle_succeeded(timestamptz, text[], smallint[], uuid[], text[], text, text);
DROP FUNCTION IF EXISTS vigil_queue.api_execution_output(text);
ALTER TABLE vigil_queue.executions DROP COLUMN output;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
