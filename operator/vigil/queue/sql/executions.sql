-- The executions table: submitted (vigil/queue/store.py), leased, extended and settled by workers
-- (store.WorkerStore, through their vigil_queue.worker_<block> functions), inspected,
-- cancelled and retried through the HTTP API, and located by id by the API's login role before it acts
-- for a namespace (vigil/queue/apistore.py): which queue holds the id, nothing else.
-- Named blocks (`-- name: NAME`) with psycopg's %(name)s parameters; every time is a parameter.

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
-- (`IS NOT NULL` names the index of keyed executions for a plan made before the keys are known.)
SELECT idempotency_key, execution_id FROM vigil_queue.executions
WHERE queue = %(queue)s AND idempotency_key = ANY(%(idempotency_keys)s::text[]) AND idempotency_key IS NOT NULL;

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
-- the attempt was this worker's; the execution takes that attempt's number back. `outputs` are what
-- the tasks returned, as JSON text the worker checked and bounded (vigil.worker.outputs); NULL for
-- a task that returned None (or something the store cannot keep). A recurring job's success goes
-- on its row too (`jobs.last_success_at`, which the watchdog reads), only forward: an older success
-- acknowledged after a newer one leaves the newer in place and the row unwritten. A one-off job's
-- row is not written (the watchdog watches recurring jobs only). last_success_at is in no index,
-- so the job's new row version can be a HOT update. Each attempt it settles takes its attempt row in
-- the same statement (`started` and `finished` are each attempt's times; record_attempts has the
-- rest): a late success turns the expiry's row, which names this worker, into the success it was.
-- A batch whose every attempt it settles is acknowledged in this one statement.
WITH settled AS (
UPDATE vigil_queue.executions AS e
SET state = 'succeeded', attempt = a.attempt, lease_owner = NULL, lease_expires_at = NULL, leased_at = NULL,
    finished_at = %(now)s, last_error = NULL, output = a.output::jsonb
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[], %(tokens)s::uuid[], %(outputs)s::text[],
            %(started)s::timestamptz[], %(finished)s::timestamptz[])
     AS a(execution_id, attempt, token, output, started_at, finished_at)
WHERE e.execution_id = a.execution_id AND e.queue = %(queue)s AND e.lease_token = a.token
  AND e.execution_id = ANY(%(execution_ids)s::text[])  -- the batch's keys, whatever plan the session keeps
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
RETURNING e.execution_id, e.job_id, e.finished_at, e.attempt, e.scheduled_for,
          a.started_at AS attempt_started, a.finished_at AS attempt_finished
),
attempt_rows AS (
    INSERT INTO vigil_queue.attempts AS x (day, execution_id, attempt, worker, outcome, started_at, finished_at)
    SELECT (s.scheduled_for AT TIME ZONE 'UTC')::date, s.execution_id, s.attempt, %(worker)s, 'succeeded',
           s.attempt_started, s.attempt_finished
    FROM settled AS s
    ON CONFLICT (execution_id, attempt, day) DO UPDATE
        SET outcome = excluded.outcome, started_at = excluded.started_at, finished_at = excluded.finished_at,
            error = 'acknowledged after its lease expired', duplicate = false
        WHERE x.outcome = 'lease_expired' AND x.worker = excluded.worker
),
recorded AS (
    UPDATE vigil_queue.jobs AS j SET last_success_at = GREATEST(j.last_success_at, s.finished_at)
    FROM (SELECT job_id, max(finished_at) AS finished_at FROM settled WHERE job_id IS NOT NULL GROUP BY job_id) AS s
    WHERE j.job_id = s.job_id AND j.cron IS NOT NULL
      AND (j.last_success_at IS NULL OR j.last_success_at < s.finished_at)
)
SELECT s.execution_id FROM settled AS s;

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

-- name: execution
SELECT execution_id, queue, task, payload, priority, tenant, state, attempt, max_attempts,
       lease_owner, lease_expires_at, run_after, scheduled_for, idempotency_key, finished_at,
       last_error, output
FROM vigil_queue.executions WHERE execution_id = %(execution_id)s;

-- name: states_of
-- Where each of these executions is (a workflow's task steps, read by the workflow engine each
-- pass while they run), and a succeeded one's output: one index probe per id, ids not enqueued left out.
SELECT execution_id, state, attempt, last_error, output FROM vigil_queue.executions
WHERE execution_id = ANY(%(execution_ids)s::text[]);

-- name: counts
SELECT state, count(*) FROM vigil_queue.executions WHERE queue = %(queue)s GROUP BY state;

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

-- name: execution_output
-- What a succeeded execution's task returned (NULL: none), read beside its `timeline` (the HTTP
-- API's execution). A block of its own rather than a column of `timeline`: the API of the previous
-- version reads the rows of its `api_timeline` function by name into a record with no output, so
-- a column added there would fail every execution read of an operator replica not yet upgraded.
SELECT output FROM vigil_queue.executions WHERE execution_id = %(execution_id)s;

-- name: locate_execution
SELECT queue FROM vigil_queue.executions WHERE execution_id = %(execution_id)s;
