"""The queues' declarations (TaskQueues, published by the operator) and what leasing and status need.

- `queues`: one row per TaskQueue, keyed "NS/NAME": what its spec declares, as workers read it
  (they need no Kubernetes access). Deleting the TaskQueue deletes the row.
- `executions_leased_tenant`: counts a tenant's leased executions (its cap) by an index-only scan.
- `executions_succeeded`: the succeeded rate of a queue without reading its history.

Revision ID: q0002tq
Revises: q0002api
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0002tq"
down_revision: str | None = "q0002api"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
CREATE TABLE vigil_queue.queues (
    queue                    text PRIMARY KEY,
    lease_seconds            double precision NOT NULL CHECK (lease_seconds > 0),
    heartbeat_seconds        double precision NOT NULL CHECK (heartbeat_seconds > 0),
    max_attempts             smallint NOT NULL CHECK (max_attempts >= 1),
    backoff_initial_seconds  double precision NOT NULL,
    backoff_factor           double precision NOT NULL,
    backoff_max_seconds      double precision NOT NULL,
    dead_retention_seconds   double precision NULL,
    tenant_max_concurrent    integer NULL,
    tenant_caps              jsonb NOT NULL DEFAULT '{}'::jsonb,
    priorities               jsonb NOT NULL DEFAULT '{}'::jsonb,
    objective_seconds        double precision NULL,
    generation               bigint NOT NULL DEFAULT 0,
    updated_at               timestamptz NOT NULL,
    CONSTRAINT queues_heartbeat CHECK (heartbeat_seconds < lease_seconds)
);
CREATE INDEX executions_leased_tenant ON vigil_queue.executions (queue, tenant)
    WHERE state = 'leased';
CREATE INDEX executions_succeeded ON vigil_queue.executions (queue, finished_at)
    WHERE state = 'succeeded';
"""

DOWNGRADE = """
DROP INDEX vigil_queue.executions_succeeded;
DROP INDEX vigil_queue.executions_leased_tenant;
DROP TABLE vigil_queue.queues;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
