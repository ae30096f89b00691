-- The schedule_buckets table (partitioned by hour): the sharded trigger (vigil/queue/trigger.py) and the
-- repair of broken chains (vigil/queue/repair.py).
-- Named blocks (`-- name: NAME`) with psycopg's %(name)s parameters; every time is a parameter.

-- name: trigger_due
-- One shard's due, unfired bucket rows with their jobs, oldest fire time first: only partitions whose
-- minutes have come (pruned on `minute`) and, in each, only unfired rows (schedule_buckets_due).
-- Rows another trigger of the same shard holds are skipped, never waited for: it is firing them.
SELECT b.job_id, b.nominal, b.minute, b.fire_at, b.shard,
       j.queue, j.task, j.payload, j.payload_template, j.priority, j.tenant, j.max_attempts, j.enabled,
       j.cron, j.timezone, j.dst_gap, j.dst_overlap, j.jitter, j.catch_up_policy, j.catch_up_window,
       j.catch_up_limit
FROM vigil_queue.schedule_buckets AS b
LEFT JOIN vigil_queue.jobs AS j ON j.job_id = b.job_id
WHERE b.shard = %(shard)s AND b.fired_at IS NULL AND b.fire_at <= %(now)s AND b.minute <= %(minute)s
ORDER BY b.fire_at
LIMIT %(limit)s
FOR UPDATE OF b SKIP LOCKED;

-- name: trigger_next
-- The earliest fire time ahead of now among one shard's unfired rows of this minute and the next
-- (two partitions at most, through the partial index of unfired rows): when the next pass is due.
SELECT min(fire_at) FROM vigil_queue.schedule_buckets
WHERE shard = %(shard)s AND fired_at IS NULL AND fire_at > %(now)s
  AND minute >= %(minute)s AND minute <= %(horizon)s;

-- name: trigger_apply
-- One statement, so one transaction: mark the due rows (conditionally: a row already marked is not
-- marked again, and nothing keyed to it happens), then, for the rows this statement marked only,
-- insert their executions (ids derived from the occurrence: a second insert does nothing), their
-- next occurrences and Missed/Failed records (each with its reason), advance the jobs' next_run
-- and wake the workers. A value PostgreSQL refuses in one row fails the statement: the trigger
-- then applies the batch in halves, down to that row, which it settles Failed alone.
WITH head AS (
    SELECT * FROM unnest(%(job_ids)s::text[], %(nominals)s::timestamptz[], %(minutes)s::timestamptz[],
                         %(outcomes)s::text[], %(mark_ids)s::text[], %(next_runs)s::timestamptz[],
                         %(reasons)s::text[])
         AS h(job_id, nominal, minute, outcome, execution_id, next_run, reason)
),
marked AS (
    UPDATE vigil_queue.schedule_buckets AS b
    SET fired_at = %(now)s, outcome = h.outcome, execution_id = h.execution_id, reason = h.reason
    FROM head AS h
    WHERE b.job_id = h.job_id AND b.nominal = h.nominal AND b.minute = h.minute
      AND b.minute >= %(low)s AND b.minute <= %(high)s AND b.fired_at IS NULL
    RETURNING b.job_id, b.nominal
),
fired AS (
    INSERT INTO vigil_queue.executions AS e
        (execution_id, job_id, queue, task, payload, priority, tenant, state, attempt, max_attempts,
         run_after, scheduled_for, created_at)
    SELECT f.execution_id, f.job_id, f.queue, f.task, f.payload, f.priority, f.tenant, 'ready', 1,
           f.max_attempts, f.run_after, f.scheduled_for, %(now)s
    FROM unnest(%(fire_job_ids)s::text[], %(fire_heads)s::timestamptz[], %(fire_ids)s::text[],
                %(fire_queues)s::text[], %(fire_tasks)s::text[], %(fire_payloads)s::jsonb[],
                %(fire_priorities)s::smallint[], %(fire_tenants)s::text[],
                %(fire_max_attempts)s::smallint[], %(fire_run_afters)s::timestamptz[],
                %(fire_scheduled)s::timestamptz[])
         AS f(job_id, head, execution_id, queue, task, payload, priority, tenant, max_attempts,
              run_after, scheduled_for)
    JOIN marked AS m ON m.job_id = f.job_id AND m.nominal = f.head
    ON CONFLICT (execution_id) DO NOTHING
    RETURNING e.execution_id, e.queue
),
chained AS (
    INSERT INTO vigil_queue.schedule_buckets
        (minute, shard, job_id, nominal, fire_at, fired_at, outcome, execution_id, reason)
    SELECT r.minute, r.shard, r.job_id, r.nominal, r.fire_at, r.fired_at, r.outcome, r.execution_id, r.reason
    FROM unnest(%(row_job_ids)s::text[], %(row_heads)s::timestamptz[], %(row_minutes)s::timestamptz[],
                %(row_shards)s::smallint[], %(row_nominals)s::timestamptz[],
                %(row_fire_ats)s::timestamptz[], %(row_fired_ats)s::timestamptz[], %(row_outcomes)s::text[],
                %(row_execution_ids)s::text[], %(row_reasons)s::text[])
         AS r(job_id, head, minute, shard, nominal, fire_at, fired_at, outcome, execution_id, reason)
    JOIN marked AS m ON m.job_id = r.job_id AND m.nominal = r.head
    ON CONFLICT DO NOTHING
    RETURNING 1
),
advanced AS (
    UPDATE vigil_queue.jobs AS j SET next_run = h.next_run
    FROM head AS h
    JOIN marked AS m ON m.job_id = h.job_id AND m.nominal = h.nominal
    WHERE j.job_id = h.job_id AND j.enabled
    RETURNING 1
),
woken AS (
    SELECT pg_notify('vigil_queue', d.queue) FROM (SELECT DISTINCT queue FROM fired) AS d
)
SELECT m.job_id, m.nominal, (SELECT count(*) FROM woken) FROM marked AS m;

-- name: integrity_broken_chains
-- The integrity audit: enabled recurring jobs with no unfired bucket row (a broken chain), each with
-- its queue's count of them; at most `limit` rows, each queue's first before any queue's second, so
-- every queue in trouble shows (the watchdog's cap on label cardinality).
SELECT b.job_id, b.queue, b.created_at, count(*) OVER (PARTITION BY b.queue) AS in_queue
FROM (
    SELECT j.job_id, j.queue, j.created_at FROM vigil_queue.jobs AS j
    WHERE j.enabled AND j.cron IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM vigil_queue.schedule_buckets AS b WHERE b.job_id = j.job_id AND b.fired_at IS NULL
    )
) AS b
ORDER BY row_number() OVER (PARTITION BY b.queue ORDER BY b.job_id), b.queue, b.job_id
LIMIT %(limit)s;

-- name: repair_candidates
-- What re-entering a broken chain needs of each job (`audit.repair`): its schedule, its pending
-- occurrence as the job row last named it (next_run) and the newest occurrence it handled that
-- the buckets still hold (one probe of the unique index per partition; broken jobs only).
SELECT j.job_id, j.queue, j.shard, j.created_at, j.next_run, j.cron, j.timezone, j.dst_gap, j.dst_overlap,
       j.jitter, j.catch_up_policy, j.catch_up_window, j.catch_up_limit,
       (SELECT max(b.nominal) FROM vigil_queue.schedule_buckets AS b
        WHERE b.job_id = j.job_id AND b.fired_at IS NOT NULL) AS last_handled
FROM vigil_queue.jobs AS j
WHERE j.job_id = ANY(%(job_ids)s::text[]) AND j.enabled AND j.cron IS NOT NULL;

-- name: repair_chains
-- Re-enter each broken chain's head, only where the job is still enabled and still has no unfired
-- row when this statement runs (a trigger or another replica's repair may have been first), keyed
-- like any bucket row ((job_id, nominal, minute), the minute a function of the occurrence), so a
-- second repair of the same chain inserts nothing; the job's next_run names the new head.
WITH inserted AS (
    INSERT INTO vigil_queue.schedule_buckets (minute, shard, job_id, nominal, fire_at)
    SELECT r.minute, j.shard, r.job_id, r.nominal, r.fire_at
    FROM unnest(%(job_ids)s::text[], %(nominals)s::timestamptz[], %(fire_ats)s::timestamptz[],
                %(minutes)s::timestamptz[]) AS r(job_id, nominal, fire_at, minute)
    JOIN vigil_queue.jobs AS j ON j.job_id = r.job_id AND j.enabled
    WHERE NOT EXISTS (SELECT 1 FROM vigil_queue.schedule_buckets AS b
                      WHERE b.job_id = r.job_id AND b.fired_at IS NULL)
    ON CONFLICT DO NOTHING
    RETURNING job_id, nominal
),
named AS (
    UPDATE vigil_queue.jobs AS j SET next_run = i.nominal FROM inserted AS i
    WHERE j.job_id = i.job_id
    RETURNING 1
)
SELECT i.job_id, i.nominal, (SELECT count(*) FROM named) FROM inserted AS i;
