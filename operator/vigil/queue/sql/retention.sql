-- Retention (vigil/queue/bounds.py): finished executions, dead letters and deleted jobs leave the store,
-- a bounded batch a pass.
-- Named blocks (`-- name: NAME`) with psycopg's %(name)s parameters; every time is a parameter.

-- name: purge_dead
-- Dead executions past their queue's deadLetter.retention leave the store, a bounded batch a pass,
-- with their once_marks (nothing else would ever delete those) in the same statement.
WITH gone AS (
    DELETE FROM vigil_queue.executions AS e
    WHERE e.execution_id IN (
        SELECT d.execution_id
        FROM unnest(%(queues)s::text[], %(before)s::timestamptz[]) AS k(queue, before)
        CROSS JOIN LATERAL (
            SELECT x.execution_id FROM vigil_queue.executions AS x
            WHERE x.queue = k.queue AND x.state = 'dead' AND x.finished_at < k.before
            ORDER BY x.finished_at LIMIT %(limit)s) AS d
    )
    RETURNING e.execution_id
),
marks AS (
    DELETE FROM vigil_queue.once_marks AS m USING gone AS g WHERE m.execution_id = g.execution_id
)
SELECT count(*) FROM gone;

-- name: purge_finished
-- Succeeded and cancelled executions that finished before their queue's retention leave the store, a
-- bounded batch per queue and pass, walked by the partial indexes executions_succeeded and
-- executions_cancelled: the queues with such rows are found by a skip scan (one probe per queue),
-- each with its own retention (its TaskQueue's) or the default. A recurring job's newest success
-- stays (found by one probe of executions_job_succeeded): the watchdog no longer reads it (its job's
-- row holds last_success_at), but it is the succeeded execution a job's history still shows, as
-- before. Their once_marks go
-- in the same statement, and so do one-off jobs' rows (a one-off job is its one execution).
WITH RECURSIVE finished_queues AS (
    (SELECT e.queue FROM vigil_queue.executions AS e WHERE e.state = 'succeeded' ORDER BY e.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT e.queue FROM vigil_queue.executions AS e
            WHERE e.state = 'succeeded' AND e.queue > f.queue ORDER BY e.queue LIMIT 1)
    FROM finished_queues AS f WHERE f.queue IS NOT NULL
),
cancelled_queues AS (
    (SELECT e.queue FROM vigil_queue.executions AS e WHERE e.state = 'cancelled' ORDER BY e.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT e.queue FROM vigil_queue.executions AS e
            WHERE e.state = 'cancelled' AND e.queue > c.queue ORDER BY e.queue LIMIT 1)
    FROM cancelled_queues AS c WHERE c.queue IS NOT NULL
),
kept AS (
    SELECT k.queue, %(now)s::timestamptz - COALESCE(r.keep, %(default_keep)s::interval) AS before
    FROM (SELECT queue FROM finished_queues UNION SELECT queue FROM cancelled_queues) AS k
    LEFT JOIN unnest(%(queues)s::text[], %(keeps)s::interval[]) AS r(queue, keep) ON r.queue = k.queue
    WHERE k.queue IS NOT NULL
),
chosen AS (
    SELECT s.execution_id FROM kept AS k CROSS JOIN LATERAL (
        SELECT x.execution_id FROM vigil_queue.executions AS x
        WHERE x.queue = k.queue AND x.state = 'succeeded' AND x.finished_at < k.before
          AND (x.job_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM vigil_queue.jobs AS j WHERE j.job_id = x.job_id AND j.cron IS NOT NULL)
               OR EXISTS (SELECT 1 FROM vigil_queue.executions AS n
                          WHERE n.job_id = x.job_id AND n.state = 'succeeded' AND n.finished_at > x.finished_at))
        ORDER BY x.finished_at LIMIT %(limit)s) AS s
    UNION ALL
    SELECT c.execution_id FROM kept AS k CROSS JOIN LATERAL (
        SELECT x.execution_id FROM vigil_queue.executions AS x
        WHERE x.queue = k.queue AND x.state = 'cancelled' AND x.finished_at < k.before
        ORDER BY x.finished_at LIMIT %(limit)s) AS c
),
gone AS (
    DELETE FROM vigil_queue.executions AS e USING chosen AS c
    WHERE e.execution_id = c.execution_id AND e.state IN ('succeeded', 'cancelled')
    RETURNING e.execution_id, e.job_id
),
marks AS (
    DELETE FROM vigil_queue.once_marks AS m USING gone AS g WHERE m.execution_id = g.execution_id
),
one_offs AS (
    DELETE FROM vigil_queue.jobs AS j USING gone AS g WHERE j.job_id = g.job_id AND j.cron IS NULL
)
SELECT count(*) FROM gone;

-- name: purge_deleted_jobs
-- Jobs deleted (through the API or their ScheduledJob's removal) longer than the retention ago leave
-- the catalogue, a bounded batch a pass (the partial index jobs_deleted). Their executions stay
-- until their own retention (the key is set NULL); their bucket rows were marked when they were
-- deleted and go with their hour's partition.
DELETE FROM vigil_queue.jobs AS j
WHERE j.job_id IN (
    SELECT d.job_id FROM vigil_queue.jobs AS d
    WHERE d.deleted_at IS NOT NULL AND d.deleted_at < %(before)s
    ORDER BY d.deleted_at LIMIT %(limit)s
);
