-- The queue store's statements, one named block each (`-- name: NAME`), run by vigil/queue/store.py
-- with psycopg's %(name)s parameters. Every time is a parameter (`now`): the caller's injected clock.

-- name: lock_ddl
-- Two processes migrating at once wait for each other instead of racing on CREATE TABLE.
SELECT pg_advisory_xact_lock(hashtext('vigil_queue_migrations'));

-- name: submit
-- Many submissions in one statement; a repeated (queue, idempotency key) keeps the first row.
INSERT INTO vigil_queue.executions AS e
    (execution_id, queue, task, payload, priority, tenant, state, attempt, max_attempts,
     run_after, scheduled_for, idempotency_key, created_at)
SELECT s.execution_id, %(queue)s, s.task, s.payload, s.priority, s.tenant, 'ready', 1,
       s.max_attempts, s.run_after, s.run_after, s.idempotency_key, %(now)s
FROM unnest(%(execution_ids)s::text[], %(tasks)s::text[], %(payloads)s::jsonb[],
            %(priorities)s::smallint[], %(tenants)s::text[], %(max_attempts)s::smallint[],
            %(run_afters)s::timestamptz[], %(idempotency_keys)s::text[])
     AS s(execution_id, task, payload, priority, tenant, max_attempts, run_after, idempotency_key)
ON CONFLICT (queue, idempotency_key) DO NOTHING
RETURNING e.execution_id, e.idempotency_key;

-- name: existing_by_key
SELECT idempotency_key, execution_id FROM vigil_queue.executions
WHERE queue = %(queue)s AND idempotency_key = ANY(%(idempotency_keys)s::text[]);

-- name: notify
SELECT pg_notify('vigil_queue', %(queue)s);

-- name: lease
-- A batch of due ready executions, fair between tenants: the tenants with ready work are found by
-- a skip scan of the ready index (one index probe per tenant, however many rows each has), each
-- tenant offers its first `limit` in (priority, run_after) order, and the batch takes them by
-- priority, then turn (every tenant's 1st, then every tenant's 2nd, ...), then due time. So a
-- tenant with a 100,000-execution backlog and one with a single execution each get a turn in the
-- next batch, and a higher priority still goes first. Each tenant's offer is locked as it is read,
-- skipping rows another worker is leasing right now (never waiting for them); what the batch does
-- not take is unlocked when the statement's transaction ends, a few milliseconds later.
WITH RECURSIVE tenants AS (
    (SELECT tenant FROM vigil_queue.executions
     WHERE queue = %(queue)s AND state = 'ready' ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant FROM vigil_queue.executions AS e
            WHERE e.queue = %(queue)s AND e.state = 'ready' AND e.tenant > t.tenant
            ORDER BY e.tenant LIMIT 1)
    FROM tenants AS t WHERE t.tenant IS NOT NULL
),
offered AS (
    SELECT head.execution_id, head.priority, head.run_after,
           row_number() OVER (PARTITION BY t.tenant ORDER BY head.priority, head.run_after) AS turn
    FROM tenants AS t
    CROSS JOIN LATERAL (
        SELECT e.execution_id, e.priority, e.run_after FROM vigil_queue.executions AS e
        WHERE e.queue = %(queue)s AND e.state = 'ready' AND e.tenant = t.tenant
          AND e.run_after <= %(now)s AND e.task = ANY(%(tasks)s::text[])
        ORDER BY e.priority, e.run_after
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS head
    WHERE t.tenant IS NOT NULL
),
chosen AS (
    SELECT execution_id FROM offered ORDER BY priority, turn, run_after LIMIT %(limit)s
)
UPDATE vigil_queue.executions AS e
SET state = 'leased', lease_owner = %(worker)s, lease_expires_at = %(expires)s
FROM chosen WHERE e.execution_id = chosen.execution_id
RETURNING e.execution_id, e.task, e.payload, e.attempt, e.max_attempts, e.scheduled_for,
          e.idempotency_key, e.priority, e.tenant;

-- name: heartbeat
-- Extend the leases this worker still holds; what does not come back was taken from it.
UPDATE vigil_queue.executions AS e
SET lease_expires_at = %(expires)s
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[]) AS h(execution_id, attempt)
WHERE e.execution_id = h.execution_id AND e.attempt = h.attempt
  AND e.state = 'leased' AND e.lease_owner = %(worker)s
RETURNING e.execution_id;

-- name: expired
-- Leases past their deadline (their holder crashed, froze or lost the database).
SELECT execution_id, attempt, max_attempts, lease_owner, lease_expires_at
FROM vigil_queue.executions
WHERE queue = %(queue)s AND state = 'leased' AND lease_expires_at <= %(now)s
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: settle
-- Close one attempt held by `worker`: the new state, attempt and run_after come from vigil.core.queue.
UPDATE vigil_queue.executions
SET state = %(state)s::text, attempt = %(next_attempt)s, run_after = COALESCE(%(run_after)s::timestamptz, run_after),
    lease_owner = NULL, lease_expires_at = NULL, last_error = %(error)s::text,
    finished_at = CASE WHEN %(state)s::text IN ('succeeded', 'dead') THEN %(now)s END
WHERE execution_id = %(execution_id)s AND attempt = %(attempt)s AND state = 'leased'
  AND lease_owner = %(worker)s
RETURNING execution_id;

-- name: settle_succeeded
-- Acknowledge a batch of successes in one statement; rows not returned had lost their lease.
UPDATE vigil_queue.executions AS e
SET state = 'succeeded', lease_owner = NULL, lease_expires_at = NULL, finished_at = %(now)s
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[]) AS a(execution_id, attempt)
WHERE e.execution_id = a.execution_id AND e.attempt = a.attempt
  AND e.state = 'leased' AND e.lease_owner = %(worker)s
RETURNING e.execution_id;

-- name: record_attempts
-- The history of attempts; a row already there (the lease expired first) is kept, marked duplicate
-- when its holder reports it ran to the end anyway.
INSERT INTO vigil_queue.attempts AS a
    (execution_id, attempt, worker, outcome, started_at, finished_at, error)
SELECT * FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[], %(workers)s::text[],
                     %(outcomes)s::text[], %(started)s::timestamptz[], %(finished)s::timestamptz[],
                     %(errors)s::text[])
ON CONFLICT (execution_id, attempt) DO NOTHING;

-- name: mark_duplicates
-- Attempts whose lease expired while their holder still ran them: two copies ran at once. An
-- attempt whose execution was cancelled under it is no duplicate: no other copy took it.
UPDATE vigil_queue.attempts AS a SET duplicate = true
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[]) AS d(execution_id, attempt)
WHERE a.execution_id = d.execution_id AND a.attempt = d.attempt AND NOT a.duplicate
  AND NOT EXISTS (SELECT 1 FROM vigil_queue.executions AS e
                  WHERE e.execution_id = d.execution_id AND e.attempt = d.attempt AND e.state = 'cancelled')
RETURNING a.execution_id;

-- name: cancelled_among
-- Which of these attempts lost their lease to a cancel (through the API), not to another copy.
SELECT e.execution_id FROM vigil_queue.executions AS e
JOIN unnest(%(execution_ids)s::text[], %(attempts)s::smallint[]) AS c(execution_id, attempt)
  ON e.execution_id = c.execution_id AND e.attempt = c.attempt
WHERE e.state = 'cancelled';

-- name: once
-- The concurrency-safe guard: the first copy of an execution to claim `key` wins, whatever the attempt.
INSERT INTO vigil_queue.once_marks (execution_id, key, attempt, worker, at)
VALUES (%(execution_id)s, %(key)s, %(attempt)s, %(worker)s, %(now)s)
ON CONFLICT (execution_id, key) DO NOTHING
RETURNING execution_id;

-- name: execution
SELECT execution_id, queue, task, payload, priority, tenant, state, attempt, max_attempts,
       lease_owner, lease_expires_at, run_after, scheduled_for, idempotency_key, finished_at,
       last_error
FROM vigil_queue.executions WHERE execution_id = %(execution_id)s;

-- name: attempts_of
SELECT execution_id, attempt, worker, outcome, started_at, finished_at, error, duplicate
FROM vigil_queue.attempts WHERE execution_id = %(execution_id)s ORDER BY attempt;

-- name: counts
SELECT state, count(*) FROM vigil_queue.executions WHERE queue = %(queue)s GROUP BY state;


-- The HTTP API's statements (vigil/queueapi.py through QueueStore).

-- name: insert_job
INSERT INTO vigil_queue.jobs (job_id, queue, task, payload, priority, tenant, max_attempts, enabled, created_at)
VALUES (%(job_id)s, %(queue)s, %(task)s, %(payload)s, %(priority)s, %(tenant)s, %(max_attempts)s, true, %(now)s);

-- name: insert_job_execution
-- A one-off job's one execution; a repeated (queue, idempotency key) inserts nothing.
INSERT INTO vigil_queue.executions
    (execution_id, job_id, queue, task, payload, priority, tenant, state, attempt, max_attempts,
     run_after, scheduled_for, idempotency_key, created_at)
VALUES (%(execution_id)s, %(job_id)s, %(queue)s, %(task)s, %(payload)s, %(priority)s, %(tenant)s, 'ready', 1,
        %(max_attempts)s, %(run_at)s, %(run_at)s, %(idempotency_key)s, %(now)s)
ON CONFLICT (queue, idempotency_key) DO NOTHING
RETURNING execution_id;

-- name: drop_job
-- The job row of a submit whose idempotency key was known: never committed.
DELETE FROM vigil_queue.jobs WHERE job_id = %(job_id)s;

-- name: job_of_key
SELECT job_id, execution_id, scheduled_for FROM vigil_queue.executions
WHERE queue = %(queue)s AND idempotency_key = %(idempotency_key)s;

-- name: job
SELECT job_id, queue, task, payload, priority, tenant, max_attempts, enabled, created_at
FROM vigil_queue.jobs WHERE job_id = %(job_id)s;

-- name: job_executions
SELECT execution_id, state, attempt, scheduled_for FROM vigil_queue.executions
WHERE job_id = %(job_id)s ORDER BY scheduled_for DESC, execution_id DESC LIMIT %(limit)s;

-- name: disable_job
UPDATE vigil_queue.jobs SET enabled = false WHERE job_id = %(job_id)s RETURNING job_id;

-- name: cancel
-- Ready: it is never leased. Leased: the lease is taken away, so the holder's heartbeat and
-- acknowledgement (conditional on state 'leased' and its owner) match nothing and cannot revive it.
UPDATE vigil_queue.executions
SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL, finished_at = %(now)s,
    cancelled_by = %(by)s
WHERE (execution_id = %(execution_id)s OR job_id = %(job_id)s) AND state IN ('ready', 'leased')
RETURNING execution_id;

-- name: retry
-- A dead or cancelled execution, ready again at once with the same id and one more attempt (the
-- next number: an attempt's row is never overwritten), unless its job was deleted.
UPDATE vigil_queue.executions AS e
SET state = 'ready', attempt = e.attempt + 1, max_attempts = GREATEST(e.max_attempts, e.attempt + 1),
    run_after = %(now)s, finished_at = NULL, cancelled_by = NULL
WHERE e.execution_id = %(execution_id)s AND e.state IN ('dead', 'cancelled')
  AND NOT EXISTS (SELECT 1 FROM vigil_queue.jobs AS j WHERE j.job_id = e.job_id AND NOT j.enabled)
RETURNING e.queue;

-- name: timeline
SELECT e.execution_id, e.job_id, e.queue, e.task, e.payload, e.priority, e.tenant, e.state, e.attempt,
       e.max_attempts, e.lease_owner, e.lease_expires_at, e.run_after, e.scheduled_for,
       e.idempotency_key, e.finished_at, e.last_error, e.cancelled_by, COALESCE(j.enabled, true) AS job_enabled
FROM vigil_queue.executions AS e LEFT JOIN vigil_queue.jobs AS j ON j.job_id = e.job_id
WHERE e.execution_id = %(execution_id)s;