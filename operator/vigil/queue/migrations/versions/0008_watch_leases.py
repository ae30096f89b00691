"""The watchdog reads when a lease began, and leaves each queue's verdicts for its TaskQueue.

`executions.leased_at` is when the current lease was taken (the lease statement's
`now`); the heartbeat keeps it, and every statement that ends a lease (settle,
acknowledge, expiry through settle, cancel) clears it with `lease_owner`. So
"running since" is the lease's start, not the time the execution became due: a
long wait for a worker is NotStarted, only a long-held lease is Overran. Rows
leased before this revision have none; the watchdog falls back to their due time.

`watch_summaries` holds, per declared queue, the volume watchdog's latest verdicts
(how many jobs are overdue, how many chains are broken, the first few of each with
their reasons), written in one statement per watchdog pass wherever the watchdog
runs (the trigger leader or `vigil watchdog`); the TaskQueue status pass reads it
into the `JobsOverdue` and `ChainBroken` conditions. Frozen: later changes go in new
revisions.

Revision ID: q0008watch
Revises: q0007days
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0008watch"
down_revision: str | None = "q0007days"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
ALTER TABLE vigil_queue.executions ADD COLUMN leased_at timestamptz NULL;

CREATE TABLE vigil_queue.watch_summaries (
    queue         text PRIMARY KEY,
    checked_at    timestamptz NOT NULL,
    overdue       integer NOT NULL CHECK (overdue >= 0),
    overdue_jobs  jsonb NOT NULL DEFAULT '[]'::jsonb,  -- [[job id, reason], ...], the first few
    audited_at    timestamptz NULL,                    -- NULL until an integrity audit has run
    broken        integer NULL CHECK (broken >= 0),
    broken_jobs   jsonb NULL
);
"""

DOWNGRADE = """
DROP TABLE vigil_queue.watch_summaries;
ALTER TABLE vigil_queue.executions DROP COLUMN leased_at;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
