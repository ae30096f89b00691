-- The queue store's statements, one named block each (`-- name: NAME`), run by vigil/queue/store.py
-- with psycopg's %(name)s parameters. Every time is a parameter (`now`): the caller's injected clock.

-- name: lock_ddl
-- Two processes migrating at once wait for each other instead of racing on CREATE TABLE.
SELECT pg_advisory_xact_lock(hashtext('vigil_queue_migrations'));

-- name: submit
-- Many submissions in one statement; a repeated (queue, idempotency key) keeps the first row. A
-- submission without max_attempts takes its queue's declared retry.maxAttempts, else the default.
-- A ScheduledJob's occurrence brings its own execution id: one already enqueued (in another queue,
-- when the job's task.queue changed between two launches of the occurrence) adds nothing either;
-- the store then reads who holds it (existing_by_id) and raises when it is another occurrence.
INSERT INTO vigil_queue.executions AS e
    (execution_id, queue, task, payload, priority, tenant, state, attempt, max_attempts,
     run_after, scheduled_for, idempotency_key, created_at)
SELECT s.execution_id, %(queue)s, s.task, s.payload, s.priority, s.tenant, 'ready', 1,
       COALESCE(s.max_attempts,
                (SELECT q.max_attempts FROM vigil_queue.queues AS q WHERE q.queue = %(queue)s),
                %(default_max_attempts)s),
       s.run_after, s.run_after, s.idempotency_key, %(now)s
FROM unnest(%(execution_ids)s::text[], %(tasks)s::text[], %(payloads)s::jsonb[],
            %(priorities)s::smallint[], %(tenants)s::text[], %(max_attempts)s::smallint[],
            %(run_afters)s::timestamptz[], %(idempotency_keys)s::text[])
     AS s(execution_id, task, payload, priority, tenant, max_attempts, run_after, idempotency_key)
ON CONFLICT DO NOTHING
RETURNING e.execution_id, e.idempotency_key;

-- name: existing_by_id
-- Brought execution ids the submit did not add: where they are enqueued, under which key.
SELECT execution_id, queue, idempotency_key FROM vigil_queue.executions
WHERE execution_id = ANY(%(execution_ids)s::text[]);

-- name: existing_by_key
SELECT idempotency_key, execution_id FROM vigil_queue.executions
WHERE queue = %(queue)s AND idempotency_key = ANY(%(idempotency_keys)s::text[]);

-- name: notify
SELECT pg_notify('vigil_queue', %(queue)s);

-- name: lease
-- A batch of due ready executions, fair between tenants, within the tenants' caps and the capacity
-- reserved per priority, in one statement:
-- * tenants: the tenants with ready work, found by a skip scan of the ready index (one index probe
--   per tenant, however many rows each has);
-- * capped / heads / offered: each tenant offers its first executions in (priority, run_after)
--   order, at most `limit`, and for a capped tenant (its own cap in `tenant_caps`, else
--   `tenant_cap`; none when both are null) at most its cap minus what it holds leased now (an
--   index-only count); besides, each priority with free reserved slots offers its own first
--   ones (else a tenant's offer could be all more urgent work and leave those slots idle).
--   Each offer is locked as it is read, skipping rows another worker is leasing right now;
-- * ranked / chosen: the batch takes by priority, then turn (every tenant's 1st, then every
--   tenant's 2nd, ...), then due time. A priority's first `reserved_free` rows (its free reserved
--   slots of this worker) are taken as reserved; every other row competes, in that order, for the
--   `shared_free` shared slots. So a tenant's backlog delays another tenant by at most one batch,
--   a lower priority number goes first, and no priority ever takes the slots reserved for another.
-- Every LIMIT is a constant (a parameter): the planner guesses a LIMIT read from a column at a tenth of
-- the table, so with a deep backlog the estimate grew past jit_above_cost and each lease was
-- JIT-compiled (700 ms for 10 rows at 50,000 ready). A capped tenant's room is kept to in `offered`.
-- What the batch does not take is unlocked when the statement's transaction ends. `leased_at` is the
-- lease's start (the heartbeat keeps it; whatever ends the lease clears it with lease_owner): the
-- watchdog's "running since". `lease_token` is drawn anew for each lease: what acknowledges, extends
-- or claims by the lease names it (a lease taken since by another attempt has another). The token
-- outlives the lease's end, so a late success (settle_succeeded) still names it, until a new lease.
WITH RECURSIVE tenants AS (
    (SELECT tenant FROM vigil_queue.executions
     WHERE queue = %(queue)s AND state = 'ready' ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant FROM vigil_queue.executions AS e
            WHERE e.queue = %(queue)s AND e.state = 'ready' AND e.tenant > t.tenant
            ORDER BY e.tenant LIMIT 1)
    FROM tenants AS t WHERE t.tenant IS NOT NULL
),
capped AS (
    SELECT t.tenant, CASE WHEN c.cap IS NULL THEN NULL  -- no cap: no room to keep to
                          ELSE greatest(0, least(%(limit)s, c.cap - (
                              SELECT count(*) FROM vigil_queue.executions AS l
                              WHERE l.queue = %(queue)s AND l.state = 'leased' AND l.tenant = t.tenant)))
                     END AS room
    FROM tenants AS t
    CROSS JOIN LATERAL (
        SELECT COALESCE((%(tenant_caps)s::jsonb ->> t.tenant)::integer, %(tenant_cap)s::integer) AS cap
    ) AS c
    WHERE t.tenant IS NOT NULL
),
heads AS (
    SELECT c.tenant, head.* FROM capped AS c
    CROSS JOIN LATERAL (
        SELECT e.execution_id, e.priority, e.run_after FROM vigil_queue.executions AS e
        WHERE e.queue = %(queue)s AND e.state = 'ready' AND e.tenant = c.tenant
          AND e.run_after <= %(now)s AND e.task = ANY(%(tasks)s::text[])
        ORDER BY e.priority, e.run_after
        LIMIT %(limit)s  -- a constant: the room (at most `limit`) is kept to in `offered`
        FOR UPDATE SKIP LOCKED
    ) AS head
    WHERE c.room IS NULL OR c.room > 0
    UNION ALL
    -- a reserved priority's own heads: its slots must not wait behind more urgent work's offer
    SELECT c.tenant, head.* FROM capped AS c
    CROSS JOIN unnest(%(reserved_priorities)s::smallint[], %(reserved_free)s::integer[]) AS r(priority, free)
    CROSS JOIN LATERAL (
        SELECT e.execution_id, e.priority, e.run_after FROM vigil_queue.executions AS e
        WHERE e.queue = %(queue)s AND e.state = 'ready' AND e.tenant = c.tenant
          AND e.priority = r.priority AND e.run_after <= %(now)s AND e.task = ANY(%(tasks)s::text[])
        ORDER BY e.run_after
        LIMIT %(limit)s  -- a constant, as above: `ranked` takes at most `free` of them as reserved
        FOR UPDATE SKIP LOCKED
    ) AS head
    WHERE r.free > 0 AND (c.room IS NULL OR c.room > 0)
),
offered AS (
    SELECT o.execution_id, o.priority, o.run_after, o.turn FROM (
        SELECT h.execution_id, h.priority, h.run_after, c.room,
               row_number() OVER (PARTITION BY h.tenant ORDER BY h.priority, h.run_after, h.execution_id) AS turn
        FROM (SELECT DISTINCT ON (execution_id) * FROM heads) AS h JOIN capped AS c USING (tenant)
    ) AS o
    WHERE o.room IS NULL OR o.turn <= o.room
),
ranked AS (
    SELECT o.execution_id, o.priority, o.turn, o.run_after,
           row_number() OVER (PARTITION BY o.priority ORDER BY o.turn, o.run_after, o.execution_id)
               <= COALESCE(r.free, 0) AS reserved
    FROM offered AS o
    LEFT JOIN unnest(%(reserved_priorities)s::smallint[], %(reserved_free)s::integer[])
        AS r(priority, free) ON r.priority = o.priority
),
chosen AS (
    SELECT execution_id FROM (
        SELECT execution_id, priority, turn, run_after, reserved,
               count(*) FILTER (WHERE NOT reserved) OVER (
                   ORDER BY priority, turn, run_after, execution_id ROWS UNBOUNDED PRECEDING
               ) AS shared_nth
        FROM ranked
    ) AS s
    WHERE reserved OR shared_nth <= %(shared_free)s
    ORDER BY priority, turn, run_after
    LIMIT %(limit)s
)
UPDATE vigil_queue.executions AS e
SET state = 'leased', lease_owner = %(worker)s, lease_expires_at = %(expires)s, leased_at = %(now)s,
    lease_token = gen_random_uuid()
FROM chosen WHERE e.execution_id = chosen.execution_id
RETURNING e.execution_id, e.task, e.payload, e.attempt, e.max_attempts, e.scheduled_for,
          e.idempotency_key, e.priority, e.tenant, e.lease_token;

-- name: lock_tenants
-- Leasing from a queue with tenant caps: one leaser at a time per queue, so each counts the
-- leases the one before committed (the lock is held to the end of the lease's transaction).
SELECT pg_advisory_xact_lock(hashtext('vigil_queue_tenants:' || %(queue)s));

-- name: heartbeat
-- Extend the leases this worker still holds; what does not come back was taken from it. The lease's
-- start (leased_at) stays: a heartbeat extends the same run.
UPDATE vigil_queue.executions AS e
SET lease_expires_at = %(expires)s
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[], %(tokens)s::uuid[]) AS h(execution_id, attempt, token)
WHERE e.execution_id = h.execution_id AND e.attempt = h.attempt AND e.queue = %(queue)s
  AND e.state = 'leased' AND e.lease_owner = %(worker)s AND e.lease_token = h.token
RETURNING e.execution_id;

-- name: expired
-- Leases past their deadline (their holder crashed, froze or lost the database).
SELECT execution_id, attempt, max_attempts, lease_owner, lease_expires_at, lease_token
FROM vigil_queue.executions
WHERE queue = %(queue)s AND state = 'leased' AND lease_expires_at <= %(now)s
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: settle
-- Close one attempt held by `worker`: the new state, attempt and run_after come from vigil.core.queue.
UPDATE vigil_queue.executions
SET state = %(state)s::text, attempt = %(next_attempt)s, run_after = COALESCE(%(run_after)s::timestamptz, run_after),
    lease_owner = NULL, lease_expires_at = NULL, leased_at = NULL, last_error = %(error)s::text,
    finished_at = CASE WHEN %(state)s::text IN ('succeeded', 'dead') THEN %(now)s END
WHERE execution_id = %(execution_id)s AND attempt = %(attempt)s AND state = 'leased'
  AND lease_owner = %(worker)s AND queue = %(queue)s AND lease_token = %(token)s
RETURNING execution_id;

-- name: settle_succeeded
-- Acknowledge a batch of successes in one statement; rows not returned had lost their lease to a
-- later attempt (or a cancel). A success is a success: an attempt whose lease expired (its holder
-- cut off from the database longer than the lease) is still acknowledged when no later attempt has
-- started, that is when the expiry left the execution ready for the next attempt, not yet leased, or
-- dead because it was the last. The expiry's attempt row, naming this worker as the holder, shows
-- the attempt was this worker's; the execution takes that attempt's number back.
UPDATE vigil_queue.executions AS e
SET state = 'succeeded', attempt = a.attempt, lease_owner = NULL, lease_expires_at = NULL, leased_at = NULL,
    finished_at = %(now)s, last_error = NULL
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[], %(tokens)s::uuid[]) AS a(execution_id, attempt, token)
WHERE e.execution_id = a.execution_id AND e.queue = %(queue)s AND e.lease_token = a.token
  AND (
    (e.attempt = a.attempt AND e.state = 'leased' AND e.lease_owner = %(worker)s)
    OR (
      ((e.state = 'ready' AND e.attempt = a.attempt + 1) OR (e.state = 'dead' AND e.attempt = a.attempt))
      AND EXISTS (
        SELECT 1 FROM vigil_queue.attempts AS x
        WHERE x.execution_id = a.execution_id AND x.attempt = a.attempt
          AND x.day = (e.scheduled_for AT TIME ZONE 'UTC')::date
          AND x.outcome = 'lease_expired' AND x.worker = %(worker)s
      )
    )
  )
RETURNING e.execution_id;

-- name: record_attempts
-- The history of attempts; a row already there (the lease expired first) is kept, marked duplicate
-- when its holder reports it ran to the end anyway, unless that report was a success accepted late. Each row goes to the partition of its
-- execution's scheduled day (UTC), read from the execution by its primary key in this statement.
-- Only executions of this queue take rows: one already purged records no more attempts.
INSERT INTO vigil_queue.attempts AS a
    (day, execution_id, attempt, worker, outcome, started_at, finished_at, error)
SELECT (e.scheduled_for AT TIME ZONE 'UTC')::date,
       r.execution_id, r.attempt, r.worker, r.outcome, r.started_at, r.finished_at, r.error
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[], %(workers)s::text[],
            %(outcomes)s::text[], %(started)s::timestamptz[], %(finished)s::timestamptz[],
            %(errors)s::text[])
     AS r(execution_id, attempt, worker, outcome, started_at, finished_at, error)
JOIN vigil_queue.executions AS e ON e.execution_id = r.execution_id AND e.queue = %(queue)s
ON CONFLICT (execution_id, attempt, day) DO UPDATE
    SET outcome = excluded.outcome, started_at = excluded.started_at, finished_at = excluded.finished_at,
        error = 'acknowledged after its lease expired', duplicate = false
    -- a late success settle_succeeded accepted (just before, in the same transaction): the expiry's
    -- row becomes the success it was, and no duplicate (a heartbeat that found the lease gone may
    -- have marked it so): no later attempt had started, so no other copy ran
    WHERE a.outcome = 'lease_expired' AND excluded.outcome = 'succeeded' AND a.worker = excluded.worker
      AND EXISTS (SELECT 1 FROM vigil_queue.executions AS s WHERE s.execution_id = excluded.execution_id
                  AND s.state = 'succeeded' AND s.attempt = excluded.attempt);

-- name: mark_duplicates
-- Attempts whose lease expired while their holder still ran them: two copies ran at once. An
-- attempt whose execution was cancelled under it is no duplicate: no other copy took it. The
-- execution names the attempt's day, so each row is one probe of one partition.
UPDATE vigil_queue.attempts AS a SET duplicate = true
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[]) AS d(execution_id, attempt)
JOIN vigil_queue.executions AS e ON e.execution_id = d.execution_id AND e.queue = %(queue)s
WHERE a.execution_id = d.execution_id AND a.attempt = d.attempt
  AND a.day = (e.scheduled_for AT TIME ZONE 'UTC')::date AND NOT a.duplicate
  AND NOT (e.attempt = d.attempt AND e.state = 'cancelled')
RETURNING a.execution_id;

-- name: acknowledged_among
-- Which of these attempts this worker has acknowledged already: the commit went through and only
-- its reply was lost, so the worker sent it again. The attempt row, written in the transaction that
-- settled the state, names this worker and the outcome it reports now: a repeated acknowledgement,
-- not another copy. (A lease taken by an expiry leaves a lease_expired row instead.)
SELECT r.execution_id, r.attempt
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[], %(outcomes)s::text[])
     AS r(execution_id, attempt, outcome)
JOIN vigil_queue.executions AS e ON e.execution_id = r.execution_id AND e.queue = %(queue)s
JOIN vigil_queue.attempts AS a
  ON a.execution_id = r.execution_id AND a.attempt = r.attempt AND a.day = (e.scheduled_for AT TIME ZONE 'UTC')::date
WHERE a.worker = %(worker)s AND a.outcome = r.outcome;

-- name: cancelled_among
-- Which of these attempts lost their lease to a cancel (through the API), not to another copy.
SELECT e.execution_id FROM vigil_queue.executions AS e
JOIN unnest(%(execution_ids)s::text[], %(attempts)s::smallint[]) AS c(execution_id, attempt)
  ON e.execution_id = c.execution_id AND e.attempt = c.attempt
WHERE e.state = 'cancelled' AND e.queue = %(queue)s;

-- name: once
-- The concurrency-safe guard: the first copy of an execution to claim `key` wins, whatever the attempt.
-- A claim names its lease's token: a copy whose lease was taken by a later attempt claims nothing.
INSERT INTO vigil_queue.once_marks (execution_id, key, attempt, worker, at)
SELECT e.execution_id, %(key)s, %(attempt)s, %(worker)s, %(now)s FROM vigil_queue.executions AS e
WHERE e.execution_id = %(execution_id)s AND e.queue = %(queue)s AND e.lease_token = %(token)s
ON CONFLICT (execution_id, key) DO NOTHING
RETURNING execution_id;

-- name: execution
SELECT execution_id, queue, task, payload, priority, tenant, state, attempt, max_attempts,
       lease_owner, lease_expires_at, run_after, scheduled_for, idempotency_key, finished_at,
       last_error
FROM vigil_queue.executions WHERE execution_id = %(execution_id)s;

-- name: attempts_of
-- Every partition is probed by its key's leading execution_id (a timeline read, not a hot path): rows
-- filed under their finish day, whose execution was purged, are found too.
SELECT execution_id, attempt, worker, outcome, started_at, finished_at, error, duplicate
FROM vigil_queue.attempts WHERE execution_id = %(execution_id)s ORDER BY attempt;

-- name: counts
SELECT state, count(*) FROM vigil_queue.executions WHERE queue = %(queue)s GROUP BY state;


-- The HTTP API's statements (vigil/api/queue.py through QueueStore).

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
ON CONFLICT (queue, idempotency_key) DO NOTHING
RETURNING execution_id;

-- name: drop_job
-- The job row of a submit whose idempotency key was known: never committed.
DELETE FROM vigil_queue.jobs WHERE job_id = %(job_id)s;

-- name: job_of_key
SELECT job_id, execution_id, scheduled_for FROM vigil_queue.executions
WHERE queue = %(queue)s AND idempotency_key = %(idempotency_key)s;

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

-- name: cancel
-- Ready: it is never leased. Leased: the lease is taken away, so the holder's heartbeat and
-- acknowledgement (conditional on state 'leased' and its owner) match nothing and cannot revive it.
UPDATE vigil_queue.executions
SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL, leased_at = NULL, finished_at = %(now)s,
    cancelled_by = %(by)s
WHERE (execution_id = %(execution_id)s OR job_id = %(job_id)s) AND state IN ('ready', 'leased')
RETURNING execution_id;

-- name: retry
-- A dead or cancelled execution, ready again at once with the same id and one more attempt (the
-- next number: an attempt's row is never overwritten), unless its job was deleted. Its payload comes
-- back for the namespace's quota (an unfinished execution again: vigil.queue.bounds.admit_all).
UPDATE vigil_queue.executions AS e
SET state = 'ready', attempt = e.attempt + 1, max_attempts = GREATEST(e.max_attempts, e.attempt + 1),
    run_after = %(now)s, finished_at = NULL, cancelled_by = NULL
WHERE e.execution_id = %(execution_id)s AND e.state IN ('dead', 'cancelled')
  AND NOT EXISTS (SELECT 1 FROM vigil_queue.jobs AS j WHERE j.job_id = e.job_id AND NOT j.enabled)
RETURNING e.queue, e.payload;

-- name: timeline
SELECT e.execution_id, e.job_id, e.queue, e.task, e.payload, e.priority, e.tenant, e.state, e.attempt,
       e.max_attempts, e.lease_owner, e.lease_expires_at, e.run_after, e.scheduled_for,
       e.idempotency_key, e.finished_at, e.last_error, e.cancelled_by, COALESCE(j.enabled, true) AS job_enabled
FROM vigil_queue.executions AS e LEFT JOIN vigil_queue.jobs AS j ON j.job_id = e.job_id
WHERE e.execution_id = %(execution_id)s;

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

-- The recurring-job catalogue (vigil/queue/catalogue.py) and its sharded trigger (vigil/queue/trigger.py).

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

-- A queue's listings (`kubectl vigil queue …` through the HTTP API), a bounded page each.

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

-- The volume tier's watchdog (vigil/queue/watchdog.py): a fixed number of statements a pass,
-- whatever the catalogue's size; rows come back only for what is in trouble.

-- name: watchdog_overdue
-- Enabled recurring jobs with an expected interval and no success within it since their last success
-- (or their creation): the necessary condition only; vigil.core.watchdog.assess_overdue decides the
-- verdict and its reason from the facts read here. A job's last success is one probe of
-- executions_job_succeeded. At most `limit` jobs come back, each queue's most overdue first (with
-- the queue's count of overdue jobs), and for each the facts of its newest `recent` executions: a
-- leased one runs since its lease began (its due time for a row leased before leased_at existed).
WITH watched AS MATERIALIZED (
    SELECT j.job_id, j.queue, j.created_at, j.expected_max_interval,
           (SELECT max(s.finished_at) FROM vigil_queue.executions AS s
            WHERE s.job_id = j.job_id AND s.state = 'succeeded') AS last_success
    FROM vigil_queue.jobs AS j
    WHERE j.enabled AND j.cron IS NOT NULL AND j.expected_max_interval IS NOT NULL
      AND j.created_at + j.expected_max_interval < %(now)s
),
overdue AS MATERIALIZED (
    SELECT w.*, d.deadline, count(*) OVER (PARTITION BY w.queue) AS in_queue,
           row_number() OVER (PARTITION BY w.queue ORDER BY d.deadline, w.job_id) AS turn
    FROM watched AS w
    CROSS JOIN LATERAL (
        SELECT GREATEST(COALESCE(w.last_success, w.created_at), w.created_at) + w.expected_max_interval AS deadline
    ) AS d
    WHERE d.deadline < %(now)s
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

-- The bounded store (vigil/queue/bounds.py, revision q0010bounded): per-namespace quotas on what a
-- namespace keeps unfinished, and the retention of finished executions and deleted jobs.

-- name: quota_ensure
-- A namespace's counter row, made with the chart's defaults (the row '*') the first time one of its
-- executions arrives; a row that exists is left alone. Its own statement: the admission that follows
-- must find the row to lock it.
INSERT INTO vigil_queue.namespace_quotas (namespace, max_executions, max_payload_bytes)
SELECT %(namespace)s, d.max_executions, d.max_payload_bytes
FROM (SELECT 1) AS one
LEFT JOIN vigil_queue.namespace_quotas AS d ON d.namespace = '*'
ON CONFLICT (namespace) DO NOTHING;

-- name: quota_admit
-- Admit the longest prefix of `payloads` (one per new unfinished execution, in order) that keeps the
-- namespace within both limits, and count it, in one statement on one row: the row is locked first
-- (FOR UPDATE reads its newest version), so admissions of one namespace queue behind each other for
-- the rest of their transactions and never both take the last room. The running sums grow with
-- each payload, so the rows that fit are a prefix: its length and bytes are their max. Returns how
-- many were admitted and their bytes, the bytes of all offered, and the row as it is after them
-- (the use and limits a refusal names).
WITH wanted AS (
    SELECT w.ord, sum(octet_length(w.payload::text)) OVER (ORDER BY w.ord) AS bytes
    FROM unnest(%(payloads)s::jsonb[]) WITH ORDINALITY AS w(payload, ord)
),
quota AS (
    SELECT * FROM vigil_queue.namespace_quotas WHERE namespace = %(namespace)s FOR UPDATE
),
fits AS (
    SELECT COALESCE(max(w.ord), 0) AS executions, COALESCE(max(w.bytes), 0) AS bytes
    FROM wanted AS w CROSS JOIN quota AS q
    WHERE (q.max_executions IS NULL OR q.executions + w.ord <= q.max_executions)
      AND (q.max_payload_bytes IS NULL OR q.payload_bytes + w.bytes <= q.max_payload_bytes)
)
UPDATE vigil_queue.namespace_quotas AS q
SET executions = q.executions + f.executions, payload_bytes = q.payload_bytes + f.bytes,
    admitted = q.admitted + f.executions, admitted_bytes = q.admitted_bytes + f.bytes
FROM fits AS f
WHERE q.namespace = %(namespace)s
RETURNING f.executions, f.bytes, (SELECT COALESCE(max(w.bytes), 0) FROM wanted AS w),
          q.executions, q.payload_bytes, q.max_executions, q.max_payload_bytes;

-- name: quota_limits
-- The leader's TaskQueue pass writes each namespace's limits (NULL: none): the chart's defaults on
-- the row '*' and on every namespace not listed, the listed namespaces' own on theirs (made if new).
WITH defaults AS (
    UPDATE vigil_queue.namespace_quotas
    SET max_executions = %(default_executions)s, max_payload_bytes = %(default_bytes)s
    WHERE namespace = '*' OR NOT (namespace = ANY(%(namespaces)s::text[]))
),
listed AS (
    INSERT INTO vigil_queue.namespace_quotas AS q (namespace, max_executions, max_payload_bytes)
    SELECT * FROM unnest(%(namespaces)s::text[], %(max_executions)s::bigint[], %(max_payload_bytes)s::bigint[])
    ON CONFLICT (namespace) DO UPDATE
        SET max_executions = excluded.max_executions, max_payload_bytes = excluded.max_payload_bytes
)
SELECT 1;

-- name: quota_counts
-- The recount's reading, in one statement so in one snapshot: each namespace's unfinished executions
-- and their payloads' bytes, counted through the two partial indexes of ready and leased rows (the
-- rows are read for their payloads' sizes), beside the row's running totals of admissions as that
-- same snapshot sees them. An admission commits its rows and its totals together, so each one is
-- either in both or in neither; `quota_recount` then adds what was admitted since.
WITH live AS (
    SELECT vigil_queue.namespace_of(u.queue) AS namespace, count(*) AS executions,
           COALESCE(sum(octet_length(u.payload::text)), 0) AS bytes
    FROM (SELECT e.queue, e.payload FROM vigil_queue.executions AS e WHERE e.state = 'ready'
          UNION ALL
          SELECT e.queue, e.payload FROM vigil_queue.executions AS e WHERE e.state = 'leased') AS u
    GROUP BY 1
)
SELECT COALESCE(q.namespace, l.namespace) AS namespace, COALESCE(q.admitted, 0), COALESCE(q.admitted_bytes, 0),
       COALESCE(l.executions, 0), COALESCE(l.bytes, 0)
FROM (SELECT * FROM vigil_queue.namespace_quotas WHERE namespace <> '*') AS q
FULL JOIN live AS l ON l.namespace = q.namespace
ORDER BY 1;

-- name: quota_recount
-- One namespace's counters set to what `quota_counts` counted plus what was admitted since its
-- snapshot (the running total now, which waits for an admission in flight, minus the one it saw):
-- never fewer than the namespace keeps. One row a statement, in autocommit: the recount holds no
-- lock beside another, so it never deadlocks with a trigger's batch holding several namespaces' rows,
-- and takes no lock an admission waits on for longer than this one update. A namespace with rows
-- and no counter (rows written around the admission) gets one, with the defaults of '*'.
INSERT INTO vigil_queue.namespace_quotas AS q
    (namespace, executions, payload_bytes, max_executions, max_payload_bytes, counted_at)
SELECT %(namespace)s, %(executions)s, %(bytes)s, d.max_executions, d.max_payload_bytes, %(now)s
FROM (SELECT 1) AS one
LEFT JOIN vigil_queue.namespace_quotas AS d ON d.namespace = '*'
ON CONFLICT (namespace) DO UPDATE
SET executions = GREATEST(0, %(executions)s + (q.admitted - %(admitted)s)),
    payload_bytes = GREATEST(0, %(bytes)s + (q.admitted_bytes - %(admitted_bytes)s)),
    counted_at = %(now)s;

-- name: quota_use
-- One namespace's row: its admitted use and limits (NULL: no row yet).
SELECT executions, payload_bytes, max_executions, max_payload_bytes, counted_at
FROM vigil_queue.namespace_quotas WHERE namespace = %(namespace)s;

-- name: purge_finished
-- Succeeded and cancelled executions that finished before their queue's retention leave the store, a
-- bounded batch per queue and pass, walked by the partial indexes executions_succeeded and
-- executions_cancelled: the queues with such rows are found by a skip scan (one probe per queue),
-- each with its own retention (its TaskQueue's) or the default. A recurring job's newest success
-- stays (the watchdog's last success: one probe of executions_job_succeeded). Their once_marks go
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

-- The HTTP API's look-ups by id (vigil/queue/apistore.py), made by its login role before it acts
-- for a namespace: which queue holds the id, nothing else, so the API knows whom to authorise and
-- which namespace's role to take.

-- name: locate_execution
SELECT queue FROM vigil_queue.executions WHERE execution_id = %(execution_id)s;

-- name: locate_job
SELECT queue FROM vigil_queue.jobs WHERE job_id = %(job_id)s;
