-- The attempts table (partitioned by day) and once_marks: what each attempt of an execution did.
-- Named blocks (`-- name: NAME`) with psycopg's %(name)s parameters; every time is a parameter.

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

-- name: once
-- The concurrency-safe guard: the first copy of an execution to claim `key` wins, whatever the attempt.
-- A claim names its lease's token: a copy whose lease was taken by a later attempt claims nothing.
INSERT INTO vigil_queue.once_marks (execution_id, key, attempt, worker, at)
SELECT e.execution_id, %(key)s, %(attempt)s, %(worker)s, %(now)s FROM vigil_queue.executions AS e
WHERE e.execution_id = %(execution_id)s AND e.queue = %(queue)s AND e.lease_token = %(token)s
ON CONFLICT (execution_id, key) DO NOTHING
RETURNING execution_id;

-- name: attempts_of
-- Every partition is probed by its key's leading execution_id (a timeline read, not a hot path): rows
-- filed under their finish day, whose execution was purged, are found too.
SELECT execution_id, attempt, worker, outcome, started_at, finished_at, error, duplicate
FROM vigil_queue.attempts WHERE execution_id = %(execution_id)s ORDER BY attempt;
