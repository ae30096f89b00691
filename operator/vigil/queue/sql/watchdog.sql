-- The volume tier's watchdog (vigil/queue/watchdog.py) and its watch_summaries table: a fixed number of
-- statements a pass, whatever the catalogue's size; rows come back only for what is in trouble.
-- Named blocks (`-- name: NAME`) with psycopg's %(name)s parameters; every time is a parameter.

-- name: watchdog_overdue
-- Enabled recurring jobs with an expected interval and no success within it since their last success
-- (or their creation): the necessary condition only; vigil.core.watchdog.assess_overdue decides the
-- verdict and its reason from the facts read here. A job's last success is on its own row
-- (last_success_at, written by settle_succeeded), so the watched jobs are one read of the jobs
-- table, no probe of the executions per job, and only the overdue ones are kept and ordered (a
-- healthy job costs its row's read); only those shown (at most `limit`) read their executions.
-- At most `limit` jobs come back, each queue's most overdue first (with
-- the queue's count of overdue jobs), and for each the facts of its newest `recent` executions: a
-- leased one runs since its lease began (its due time for a row leased before leased_at existed).
WITH overdue AS MATERIALIZED (
    SELECT j.job_id, j.queue, j.created_at, j.expected_max_interval, j.last_success_at AS last_success, d.deadline,
           count(*) OVER (PARTITION BY j.queue) AS in_queue,
           row_number() OVER (PARTITION BY j.queue ORDER BY d.deadline, j.job_id) AS turn
    FROM vigil_queue.jobs AS j
    CROSS JOIN LATERAL (
        SELECT GREATEST(COALESCE(j.last_success_at, j.created_at), j.created_at) + j.expected_max_interval AS deadline
    ) AS d
    WHERE j.enabled AND j.cron IS NOT NULL AND j.expected_max_interval IS NOT NULL
      AND j.created_at + j.expected_max_interval < %(now)s AND d.deadline < %(now)s
),
shown AS (
    SELECT * FROM overdue ORDER BY turn, deadline, job_id LIMIT %(limit)s
)
SELECT sh.job_id, sh.queue, sh.created_at, sh.expected_max_interval, sh.last_success, sh.in_queue,
       r.last_fired, r.ready_since, r.running_since, r.last_failure
FROM shown AS sh
CROSS JOIN LATERAL (
    SELECT max(e.created_at) AS last_fired,
           min(e.run_after) FILTER (WHERE e.state = 'ready') AS ready_since,
           min(COALESCE(e.leased_at, e.run_after)) FILTER (WHERE e.state = 'leased') AS running_since,
           GREATEST(max(e.finished_at) FILTER (WHERE e.state = 'dead'), max(f.finished_at)) AS last_failure
    FROM (SELECT x.execution_id, x.created_at, x.run_after, x.leased_at, x.state, x.finished_at, x.scheduled_for
          FROM vigil_queue.executions AS x WHERE x.job_id = sh.job_id
          ORDER BY x.scheduled_for DESC LIMIT %(recent)s) AS e
    LEFT JOIN LATERAL (
        SELECT max(a.finished_at) AS finished_at FROM vigil_queue.attempts AS a
        WHERE a.execution_id = e.execution_id AND a.day = (e.scheduled_for AT TIME ZONE 'UTC')::date
          AND a.outcome <> 'succeeded'
    ) AS f ON true
) AS r
ORDER BY sh.queue, sh.deadline, sh.job_id;

-- name: watch_summarise
-- Each declared queue's share of the pass (the TaskQueue's JobsOverdue and ChainBroken conditions
-- read it): the queues in `queues` with their counts and first jobs, every other declared queue with
-- none; the broken chains only in a pass that ran the audit (`audited`), else the last audit's stay.
-- One row per declared queue, rewritten each pass; the rows of undeclared queues go.
WITH gone AS (
    DELETE FROM vigil_queue.watch_summaries AS s
    WHERE NOT EXISTS (SELECT 1 FROM vigil_queue.queues AS q WHERE q.queue = s.queue)
)
INSERT INTO vigil_queue.watch_summaries AS s
    (queue, checked_at, overdue, overdue_jobs, audited_at, broken, broken_jobs)
SELECT q.queue, %(now)s, COALESCE(r.overdue, 0), COALESCE(r.overdue_jobs, '[]'::jsonb),
       CASE WHEN %(audited)s THEN %(now)s::timestamptz END,
       CASE WHEN %(audited)s THEN COALESCE(r.broken, 0) END,
       CASE WHEN %(audited)s THEN COALESCE(r.broken_jobs, '[]'::jsonb) END
FROM vigil_queue.queues AS q
LEFT JOIN unnest(%(queues)s::text[], %(overdue)s::integer[], %(overdue_jobs)s::jsonb[], %(broken)s::integer[],
                 %(broken_jobs)s::jsonb[]) AS r(queue, overdue, overdue_jobs, broken, broken_jobs)
  ON r.queue = q.queue
ON CONFLICT (queue) DO UPDATE SET
    checked_at = excluded.checked_at, overdue = excluded.overdue, overdue_jobs = excluded.overdue_jobs,
    audited_at = COALESCE(excluded.audited_at, s.audited_at),
    broken = CASE WHEN excluded.audited_at IS NULL THEN s.broken ELSE excluded.broken END,
    broken_jobs = CASE WHEN excluded.audited_at IS NULL THEN s.broken_jobs ELSE excluded.broken_jobs END;

-- name: watchdog_dead_letters
-- Each queue's dead letters still kept: how many, and since when the oldest died (executions_dead).
SELECT queue, count(*) AS dead, min(finished_at) AS oldest
FROM vigil_queue.executions WHERE state = 'dead'
GROUP BY queue;

-- name: watchdog_oldest_ready
-- The oldest ready execution of each (queue, tenant, priority) with ready work: a skip scan of the
-- ready index (one probe per group, however many rows each holds), the oldest groups first, at most
-- `limit` of them.
WITH RECURSIVE heads AS (
    (SELECT e.queue, e.tenant, e.priority FROM vigil_queue.executions AS e
     WHERE e.state = 'ready' ORDER BY e.queue, e.tenant, e.priority LIMIT 1)
    UNION ALL
    SELECT n.queue, n.tenant, n.priority FROM heads AS h CROSS JOIN LATERAL (
        SELECT e.queue, e.tenant, e.priority FROM vigil_queue.executions AS e
        WHERE e.state = 'ready' AND (e.queue, e.tenant, e.priority) > (h.queue, h.tenant, h.priority)
        ORDER BY e.queue, e.tenant, e.priority LIMIT 1) AS n
)
SELECT h.queue, h.tenant, h.priority, o.run_after FROM heads AS h CROSS JOIN LATERAL (
    SELECT e.run_after FROM vigil_queue.executions AS e
    WHERE e.state = 'ready' AND e.queue = h.queue AND e.tenant = h.tenant AND e.priority = h.priority
    ORDER BY e.run_after LIMIT 1) AS o
ORDER BY o.run_after, h.queue, h.tenant, h.priority
LIMIT %(limit)s;
