-- The jobs table: one-off and recurring jobs submitted through the HTTP API, and the recurring-job
-- catalogue (vigil/queue/catalogue.py) with each job's first bucket row.
-- Named blocks (`-- name: NAME`) with psycopg's %(name)s parameters; every time is a parameter.

-- name: insert_job
-- A job without maxAttempts takes its queue's declared retry.maxAttempts, else the default.
INSERT INTO vigil_queue.jobs (job_id, queue, task, payload, priority, tenant, max_attempts, enabled, created_at)
VALUES (%(job_id)s, %(queue)s, %(task)s, %(payload)s, %(priority)s, %(tenant)s,
        COALESCE(%(max_attempts)s::smallint,
                 (SELECT q.max_attempts FROM vigil_queue.queues AS q WHERE q.queue = %(queue)s),
                 %(default_max_attempts)s), true, %(now)s);

-- name: insert_job_execution
-- A one-off job's one execution; a repeated (queue, idempotency key) inserts nothing.
INSERT INTO vigil_queue.executions
    (execution_id, job_id, queue, task, payload, priority, tenant, state, attempt, max_attempts,
     run_after, scheduled_for, idempotency_key, created_at)
VALUES (%(execution_id)s, %(job_id)s, %(queue)s, %(task)s, %(payload)s, %(priority)s, %(tenant)s, 'ready', 1,
        COALESCE(%(max_attempts)s::smallint,
                 (SELECT q.max_attempts FROM vigil_queue.queues AS q WHERE q.queue = %(queue)s),
                 %(default_max_attempts)s), %(run_at)s, %(run_at)s, %(idempotency_key)s, %(now)s)
ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING execution_id;

-- name: drop_job
-- The job row of a submit whose idempotency key was known: never committed.
DELETE FROM vigil_queue.jobs WHERE job_id = %(job_id)s;

-- name: job_of_key
SELECT job_id, execution_id, scheduled_for FROM vigil_queue.executions
WHERE queue = %(queue)s AND idempotency_key = %(idempotency_key)s AND idempotency_key IS NOT NULL;

-- name: job
SELECT job_id, queue, task, payload, priority, tenant, max_attempts, enabled, created_at,
       cron, timezone, payload_template, expected_max_interval, next_run
FROM vigil_queue.jobs WHERE job_id = %(job_id)s;

-- name: job_executions
SELECT execution_id, state, attempt, scheduled_for FROM vigil_queue.executions
WHERE job_id = %(job_id)s ORDER BY scheduled_for DESC, execution_id DESC LIMIT %(limit)s;

-- name: disable_job
-- A recurring job's unfired occurrence is then skipped by the trigger (it reads `enabled`).
UPDATE vigil_queue.jobs SET enabled = false, deleted_at = COALESCE(deleted_at, %(now)s), next_run = NULL
WHERE job_id = %(job_id)s RETURNING job_id;

-- name: catalogue_add
-- Many jobs in one statement, each with its first occurrence's bucket row. A (queue, idempotency key)
-- already catalogued, or repeated earlier in the batch, adds nothing: its bucket row joins no job.
WITH added AS (
    INSERT INTO vigil_queue.jobs AS j
        (job_id, queue, task, payload, priority, tenant, max_attempts, enabled, created_at,
         cron, timezone, dst_gap, dst_overlap, payload_template, expected_max_interval, jitter,
         catch_up_policy, catch_up_window, catch_up_limit, idempotency_key, shard, next_run)
    SELECT a.job_id, a.queue, a.task, '{}'::jsonb, a.priority, a.tenant,
           COALESCE(a.max_attempts, (SELECT q.max_attempts FROM vigil_queue.queues AS q WHERE q.queue = a.queue),
                    %(default_max_attempts)s),
           true, %(now)s,
           a.cron, a.timezone, a.dst_gap, a.dst_overlap, a.payload_template, a.expected_max_interval,
           a.jitter, a.catch_up_policy, a.catch_up_window, a.catch_up_limit, a.idempotency_key, a.shard,
           a.next_run
    FROM unnest(%(job_ids)s::text[], %(queues)s::text[], %(tasks)s::text[], %(priorities)s::smallint[],
                %(tenants)s::text[], %(max_attempts)s::smallint[], %(crons)s::text[],
                %(timezones)s::text[], %(dst_gaps)s::text[], %(dst_overlaps)s::text[],
                %(payload_templates)s::jsonb[], %(expected_max_intervals)s::interval[],
                %(jitters)s::interval[], %(catch_up_policies)s::text[], %(catch_up_windows)s::interval[],
                %(catch_up_limits)s::integer[], %(idempotency_keys)s::text[], %(shards)s::smallint[],
                %(next_runs)s::timestamptz[])
         AS a(job_id, queue, task, priority, tenant, max_attempts, cron, timezone, dst_gap, dst_overlap,
              payload_template, expected_max_interval, jitter, catch_up_policy, catch_up_window,
              catch_up_limit, idempotency_key, shard, next_run)
    ON CONFLICT (queue, idempotency_key) DO NOTHING
    RETURNING j.job_id, j.shard
)
INSERT INTO vigil_queue.schedule_buckets (minute, shard, job_id, nominal, fire_at)
SELECT f.minute, added.shard, added.job_id, f.nominal, f.fire_at
FROM added
JOIN unnest(%(job_ids)s::text[], %(minutes)s::timestamptz[], %(next_runs)s::timestamptz[],
            %(fire_ats)s::timestamptz[]) AS f(job_id, minute, nominal, fire_at)
  ON f.job_id = added.job_id
RETURNING job_id;

-- name: catalogue_by_key
SELECT idempotency_key, job_id, next_run FROM vigil_queue.jobs
WHERE queue = %(queue)s AND idempotency_key = ANY(%(idempotency_keys)s::text[]);

-- name: catalogue_job
SELECT job_id, queue, task, payload_template, priority, tenant, max_attempts, enabled, created_at,
       cron, timezone, dst_gap, dst_overlap, expected_max_interval, jitter, catch_up_policy,
       catch_up_window, catch_up_limit, idempotency_key, shard, next_run, deleted_at
FROM vigil_queue.jobs WHERE job_id = %(job_id)s;

-- name: catalogue_next
-- The job's pending occurrence, as the delete needs it to find the bucket row (no lock yet: the
-- bucket row is locked first, then the job, the order the trigger takes them in).
SELECT next_run, jitter FROM vigil_queue.jobs WHERE job_id = %(job_id)s AND deleted_at IS NULL;

-- name: catalogue_skip_pending
UPDATE vigil_queue.schedule_buckets SET fired_at = %(now)s, outcome = 'Skipped'
WHERE job_id = %(job_id)s AND nominal = %(nominal)s AND minute = %(minute)s AND fired_at IS NULL;

-- name: catalogue_delete
UPDATE vigil_queue.jobs SET enabled = false, deleted_at = %(now)s, next_run = NULL
WHERE job_id = %(job_id)s AND deleted_at IS NULL
RETURNING job_id;

-- name: locate_job
SELECT queue FROM vigil_queue.jobs WHERE job_id = %(job_id)s;
