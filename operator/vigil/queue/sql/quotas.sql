-- The namespace_quotas table (vigil/queue/bounds.py, revision q0010bounded): per-namespace quotas on what
-- a namespace keeps unfinished.
-- Named blocks (`-- name: NAME`) with psycopg's %(name)s parameters; every time is a parameter.

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
