"""An occurrence that ends without firing keeps why: `schedule_buckets.reason`.

The bucket row is the volume tier's ledger of a recurring job's occurrences
(`fired_at`, `outcome`, `execution_id`); a Failed or Missed one had its reason only
in the trigger's log. Now the trigger writes it beside the outcome — the reason
constant and its message, e.g. "LaunchRefused: payload.a: holds NUL ..." for a
rendered payload refused at fire time, or PostgreSQL's own words for a row it
refused (vigil.queue.trigger applies a batch so that such a row fails alone).
Cut to 1,024 characters by the trigger. Frozen: later changes go in new revisions.

Revision ID: q0009reason
Revises: q0008watch
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0009reason"
down_revision: str | None = "q0008watch"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
ALTER TABLE vigil_queue.schedule_buckets ADD COLUMN reason text NULL;
"""

DOWNGRADE = """
ALTER TABLE vigil_queue.schedule_buckets DROP COLUMN reason;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
