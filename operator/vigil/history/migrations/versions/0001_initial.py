"""The attempts table: one row per execution attempt (schema.sql shows the result).

On PostgreSQL the table is partitioned by day of `scheduled_for`, and the primary
key therefore includes it; on SQLite it is a plain table keyed on
(execution_id, attempt). Frozen: later changes go in new revisions.

Revision ID: 0001
Revises:
Create Date: 2026-05-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _columns() -> list[sa.Column[object]]:
    def when(name: str, *, nullable: bool = False) -> sa.Column[object]:
        return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)

    def text(name: str) -> sa.Column[object]:
        return sa.Column(name, sa.Text(), nullable=False)

    return [
        text("execution_id"),
        sa.Column("attempt", sa.SmallInteger(), nullable=False),
        text("namespace"),
        text("job"),
        text("job_uid"),
        text("priority"),
        text("state"),
        text("reason"),
        when("scheduled_for"),
        when("started_at", nullable=True),
        when("finished_at", nullable=True),
        text("pod"),
        text("error"),
        when("updated_at"),
    ]


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.create_table(
            "attempts",
            *_columns(),
            sa.PrimaryKeyConstraint(
                "execution_id", "attempt", "scheduled_for", name="attempts_pkey"
            ),
            postgresql_partition_by="RANGE (scheduled_for)",
        )
    else:
        op.create_table(
            "attempts",
            *_columns(),
            sa.PrimaryKeyConstraint("execution_id", "attempt", name="attempts_pkey"),
        )
    op.create_index(
        "attempts_job_recent", "attempts", ["namespace", "job", sa.text("scheduled_for DESC")]
    )


def downgrade() -> None:
    op.drop_index("attempts_job_recent", table_name="attempts")
    op.drop_table("attempts")
