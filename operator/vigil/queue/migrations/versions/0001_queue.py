"""The queue store: jobs (the catalogue), executions (leased work), attempts (history), once_marks.

PostgreSQL only (the queue leases with FOR UPDATE SKIP LOCKED, which SQLite does
not have), all in the `vigil_queue` schema so the store can share the history
database without its `attempts` meeting the history's. Frozen: later changes go in new revisions.

Revision ID: q0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
CREATE TABLE vigil_queue.jobs (
    job_id        text PRIMARY KEY,
    queue         text NOT NULL,
    task          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority      smallint NOT NULL DEFAULT 0,
    tenant        text NOT NULL DEFAULT '',
    max_attempts  smallint NOT NULL CHECK (max_attempts >= 1),
    enabled       boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL
);

CREATE TABLE vigil_queue.executions (
    execution_id      text PRIMARY KEY,
    job_id            text NULL REFERENCES vigil_queue.jobs (job_id) ON DELETE SET NULL,
    queue             text NOT NULL,
    task              text NOT NULL,
    payload           jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority          smallint NOT NULL DEFAULT 0,
    tenant            text NOT NULL DEFAULT '',
    state             text NOT NULL CHECK (state IN ('ready', 'leased', 'succeeded', 'dead')),
    attempt           smallint NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    max_attempts      smallint NOT NULL CHECK (max_attempts >= 1),
    lease_owner       text NULL,
    lease_expires_at  timestamptz NULL,
    run_after         timestamptz NOT NULL,
    scheduled_for     timestamptz NOT NULL,
    idempotency_key   text NULL,
    created_at        timestamptz NOT NULL,
    finished_at       timestamptz NULL,
    last_error        text NULL,
    CONSTRAINT executions_idempotency UNIQUE (queue, idempotency_key),
    CONSTRAINT executions_lease CHECK ((state = 'leased') = (lease_owner IS NOT NULL))
);
-- Leasing walks the tenants with ready work, then each one's head in (priority, run_after) order.
CREATE INDEX executions_ready ON vigil_queue.executions (queue, tenant, priority, run_after)
    WHERE state = 'ready';
CREATE INDEX executions_leased ON vigil_queue.executions (queue, lease_expires_at)
    WHERE state = 'leased';
CREATE INDEX executions_dead ON vigil_queue.executions (queue, finished_at)
    WHERE state = 'dead';

CREATE TABLE vigil_queue.attempts (
    execution_id  text NOT NULL,
    attempt       smallint NOT NULL,
    worker        text NOT NULL,
    outcome       text NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'lease_expired')),
    started_at    timestamptz NULL,
    finished_at   timestamptz NOT NULL,
    error         text NULL,
    duplicate     boolean NOT NULL DEFAULT false,
    PRIMARY KEY (execution_id, attempt)
);

CREATE TABLE vigil_queue.once_marks (
    execution_id  text NOT NULL,
    key           text NOT NULL,
    attempt       smallint NOT NULL,
    worker        text NOT NULL,
    at            timestamptz NOT NULL,
    PRIMARY KEY (execution_id, key)
);
"""

DOWNGRADE = """
DROP TABLE vigil_queue.once_marks;
DROP TABLE vigil_queue.attempts;
DROP TABLE vigil_queue.executions;
DROP TABLE vigil_queue.jobs;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
