"""Attempts by day: `attempts` becomes range-partitioned on `day`, one partition per UTC day.

`day` is the UTC day of the execution's `scheduled_for`, which never changes, so
every attempt of one execution lands in one partition and (execution_id, attempt)
stays unique with `day` in the key (PostgreSQL requires the partition key in a
unique key of a partitioned table). Retention is then a DROP of a day's partition
instead of a DELETE of millions of rows; `vigil.queue.attempt_days` makes the daily
partitions and drops them. The DEFAULT partition takes any day no partition
covers, so an insert never fails.

The rows already there move over in this transaction, each under its execution's
day (its finish day when the execution was purged), all into DEFAULT: maintenance
moves the days it keeps into their own partitions on its first round and deletes
the older ones in batches. Downgrading copies every row back into a plain table.
Frozen: later changes go in new revisions.

Revision ID: q0007days
Revises: q0005watch
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0007days"
down_revision: str | None = "q0005watch"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
ALTER TABLE vigil_queue.attempts RENAME TO attempts_unpartitioned;
ALTER INDEX vigil_queue.attempts_pkey RENAME TO attempts_unpartitioned_pkey;

-- The key leads with execution_id: a read by execution (a timeline, the watchdog) is one index
-- probe per partition, and one probe in all when it names the day too.
CREATE TABLE vigil_queue.attempts (
    day           date NOT NULL,
    execution_id  text NOT NULL,
    attempt       smallint NOT NULL,
    worker        text NOT NULL,
    outcome       text NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'lease_expired')),
    started_at    timestamptz NULL,
    finished_at   timestamptz NOT NULL,
    error         text NULL,
    duplicate     boolean NOT NULL DEFAULT false,
    PRIMARY KEY (execution_id, attempt, day)
) PARTITION BY RANGE (day);
CREATE TABLE vigil_queue.attempts_default
    PARTITION OF vigil_queue.attempts DEFAULT;

INSERT INTO vigil_queue.attempts
    (day, execution_id, attempt, worker, outcome, started_at, finished_at, error, duplicate)
SELECT COALESCE((e.scheduled_for AT TIME ZONE 'UTC')::date, (a.finished_at AT TIME ZONE 'UTC')::date),
       a.execution_id, a.attempt, a.worker, a.outcome, a.started_at, a.finished_at, a.error, a.duplicate
FROM vigil_queue.attempts_unpartitioned AS a
LEFT JOIN vigil_queue.executions AS e ON e.execution_id = a.execution_id;

DROP TABLE vigil_queue.attempts_unpartitioned;
"""

DOWNGRADE = """
ALTER TABLE vigil_queue.attempts RENAME TO attempts_by_day;
ALTER INDEX vigil_queue.attempts_pkey RENAME TO attempts_by_day_pkey;

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

INSERT INTO vigil_queue.attempts
    (execution_id, attempt, worker, outcome, started_at, finished_at, error, duplicate)
SELECT execution_id, attempt, worker, outcome, started_at, finished_at, error, duplicate
FROM vigil_queue.attempts_by_day
ON CONFLICT (execution_id, attempt) DO NOTHING;

-- Its partitions go with it.
DROP TABLE vigil_queue.attempts_by_day;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
