"""The workflow_events table: one row per entry of a workflow's history (schema.sql shows the result).

Keyed on (workflow_uid, seq) on both databases and not partitioned: retention
deletes a workflow's rows together, found through the index on `at`. The entry
itself is `data`: JSONB on PostgreSQL, JSON (text) on SQLite. Frozen: later
changes go in new revisions.

Revision ID: 0002
Revises: 0001
Create Date: 2026-06-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json = postgresql.JSONB() if op.get_context().dialect.name == "postgresql" else sa.JSON()
    op.create_table(
        "workflow_events",
        sa.Column("workflow_uid", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("workflow", sa.Text(), nullable=False),
        sa.Column("event", sa.Text(), nullable=False),
        sa.Column("step", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", json, nullable=False),
        sa.PrimaryKeyConstraint("workflow_uid", "seq", name="workflow_events_pkey"),
    )
    op.create_index("workflow_events_workflow", "workflow_events", ["namespace", "workflow", "seq"])
    op.create_index("workflow_events_at", "workflow_events", ["at"])


def downgrade() -> None:
    op.drop_index("workflow_events_at", table_name="workflow_events")
    op.drop_index("workflow_events_workflow", table_name="workflow_events")
    op.drop_table("workflow_events")
