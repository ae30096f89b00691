"""The workflow's pinned definition, on the row of its first history entry (schema.sql shows the result).

A nullable `definition` column on workflow_events: entry 0 carries the definition the
history folds over (the Workflow's status.definition), every other entry NULL. It makes
the history readable once ttlAfterFinished has deleted the Workflow (`kubectl vigil
timeline`), and goes with the workflow's other rows under retention. Rows written before
this revision keep NULL. JSONB on PostgreSQL, JSON (text) on SQLite; adding a nullable
column rewrites no row on either. Frozen: later changes go in new revisions.

Revision ID: 0003
Revises: 0002
Create Date: 2026-07-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json = postgresql.JSONB() if op.get_context().dialect.name == "postgresql" else sa.JSON()
    op.add_column("workflow_events", sa.Column("definition", json, nullable=True))


def downgrade() -> None:
    op.drop_column("workflow_events", "definition")
