-- Raw SQL the history adapter runs besides its SQLAlchemy Core statements (store.py):
-- PostgreSQL partition upkeep and DDL locking, and the workflow_events statements and the
-- paged list of a job's executions (both databases). One statement per named block.
--
-- DDL takes no bind parameters, so {partition}, {start} and {end} are formatted in by
-- store.py — always from a date it computed (attempts_YYYYMMDD, ISO timestamps), never
-- from a record's text. The other statements take :name bind parameters, typed
-- by store.py (times as UTC, `data` as JSON/JSONB).

-- name: lock_ddl
-- Serialises schema changes (migrations, creating and dropping partitions) between
-- operator replicas; released when the transaction ends.
SELECT pg_advisory_xact_lock(hashtext('vigil.history.ddl'));

-- name: create_partition
-- One UTC day of attempts. Idempotent: a day that already has its partition is left alone.
CREATE TABLE IF NOT EXISTS {partition} PARTITION OF attempts
    FOR VALUES FROM ('{start}') TO ('{end}');

-- name: list_partitions
SELECT child.relname
FROM pg_inherits
JOIN pg_class AS child ON child.oid = pg_inherits.inhrelid
WHERE pg_inherits.inhparent = 'attempts'::regclass
ORDER BY child.relname;

-- name: drop_partition
-- Retention: a whole day at once, no row-by-row DELETE and no vacuum debt.
DROP TABLE IF EXISTS {partition};

-- name: insert_workflow_event
-- One history entry. An entry never changes once appended, so a key already present keeps
-- its row: writing a batch twice (an answer lost in an outage) is harmless.
-- :definition is the pinned definition on entry 0, NULL on the others.
INSERT INTO workflow_events (workflow_uid, seq, namespace, workflow, event, step, attempt, at, data, definition)
VALUES (:workflow_uid, :seq, :namespace, :workflow, :event, :step, :attempt, :at, :data, :definition)
ON CONFLICT (workflow_uid, seq) DO NOTHING;

-- name: latest_workflow_events
-- The first page of the history of the newest workflow of this name: several can have had the
-- name over time (deleted, created again), one uid each; the newest is the one with the latest
-- entry (the uid breaks a tie, so the answer is the same every time). :limit is one more than
-- the page, so the caller knows whether another page follows; the next pages are asked by uid.
SELECT workflow_uid, seq, namespace, workflow, event, step, attempt, at, data, definition
FROM workflow_events
WHERE workflow_uid = (
    SELECT workflow_uid
    FROM workflow_events
    WHERE namespace = :namespace AND workflow = :workflow
    GROUP BY workflow_uid
    ORDER BY max(at) DESC, workflow_uid DESC
    LIMIT 1
)
ORDER BY seq
LIMIT :limit;

-- name: workflow_events_of_uid
-- A page of the history of one workflow, named by its uid as well: its entries after
-- :after_seq (-1 for the first page), found by the primary key. The name and namespace are
-- still required, so a uid of another namespace's workflow answers nothing.
SELECT workflow_uid, seq, namespace, workflow, event, step, attempt, at, data, definition
FROM workflow_events
WHERE workflow_uid = :workflow_uid AND seq > :after_seq
  AND namespace = :namespace AND workflow = :workflow
ORDER BY seq
LIMIT :limit;

-- name: workflow_event
-- One entry of a workflow's history, by uid and seq: where a step output that left the
-- Workflow's status (vigil.core.checkpoint) is read back when a dependent step needs it.
SELECT workflow_uid, seq, namespace, workflow, event, step, attempt, at, data, definition
FROM workflow_events
WHERE workflow_uid = :workflow_uid AND seq = :seq;

-- name: expire_workflow_events
-- Retention: a workflow's rows go together, once every one is older than :cutoff, so no
-- history is left without its beginning (a workflow still writing keeps its old entries).
DELETE FROM workflow_events
WHERE at < :cutoff
  AND NOT EXISTS (
    SELECT 1
    FROM workflow_events AS newer
    WHERE newer.workflow_uid = workflow_events.workflow_uid AND newer.at >= :cutoff
  );

-- name: job_executions
-- One job's executions, newest occurrence first, one row each: the last recorded attempt (the
-- final state, once finished) with the first attempt's start. Keyset-paged: only executions
-- strictly after (:after_scheduled_for, :after_execution_id) in that order; the first page
-- passes a cursor after every row. The redundant `scheduled_for <= cursor` lets the index seek
-- straight to the cursor (the OR alone makes SQLite scan from the top), so a page deep in the
-- history costs what the first one does. :limit is one more than the page, so the caller knows
-- whether another page follows. The walk uses attempts_job_recent; an execution's attempts are
-- found by the primary key (all of them share its scheduled_for, so on PostgreSQL they are in
-- one partition).
SELECT latest.execution_id, latest.namespace, latest.job, latest.job_uid, latest.priority,
       latest.scheduled_for, latest.state, latest.attempt AS attempts, latest.reason,
       (SELECT min(earlier.started_at)
        FROM attempts AS earlier
        WHERE earlier.execution_id = latest.execution_id
          AND earlier.scheduled_for = latest.scheduled_for) AS started_at,
       latest.finished_at, latest.pod, latest.error
FROM attempts AS latest
WHERE latest.namespace = :namespace AND latest.job = :job
  AND latest.scheduled_for <= :after_scheduled_for
  AND (latest.scheduled_for < :after_scheduled_for
       OR (latest.scheduled_for = :after_scheduled_for AND latest.execution_id < :after_execution_id))
  AND latest.attempt = (
    SELECT max(other.attempt)
    FROM attempts AS other
    WHERE other.execution_id = latest.execution_id AND other.scheduled_for = latest.scheduled_for
  )
ORDER BY latest.scheduled_for DESC, latest.execution_id DESC
LIMIT :limit;
