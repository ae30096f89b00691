-- The canonical schema of Vigil's history database, one block per dialect, for reading.
--
-- It is not applied by the operator: `SqlHistory.migrate()` runs the Alembic migrations
-- in migrations/versions/. tests/contract/test_history.py applies each block to an empty
-- database and checks that it equals what the migrations produce, so this file and the
-- migrations cannot drift apart. Change both together.
--
-- One row per execution attempt, upserted by (execution_id, attempt). Times are UTC.
-- An attempt's record only moves forward (ready -> running -> terminal); the upsert's
-- WHERE clause keeps a later stage from being overwritten by an earlier one.
--
-- One row per entry of a workflow's append-only history (workflow_events), inserted by
-- (workflow_uid, seq) with ON CONFLICT DO NOTHING: an entry never changes once appended,
-- so a repeated write keeps the row already there. `data` is the whole entry; the other
-- columns are copied out of it for querying. `definition` (migration 0003) is set on entry 0
-- only: the workflow's pinned definition, which the history folds over once the Workflow
-- object is gone (ttlAfterFinished); NULL on the other entries and on older rows.
--
-- One row per attempt whose log tail the operator stored (attempt_logs, migration 0004),
-- keyed like the attempt: the end of its main container's log, bounded (64 KiB by default)
-- and cut at a character boundary, NUL bytes dropped; or an empty text and a `note` saying
-- why the log could not be read. Not partitioned; retention deletes rows by scheduled_for
-- at the attempts' whole-day cutoff. Not partitioned on either database: retention
-- deletes a workflow's rows together, once every one of them is older than the retention
-- (queries.sql: expire_workflow_events), so a history is never cut short at the front.

-- name: postgresql
-- Partitioned by day of scheduled_for: retention drops whole partitions, and each day's
-- partition (attempts_YYYYMMDD, [day, day + 1) UTC) is created on demand before its
-- first row is written (queries.sql: create_partition). A partitioned table's primary key
-- must contain the partition key, hence scheduled_for in it; scheduled_for is the
-- occurrence's nominal time, a function of the execution id, so the idempotency key is
-- still effectively (execution_id, attempt).
CREATE TABLE attempts (
    execution_id  TEXT                     NOT NULL,
    attempt       SMALLINT                 NOT NULL,
    namespace     TEXT                     NOT NULL,
    job           TEXT                     NOT NULL,
    job_uid       TEXT                     NOT NULL,
    priority      TEXT                     NOT NULL,
    state         TEXT                     NOT NULL,
    reason        TEXT                     NOT NULL,
    scheduled_for TIMESTAMP WITH TIME ZONE NOT NULL,
    started_at    TIMESTAMP WITH TIME ZONE,
    finished_at   TIMESTAMP WITH TIME ZONE,
    pod           TEXT                     NOT NULL,
    error         TEXT                     NOT NULL,
    updated_at    TIMESTAMP WITH TIME ZONE NOT NULL,
    CONSTRAINT attempts_pkey PRIMARY KEY (execution_id, attempt, scheduled_for)
) PARTITION BY RANGE (scheduled_for);

-- "The latest attempts of this job": kubectl vigil history, the watchdog.
CREATE INDEX attempts_job_recent ON attempts (namespace, job, scheduled_for DESC);

-- Migration 0002.
CREATE TABLE workflow_events (
    workflow_uid TEXT                     NOT NULL,
    seq          INTEGER                  NOT NULL,
    namespace    TEXT                     NOT NULL,
    workflow     TEXT                     NOT NULL,
    event        TEXT                     NOT NULL,
    step         TEXT,
    attempt      INTEGER,
    at           TIMESTAMP WITH TIME ZONE NOT NULL,
    data         JSONB                    NOT NULL,
    definition   JSONB,  -- Migration 0003.
    CONSTRAINT workflow_events_pkey PRIMARY KEY (workflow_uid, seq)
);

-- "This workflow's history, in order": the newest workflow of that name, then its entries.
CREATE INDEX workflow_events_workflow ON workflow_events (namespace, workflow, seq);

-- Retention: finds the old rows without reading the rest.
CREATE INDEX workflow_events_at ON workflow_events (at);

-- Migration 0004.
CREATE TABLE attempt_logs (
    execution_id  TEXT                     NOT NULL,
    attempt       SMALLINT                 NOT NULL,
    namespace     TEXT                     NOT NULL,
    job           TEXT                     NOT NULL,
    pod           TEXT                     NOT NULL,
    scheduled_for TIMESTAMP WITH TIME ZONE NOT NULL,
    captured_at   TIMESTAMP WITH TIME ZONE NOT NULL,
    truncated     BOOLEAN                  NOT NULL,
    log_bytes     BIGINT                   NOT NULL,
    note          TEXT                     NOT NULL,
    text          TEXT                     NOT NULL,
    CONSTRAINT attempt_logs_pkey PRIMARY KEY (execution_id, attempt)
);

-- Retention: finds the old rows without reading the rest.
CREATE INDEX attempt_logs_scheduled_for ON attempt_logs (scheduled_for);

-- name: sqlite
-- The embedded default: one file, no partitions; retention deletes old rows. SQLite has
-- no time zone type: times are stored as UTC text ('YYYY-MM-DD HH:MM:SS.ffffff'), which
-- sorts and compares as time does.
CREATE TABLE attempts (
    execution_id  TEXT     NOT NULL,
    attempt       SMALLINT NOT NULL,
    namespace     TEXT     NOT NULL,
    job           TEXT     NOT NULL,
    job_uid       TEXT     NOT NULL,
    priority      TEXT     NOT NULL,
    state         TEXT     NOT NULL,
    reason        TEXT     NOT NULL,
    scheduled_for DATETIME NOT NULL,
    started_at    DATETIME,
    finished_at   DATETIME,
    pod           TEXT     NOT NULL,
    error         TEXT     NOT NULL,
    updated_at    DATETIME NOT NULL,
    CONSTRAINT attempts_pkey PRIMARY KEY (execution_id, attempt)
);

CREATE INDEX attempts_job_recent ON attempts (namespace, job, scheduled_for DESC);

-- Migration 0002. JSON is stored as text.
CREATE TABLE workflow_events (
    workflow_uid TEXT     NOT NULL,
    seq          INTEGER  NOT NULL,
    namespace    TEXT     NOT NULL,
    workflow     TEXT     NOT NULL,
    event        TEXT     NOT NULL,
    step         TEXT,
    attempt      INTEGER,
    at           DATETIME NOT NULL,
    data         JSON     NOT NULL,
    definition   JSON,  -- Migration 0003.
    CONSTRAINT workflow_events_pkey PRIMARY KEY (workflow_uid, seq)
);

CREATE INDEX workflow_events_workflow ON workflow_events (namespace, workflow, seq);

CREATE INDEX workflow_events_at ON workflow_events (at);

-- Migration 0004.
CREATE TABLE attempt_logs (
    execution_id  TEXT     NOT NULL,
    attempt       SMALLINT NOT NULL,
    namespace     TEXT     NOT NULL,
    job           TEXT     NOT NULL,
    pod           TEXT     NOT NULL,
    scheduled_for DATETIME NOT NULL,
    captured_at   DATETIME NOT NULL,
    truncated     BOOLEAN  NOT NULL,
    log_bytes     BIGINT   NOT NULL,
    note          TEXT     NOT NULL,
    text          TEXT     NOT NULL,
    CONSTRAINT attempt_logs_pkey PRIMARY KEY (execution_id, attempt)
);

CREATE INDEX attempt_logs_scheduled_for ON attempt_logs (scheduled_for);
