"""The recurring-job catalogue: jobs gain a schedule, and schedule_buckets holds each job's next occurrence.

`jobs` gains what a recurring job needs (cron, timezone, daylight-saving policy,
payload template, expected interval, the resolved jitter window, catch-up
policy, an idempotency key unique per queue, its shard, its next nominal time
and a soft delete). `schedule_buckets` is partitioned by range on `minute`, one
partition per hour, created ahead and dropped behind by
`vigil.queue.partitions`; its DEFAULT partition takes any minute no hourly
partition covers yet, so an insert never fails (docs/queue.md explains why).
Frozen: later changes go in new revisions.

Revision ID: q0002
Revises: q0002tq
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0002"
down_revision: str | None = "q0002tq"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
ALTER TABLE vigil_queue.jobs
    ADD COLUMN cron                   text NULL,
    ADD COLUMN timezone               text NOT NULL DEFAULT 'UTC',
    ADD COLUMN dst_gap                text NOT NULL DEFAULT 'Shift' CHECK (dst_gap IN ('Shift', 'Skip')),
    ADD COLUMN dst_overlap            text NOT NULL DEFAULT 'Once' CHECK (dst_overlap IN ('Once', 'Twice')),
    ADD COLUMN payload_template       jsonb NULL,
    ADD COLUMN expected_max_interval  interval NULL,
    ADD COLUMN jitter                 interval NOT NULL DEFAULT '0 seconds',
    ADD COLUMN catch_up_policy        text NOT NULL DEFAULT 'All'
                                      CHECK (catch_up_policy IN ('All', 'Latest', 'None')),
    ADD COLUMN catch_up_window        interval NOT NULL DEFAULT '5 minutes',
    ADD COLUMN catch_up_limit         integer NOT NULL DEFAULT 100 CHECK (catch_up_limit >= 0),
    ADD COLUMN idempotency_key        text NULL,
    ADD COLUMN shard                  smallint NOT NULL DEFAULT 0 CHECK (shard >= 0),
    ADD COLUMN next_run               timestamptz NULL,
    ADD COLUMN deleted_at             timestamptz NULL,
    ADD CONSTRAINT jobs_idempotency UNIQUE (queue, idempotency_key),
    ADD CONSTRAINT jobs_deleted CHECK (deleted_at IS NULL OR NOT enabled);

-- One row per occurrence waiting to fire (fired_at NULL) or handled (fired_at set, with its outcome:
-- Fired and its execution, Missed, Skipped, Failed). The unique key must hold the partition key;
-- minute is a function of (job_id, nominal) — fire_at is nominal plus the job's fixed jitter offset,
-- and a job's schedule never changes after it is catalogued — so it is unique per (job_id, nominal).
CREATE TABLE vigil_queue.schedule_buckets (
    minute        timestamptz NOT NULL,
    shard         smallint NOT NULL,
    job_id        text NOT NULL,
    nominal       timestamptz NOT NULL,
    fire_at       timestamptz NOT NULL,
    fired_at      timestamptz NULL,
    outcome       text NULL CHECK (outcome IN ('Fired', 'Missed', 'Skipped', 'Failed')),
    execution_id  text NULL,
    CONSTRAINT schedule_buckets_occurrence UNIQUE (job_id, nominal, minute),
    CONSTRAINT schedule_buckets_marked CHECK ((fired_at IS NULL) = (outcome IS NULL))
) PARTITION BY RANGE (minute);
-- A trigger pass reads its shard's unfired rows in fire order: fired rows leave this index.
CREATE INDEX schedule_buckets_due ON vigil_queue.schedule_buckets (shard, fire_at)
    WHERE fired_at IS NULL;
CREATE TABLE vigil_queue.schedule_buckets_default
    PARTITION OF vigil_queue.schedule_buckets DEFAULT;
"""

DOWNGRADE = """
DROP TABLE vigil_queue.schedule_buckets;
ALTER TABLE vigil_queue.jobs
    DROP CONSTRAINT jobs_deleted,
    DROP CONSTRAINT jobs_idempotency,
    DROP COLUMN deleted_at,
    DROP COLUMN next_run,
    DROP COLUMN shard,
    DROP COLUMN idempotency_key,
    DROP COLUMN catch_up_limit,
    DROP COLUMN catch_up_window,
    DROP COLUMN catch_up_policy,
    DROP COLUMN jitter,
    DROP COLUMN expected_max_interval,
    DROP COLUMN payload_template,
    DROP COLUMN dst_overlap,
    DROP COLUMN dst_gap,
    DROP COLUMN timezone,
    DROP COLUMN cron;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
