"""Each job's last success on its own row: `jobs.last_success_at`.

The watchdog's overdue statement found each watched job's last success by one probe of
`executions_job_succeeded` per job: 6.0 s at 1,000,000 watched jobs (every one overdue; 2.5 s
now, 0.25 s with none overdue: `python -m bench.backlog --catalogue-only`). Now the row holds
it: `settle_succeeded` writes the finish time of a job's execution it settles onto the job's row
in the same statement, and only ever forward (an older success acknowledged later leaves a newer
one in place), so the watchdog reads one row per watched job.

The column is backfilled here from the succeeded executions the store still holds (their newest
finish per recurring job: the one retention keeps; one-off jobs' rows stay NULL, as the watchdog
watches recurring jobs only), so an upgraded store's watchdog misses no success.
The backfill rewrites every job row that has a success, in the migration's transaction, which
holds the jobs table (the trigger waits) while it runs: seconds per million jobs.

A worker of the previous version acknowledges through `worker_settle_succeeded` as that version
installed it until it is upgraded; the store installs this version's body under the same
signature (vigil.queue.functions, after the migrations, in the same transaction), so its
successes reach the row too. A worker of the version before outputs were kept (q0012keyed) calls
the older signature, without outputs, which q0013output left in place with that version's body:
it is replaced here by the same statement that also records the job's success (frozen below).
A success acknowledged through a previous body while the migration's transaction is still open
is not on the row until that job's next success (the backfill has read the executions by then).
Downgrading drops the column and gives the older signature back its previous body. Frozen: later
changes go in new revisions.

Revision ID: q0014success
Revises: q0013output
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "q0014success"
down_revision: str | None = "q0013output"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = """
ALTER TABLE vigil_queue.jobs ADD COLUMN last_success_at timestamptz NULL;
UPDATE vigil_queue.jobs AS j SET last_success_at = s.finished_at
FROM (SELECT e.job_id, max(e.finished_at) AS finished_at FROM vigil_queue.executions AS e
      WHERE e.state = 'succeeded' AND e.job_id IS NOT NULL GROUP BY e.job_id) AS s
WHERE j.job_id = s.job_id AND j.cron IS NOT NULL;
"""

#: The older `worker_settle_succeeded` (no outputs), where a store installed it: its body, the
#: job's success recorded too (SUCCESS_CTE) or not (as q0012keyed's version released it).
LEGACY_SETTLE = """
DO $legacy$
BEGIN
    IF to_regprocedure('vigil_queue.worker_settle_succeeded(timestamptz, text[], smallint[], uuid[], text, text)')
       IS NOT NULL THEN
        CREATE OR REPLACE FUNCTION vigil_queue.worker_settle_succeeded(
            p_now timestamptz, p_execution_ids text[], p_attempts smallint[], p_tokens uuid[], p_queue text,
            p_worker text) RETURNS TABLE (execution_id text)
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp SET jit = off
        AS $worker$
        #variable_conflict use_column
        BEGIN
        PERFORM vigil_queue.admit_caller(p_queue);
        RETURN QUERY WITH settled AS (
        UPDATE vigil_queue.executions AS e
        SET state = 'succeeded', attempt = a.attempt, lease_owner = NULL, lease_expires_at = NULL, leased_at = NULL,
            finished_at = p_now, last_error = NULL
        FROM unnest(p_execution_ids::text[], p_attempts::smallint[], p_tokens::uuid[]) AS a(execution_id, attempt, token)
        WHERE e.execution_id = a.execution_id AND e.queue = p_queue AND e.lease_token = a.token
          AND (
            (e.attempt = a.attempt AND e.state = 'leased' AND e.lease_owner = p_worker)
            OR (
              ((e.state = 'ready' AND e.attempt = a.attempt + 1) OR (e.state = 'dead' AND e.attempt = a.attempt))
              AND EXISTS (
                SELECT 1 FROM vigil_queue.attempts AS x
                WHERE x.execution_id = a.execution_id AND x.attempt = a.attempt
                  AND x.day = (e.scheduled_for AT TIME ZONE 'UTC')::date
                  AND x.outcome = 'lease_expired' AND x.worker = p_worker
              )
            )
          )
        RETURNING e.execution_id, e.job_id, e.finished_at
        )SUCCESS_CTE
        SELECT s.execution_id FROM settled AS s;
        END
        $worker$;
    END IF;
END
$legacy$;
"""

SUCCESS_CTE = """,
        recorded AS (
            UPDATE vigil_queue.jobs AS j SET last_success_at = GREATEST(j.last_success_at, s.finished_at)
            FROM (SELECT job_id, max(finished_at) AS finished_at FROM settled
                  WHERE job_id IS NOT NULL GROUP BY job_id) AS s
            WHERE j.job_id = s.job_id AND j.cron IS NOT NULL
              AND (j.last_success_at IS NULL OR j.last_success_at < s.finished_at)
        )
"""

DOWNGRADE = """
ALTER TABLE vigil_queue.jobs DROP COLUMN last_success_at;
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    op.execute(LEGACY_SETTLE.replace("SUCCESS_CTE", SUCCESS_CTE))


def downgrade() -> None:
    # the older signature's body first: it names the column the downgrade drops
    op.execute(LEGACY_SETTLE.replace("SUCCESS_CTE", ""))
    op.execute(DOWNGRADE)
