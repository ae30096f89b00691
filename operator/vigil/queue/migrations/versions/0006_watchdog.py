"""The watchdog's index: each recurring job's last success, one index probe.

`executions_job_succeeded` holds a job's succeeded executions by finish time, so
"when did job J last succeed" is a backward probe of one index page, and the
volume tier's overdue check (`vigil.queue.watchdog`) reads it for each watched job
inside one statement. An index rather than a `jobs.last_success_at` column
written when a success settles: the acknowledgement stays a one-table update
(a column would take a row lock on the job in the workers' hot path, beside the
trigger's own update of `jobs.next_run`, in orders neither controls), and the
index costs one more index entry per success, which the partial index
`executions_succeeded` already makes non-HOT. Frozen: later changes go in new revisions.

Revision ID: q0005watch
Revises: q0003list
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0005watch"
down_revision: str | None = "q0003list"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
CREATE INDEX executions_job_succeeded ON vigil_queue.executions (job_id, finished_at)
    WHERE state = 'succeeded' AND job_id IS NOT NULL;
"""

DOWNGRADE = """
DROP INDEX vigil_queue.executions_job_succeeded;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
