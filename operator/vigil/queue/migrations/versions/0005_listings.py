"""A queue's jobs listed a page at a time (`kubectl vigil queue jobs`), newest first.

`GET /v1/namespaces/{ns}/taskqueues/{q}/jobs` walks a queue's jobs by (created_at, job_id)
from a cursor; without this index that is a scan of every job of every queue. The dead
letters' listing needs nothing new: it walks `executions_dead` (queue, finished_at).

Revision ID: q0003list
Revises: q0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0003list"
down_revision: str | None = "q0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
CREATE INDEX jobs_queue ON vigil_queue.jobs (queue, created_at, job_id);
"""

DOWNGRADE = """
DROP INDEX vigil_queue.jobs_queue;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
