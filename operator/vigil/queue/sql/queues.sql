-- The queues table (TaskQueue declarations) and a queue's listings (`kubectl vigil queue …` through the
-- HTTP API), a bounded page each.
-- Named blocks (`-- name: NAME`) with psycopg's %(name)s parameters; every time is a parameter.

-- name: declare_queue
-- Publish a TaskQueue's declaration (the operator's leader); workers read it with `declared_queue`.
INSERT INTO vigil_queue.queues AS q
    (queue, lease_seconds, heartbeat_seconds, max_attempts, backoff_initial_seconds,
     backoff_factor, backoff_max_seconds, dead_retention_seconds, tenant_max_concurrent,
     tenant_caps, priorities, objective_seconds, generation, updated_at)
VALUES (%(queue)s, %(lease_seconds)s, %(heartbeat_seconds)s, %(max_attempts)s,
        %(backoff_initial_seconds)s, %(backoff_factor)s, %(backoff_max_seconds)s,
        %(dead_retention_seconds)s, %(tenant_max_concurrent)s, %(tenant_caps)s, %(priorities)s,
        %(objective_seconds)s, %(generation)s, %(now)s)
ON CONFLICT (queue) DO UPDATE SET
    lease_seconds = excluded.lease_seconds, heartbeat_seconds = excluded.heartbeat_seconds,
    max_attempts = excluded.max_attempts, backoff_initial_seconds = excluded.backoff_initial_seconds,
    backoff_factor = excluded.backoff_factor, backoff_max_seconds = excluded.backoff_max_seconds,
    dead_retention_seconds = excluded.dead_retention_seconds,
    tenant_max_concurrent = excluded.tenant_max_concurrent, tenant_caps = excluded.tenant_caps,
    priorities = excluded.priorities, objective_seconds = excluded.objective_seconds,
    generation = excluded.generation, updated_at = excluded.updated_at;

-- name: declared_queues
SELECT queue, generation FROM vigil_queue.queues;

-- name: undeclare_queues
-- The rows of TaskQueues that no longer exist: their workers fall back to their own flags.
DELETE FROM vigil_queue.queues WHERE queue = ANY(%(queues)s::text[]);

-- name: declared_queue
SELECT lease_seconds, heartbeat_seconds, max_attempts, backoff_initial_seconds, backoff_factor,
       backoff_max_seconds, dead_retention_seconds, tenant_max_concurrent, tenant_caps, priorities,
       objective_seconds
FROM vigil_queue.queues WHERE queue = %(queue)s;

-- name: queue_stats
-- What each queue's status shows, for many queues in one statement: every count and the oldest
-- age come from a partial index (the ready index's oldest per (tenant, priority), found by a skip
-- scan, so the oldest costs one probe per tenant and priority, not one per ready row), and the
-- volume watchdog's latest summary of the queue's jobs (watch_summarise; NULL until it ran).
SELECT k.queue,
       (SELECT count(*) FROM vigil_queue.executions AS e
        WHERE e.queue = k.queue AND e.state = 'ready') AS ready,
       (SELECT count(*) FROM vigil_queue.executions AS e
        WHERE e.queue = k.queue AND e.state = 'leased') AS leased,
       (SELECT count(*) FROM vigil_queue.executions AS e
        WHERE e.queue = k.queue AND e.state = 'dead') AS dead,
       (SELECT count(*) FROM vigil_queue.executions AS e
        WHERE e.queue = k.queue AND e.state = 'succeeded' AND e.finished_at > %(minute_ago)s) AS succeeded_minute,
       (SELECT count(*) FROM vigil_queue.executions AS e
        WHERE e.queue = k.queue AND e.state = 'dead' AND e.finished_at > %(minute_ago)s) AS dead_minute,
       (WITH RECURSIVE heads AS (
            (SELECT e.tenant, e.priority FROM vigil_queue.executions AS e
             WHERE e.queue = k.queue AND e.state = 'ready' ORDER BY e.tenant, e.priority LIMIT 1)
            UNION ALL
            SELECT n.tenant, n.priority FROM heads AS h CROSS JOIN LATERAL (
                SELECT e.tenant, e.priority FROM vigil_queue.executions AS e
                WHERE e.queue = k.queue AND e.state = 'ready'
                  AND (e.tenant, e.priority) > (h.tenant, h.priority)
                ORDER BY e.tenant, e.priority LIMIT 1) AS n
        )
        SELECT min(o.run_after) FROM heads AS h CROSS JOIN LATERAL (
            SELECT e.run_after FROM vigil_queue.executions AS e
            WHERE e.queue = k.queue AND e.state = 'ready' AND e.tenant = h.tenant
              AND e.priority = h.priority
            ORDER BY e.run_after LIMIT 1) AS o
        WHERE o.run_after <= %(now)s) AS oldest_ready,
       w.overdue, w.overdue_jobs, w.broken, w.broken_jobs
FROM unnest(%(queues)s::text[]) AS k(queue)
LEFT JOIN vigil_queue.watch_summaries AS w ON w.queue = k.queue;

-- name: queue_jobs
-- A queue's jobs, newest first, strictly after the cursor (created_at, job_id) when one is given
-- (the index jobs_queue), each with its newest execution (one probe of executions_job).
SELECT j.job_id, j.task, j.enabled, j.priority, j.tenant, j.created_at, x.execution_id, x.state
FROM vigil_queue.jobs AS j
LEFT JOIN LATERAL (
    SELECT e.execution_id, e.state FROM vigil_queue.executions AS e
    WHERE e.job_id = j.job_id ORDER BY e.scheduled_for DESC, e.execution_id DESC LIMIT 1) AS x ON true
WHERE j.queue = %(queue)s
  AND (%(after_at)s::timestamptz IS NULL OR (j.created_at, j.job_id) < (%(after_at)s, %(after_id)s))
ORDER BY j.created_at DESC, j.job_id DESC
LIMIT %(limit)s;

-- name: dead_letters
-- A queue's dead executions, oldest death first, strictly after the cursor (finished_at,
-- execution_id) when one is given: a walk of the partial index executions_dead.
SELECT e.execution_id, e.task, e.tenant, e.priority, e.attempt, e.max_attempts, e.scheduled_for,
       e.finished_at, e.last_error
FROM vigil_queue.executions AS e
WHERE e.queue = %(queue)s AND e.state = 'dead'
  AND (%(after_at)s::timestamptz IS NULL OR (e.finished_at, e.execution_id) > (%(after_at)s, %(after_id)s))
ORDER BY e.finished_at, e.execution_id
LIMIT %(limit)s;

-- name: queue_breakdown
-- A queue's ready, leased and dead executions per (priority, tenant), with the oldest due ready
-- one's run_after of each: the counts read the three partial indexes; the oldest is the skip scan
-- of queue_stats (one probe per (tenant, priority) with ready work), not a read of every ready row.
WITH RECURSIVE heads AS (
    (SELECT e.tenant, e.priority FROM vigil_queue.executions AS e
     WHERE e.queue = %(queue)s AND e.state = 'ready' ORDER BY e.tenant, e.priority LIMIT 1)
    UNION ALL
    SELECT n.tenant, n.priority FROM heads AS h CROSS JOIN LATERAL (
        SELECT e.tenant, e.priority FROM vigil_queue.executions AS e
        WHERE e.queue = %(queue)s AND e.state = 'ready' AND (e.tenant, e.priority) > (h.tenant, h.priority)
        ORDER BY e.tenant, e.priority LIMIT 1) AS n
), oldest AS (
    SELECT h.tenant, h.priority, o.run_after FROM heads AS h CROSS JOIN LATERAL (
        SELECT e.run_after FROM vigil_queue.executions AS e
        WHERE e.queue = %(queue)s AND e.state = 'ready' AND e.tenant = h.tenant AND e.priority = h.priority
        ORDER BY e.run_after LIMIT 1) AS o
), counted AS (
    SELECT e.priority, e.tenant, e.state, count(*) AS n FROM vigil_queue.executions AS e
    WHERE e.queue = %(queue)s AND e.state = 'ready' GROUP BY e.priority, e.tenant, e.state
    UNION ALL
    SELECT e.priority, e.tenant, e.state, count(*) FROM vigil_queue.executions AS e
    WHERE e.queue = %(queue)s AND e.state = 'leased' GROUP BY e.priority, e.tenant, e.state
    UNION ALL
    SELECT e.priority, e.tenant, e.state, count(*) FROM vigil_queue.executions AS e
    WHERE e.queue = %(queue)s AND e.state = 'dead' GROUP BY e.priority, e.tenant, e.state
)
SELECT c.priority, c.tenant,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'ready'), 0) AS ready,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'leased'), 0) AS leased,
       COALESCE(sum(c.n) FILTER (WHERE c.state = 'dead'), 0) AS dead,
       min(o.run_after) FILTER (WHERE o.run_after <= %(now)s) AS oldest_ready
FROM counted AS c LEFT JOIN oldest AS o ON o.tenant = c.tenant AND o.priority = c.priority
GROUP BY c.priority, c.tenant
ORDER BY c.priority, c.tenant
LIMIT %(limit)s;
