"""The HTTP API's needs: a `cancelled` state (and who cancelled), executions found by job.

`cancelled` is a state of its own rather than a dead letter: a cancelled execution is
never run and never retried by the store, is not a failure, and must not age in the
dead-letter reports. An acknowledgement from a worker that still ran it matches nothing
(every acknowledgement is conditional on `state = 'leased'`), so it cannot revive it.
The index serves `GET /v1/jobs/{id}` (a job's newest executions) and `DELETE`, which
cancels a job's unfinished executions.

Revision ID: q0002api
Revises: q0001
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0002api"
down_revision: str | None = "q0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
ALTER TABLE vigil_queue.executions DROP CONSTRAINT executions_state_check;
ALTER TABLE vigil_queue.executions ADD CONSTRAINT executions_state_check
    CHECK (state IN ('ready', 'leased', 'succeeded', 'dead', 'cancelled'));
ALTER TABLE vigil_queue.executions ADD COLUMN cancelled_by text NULL;
CREATE INDEX executions_job ON vigil_queue.executions (job_id, scheduled_for)
    WHERE job_id IS NOT NULL;
"""

DOWNGRADE = """
DROP INDEX vigil_queue.executions_job;
ALTER TABLE vigil_queue.executions DROP COLUMN cancelled_by;
DELETE FROM vigil_queue.executions WHERE state = 'cancelled';
ALTER TABLE vigil_queue.executions DROP CONSTRAINT executions_state_check;
ALTER TABLE vigil_queue.executions ADD CONSTRAINT executions_state_check
    CHECK (state IN ('ready', 'leased', 'succeeded', 'dead'));
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
