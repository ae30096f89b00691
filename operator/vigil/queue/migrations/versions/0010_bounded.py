"""The store is bounded: per-namespace quotas, and finished executions leave after a retention.

Quotas. `namespace_quotas` holds, per namespace, what it keeps unfinished — executions ready
or leased, and the bytes of their payloads' JSON text (`octet_length(payload::text)`) — beside
its limits (NULL: none). The row of namespace '*' (no namespace has that name) holds the
chart's defaults, copied into a namespace's row when its first execution arrives. Every path
that adds an unfinished execution (QueueStore.submit, submit_job, retry, the trigger's fire)
admits it first with one conditional UPDATE of that one row (`quota_admit`), in the
transaction that inserts it: the check costs one primary-key probe however many rows the
namespace holds. Nothing that ends an execution (settling, leasing, cancelling) touches the
row — the workers' statements and the lease's plan are unchanged, and no hot row sits in
their path — so the count runs ahead of the truth as executions finish, and the leader's
TaskQueue pass recounts it: one statement counts the unfinished rows and reads the running
totals of admissions (`admitted`, `admitted_bytes`) in one snapshot, then each namespace's row
is set to that count plus what was admitted since (`quota_counts`, `quota_recount`). No lock
is held over the count, and no admission is lost to it: the counters never hold fewer than the
namespace keeps, and at most one pass's worth of finished work more.

Retention. Succeeded and cancelled executions past their queue's retention are deleted in
bounded batches through partial indexes (`executions_succeeded`, and `executions_cancelled`
made here), with their once_marks and, for one-off jobs, their job rows, in the same
statement. Not partitions: `executions` is the live table every lease, heartbeat and
settlement reads by primary key and through its partial indexes; partitioning it by
`finished_at` would put every unfinished row in one partition whose key changes when it
finishes (a row moving between partitions on every settlement: a delete and an insert in the
workers' hot path, and an execution_id no longer unique across partitions without the key in
it), and a separate "finished" table would make every settlement a move. Deleting by index in
batches changes none of those statements or their plans, touches only rows that can no longer
change, and leaves the space to autovacuum. A recurring job's newest success is kept past the
retention: the watchdog's last success reads it (`executions_job_succeeded`).

Deleted jobs (`deleted_at`) leave after the same retention (`jobs_deleted`, a partial index of
the few deleted rows). once_marks whose execution is gone already (deleted before this
revision) are deleted here once; from now on they go with their execution.

Revision ID: q0010bounded
Revises: q0009reason
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0010bounded"
down_revision: str | None = "q0009reason"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
-- The namespace of a queue key "NS/NAME"; '' for a bare NAME (a queue no TaskQueue declares).
CREATE FUNCTION vigil_queue.namespace_of(queue text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN strpos(queue, '/') > 0 THEN split_part(queue, '/', 1) ELSE '' END;

CREATE TABLE vigil_queue.namespace_quotas (
    namespace          text PRIMARY KEY,
    executions         bigint NOT NULL DEFAULT 0 CHECK (executions >= 0),
    payload_bytes      bigint NOT NULL DEFAULT 0 CHECK (payload_bytes >= 0),
    max_executions     bigint NULL CHECK (max_executions >= 0),
    max_payload_bytes  bigint NULL CHECK (max_payload_bytes >= 0),
    admitted           bigint NOT NULL DEFAULT 0,  -- running totals of admissions, for the recount
    admitted_bytes     bigint NOT NULL DEFAULT 0,
    counted_at         timestamptz NULL
);
INSERT INTO vigil_queue.namespace_quotas (namespace) VALUES ('*');
INSERT INTO vigil_queue.namespace_quotas (namespace, executions, payload_bytes)
SELECT vigil_queue.namespace_of(queue), count(*), sum(octet_length(payload::text))
FROM vigil_queue.executions WHERE state IN ('ready', 'leased')
GROUP BY 1;

CREATE INDEX executions_cancelled ON vigil_queue.executions (queue, finished_at)
    WHERE state = 'cancelled';
CREATE INDEX jobs_deleted ON vigil_queue.jobs (deleted_at)
    WHERE deleted_at IS NOT NULL;

DELETE FROM vigil_queue.once_marks AS m
WHERE NOT EXISTS (SELECT 1 FROM vigil_queue.executions AS e WHERE e.execution_id = m.execution_id);
"""

DOWNGRADE = """
DROP INDEX vigil_queue.jobs_deleted;
DROP INDEX vigil_queue.executions_cancelled;
DROP TABLE vigil_queue.namespace_quotas;
DROP FUNCTION vigil_queue.namespace_of(text);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
