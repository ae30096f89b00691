"""The tail of an attempt's log, kept once its pod is gone (schema.sql shows the result).

One row per attempt whose log the operator stored (its job's `spec.logs`), keyed like
the attempt, (execution_id, attempt): the last bytes of the main container's log, cut
to a bound at a character boundary, or an empty text and a `note` saying why the log
could not be read. Not partitioned on either database: a row is at most the tail bound
(64 KiB by default), and retention deletes rows by `scheduled_for` at the same whole-day
cutoff as the attempts. Frozen: later changes go in new revisions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "attempt_logs",
        sa.Column("execution_id", sa.Text, nullable=False),
        sa.Column("attempt", sa.SmallInteger, nullable=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("job", sa.Text, nullable=False),
        sa.Column("pod", sa.Text, nullable=False),
        sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=False),
        sa.Column("captured_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("truncated", sa.Boolean, nullable=False),
        sa.Column("log_bytes", sa.BigInteger, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("execution_id", "attempt", name="attempt_logs_pkey"),
    )
    op.create_index("attempt_logs_scheduled_for", "attempt_logs", ["scheduled_for"])


def downgrade() -> None:
    op.drop_index("attempt_logs_scheduled_for", table_name="attempt_logs")
    op.drop_table("attempt_logs")
