-- The vigil_queue schema as the migrations (vigil/queue/migrations/) leave it: generated, do not edit.
-- Regenerate with `make queue-schema` after adding a migration; tests/queue/test_schema.py fails until
-- this file matches (it applies this file to an empty database and compares both dumps).
-- Owners and privileges are not here: the roles are vigil/queue/roles.py's.

-- schema: vigil_queue
CREATE SCHEMA vigil_queue;

-- table: attempts
CREATE TABLE vigil_queue.attempts (
    day date NOT NULL,
    execution_id text NOT NULL,
    attempt smallint NOT NULL,
    worker text NOT NULL,
    outcome text NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone NOT NULL,
    error text,
    duplicate boolean DEFAULT false NOT NULL,
    CONSTRAINT attempts_outcome_check1 CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'lease_expired'::text])))
)
PARTITION BY RANGE (day);

-- table: attempts_default
CREATE TABLE vigil_queue.attempts_default (
    day date NOT NULL,
    execution_id text NOT NULL,
    attempt smallint NOT NULL,
    worker text NOT NULL,
    outcome text NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone NOT NULL,
    error text,
    duplicate boolean DEFAULT false NOT NULL,
    CONSTRAINT attempts_outcome_check1 CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'lease_expired'::text])))
);

-- table: executions
CREATE TABLE vigil_queue.executions (
    execution_id text NOT NULL,
    job_id text,
    queue text NOT NULL,
    task text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority smallint DEFAULT 0 NOT NULL,
    tenant text DEFAULT ''::text NOT NULL,
    state text NOT NULL,
    attempt smallint DEFAULT 1 NOT NULL,
    max_attempts smallint NOT NULL,
    lease_owner text,
    lease_expires_at timestamp with time zone,
    run_after timestamp with time zone NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    idempotency_key text,
    created_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    last_error text,
    cancelled_by text,
    leased_at timestamp with time zone,
    lease_token uuid,
    output jsonb,
    CONSTRAINT executions_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT executions_lease CHECK (((state = 'leased'::text) = (lease_owner IS NOT NULL))),
    CONSTRAINT executions_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT executions_state_check CHECK ((state = ANY (ARRAY['ready'::text, 'leased'::text, 'succeeded'::text, 'dead'::text, 'cancelled'::text])))
);

-- table: jobs
CREATE TABLE vigil_queue.jobs (
    job_id text NOT NULL,
    queue text NOT NULL,
    task text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority smallint DEFAULT 0 NOT NULL,
    tenant text DEFAULT ''::text NOT NULL,
    max_attempts smallint NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone NOT NULL,
    cron text,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    dst_gap text DEFAULT 'Shift'::text NOT NULL,
    dst_overlap text DEFAULT 'Once'::text NOT NULL,
    payload_template jsonb,
    expected_max_interval interval,
    jitter interval DEFAULT '00:00:00'::interval NOT NULL,
    catch_up_policy text DEFAULT 'All'::text NOT NULL,
    catch_up_window interval DEFAULT '00:05:00'::interval NOT NULL,
    catch_up_limit integer DEFAULT 100 NOT NULL,
    idempotency_key text,
    shard smallint DEFAULT 0 NOT NULL,
    next_run timestamp with time zone,
    deleted_at timestamp with time zone,
    last_success_at timestamp with time zone,
    CONSTRAINT jobs_catch_up_limit_check CHECK ((catch_up_limit >= 0)),
    CONSTRAINT jobs_catch_up_policy_check CHECK ((catch_up_policy = ANY (ARRAY['All'::text, 'Latest'::text, 'None'::text]))),
    CONSTRAINT jobs_deleted CHECK (((deleted_at IS NULL) OR (NOT enabled))),
    CONSTRAINT jobs_dst_gap_check CHECK ((dst_gap = ANY (ARRAY['Shift'::text, 'Skip'::text]))),
    CONSTRAINT jobs_dst_overlap_check CHECK ((dst_overlap = ANY (ARRAY['Once'::text, 'Twice'::text]))),
    CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT jobs_shard_check CHECK ((shard >= 0))
);

-- table: namespace_quotas
CREATE TABLE vigil_queue.namespace_quotas (
    namespace text NOT NULL,
    executions bigint DEFAULT 0 NOT NULL,
    payload_bytes bigint DEFAULT 0 NOT NULL,
    max_executions bigint,
    max_payload_bytes bigint,
    admitted bigint DEFAULT 0 NOT NULL,
    admitted_bytes bigint DEFAULT 0 NOT NULL,
    counted_at timestamp with time zone,
    CONSTRAINT namespace_quotas_executions_check CHECK ((executions >= 0)),
    CONSTRAINT namespace_quotas_max_executions_check CHECK ((max_executions >= 0)),
    CONSTRAINT namespace_quotas_max_payload_bytes_check CHECK ((max_payload_bytes >= 0)),
    CONSTRAINT namespace_quotas_payload_bytes_check CHECK ((payload_bytes >= 0))
);

-- table: once_marks
CREATE TABLE vigil_queue.once_marks (
    execution_id text NOT NULL,
    key text NOT NULL,
    attempt smallint NOT NULL,
    worker text NOT NULL,
    at timestamp with time zone NOT NULL
);

-- table: queues
CREATE TABLE vigil_queue.queues (
    queue text NOT NULL,
    lease_seconds double precision NOT NULL,
    heartbeat_seconds double precision NOT NULL,
    max_attempts smallint NOT NULL,
    backoff_initial_seconds double precision NOT NULL,
    backoff_factor double precision NOT NULL,
    backoff_max_seconds double precision NOT NULL,
    dead_retention_seconds double precision,
    tenant_max_concurrent integer,
    tenant_caps jsonb DEFAULT '{}'::jsonb NOT NULL,
    priorities jsonb DEFAULT '{}'::jsonb NOT NULL,
    objective_seconds double precision,
    generation bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT queues_heartbeat CHECK ((heartbeat_seconds < lease_seconds)),
    CONSTRAINT queues_heartbeat_seconds_check CHECK ((heartbeat_seconds > (0)::double precision)),
    CONSTRAINT queues_lease_seconds_check CHECK ((lease_seconds > (0)::double precision)),
    CONSTRAINT queues_max_attempts_check CHECK ((max_attempts >= 1))
);

-- table: schedule_buckets
CREATE TABLE vigil_queue.schedule_buckets (
    minute timestamp with time zone NOT NULL,
    shard smallint NOT NULL,
    job_id text NOT NULL,
    nominal timestamp with time zone NOT NULL,
    fire_at timestamp with time zone NOT NULL,
    fired_at timestamp with time zone,
    outcome text,
    execution_id text,
    reason text,
    CONSTRAINT schedule_buckets_marked CHECK (((fired_at IS NULL) = (outcome IS NULL))),
    CONSTRAINT schedule_buckets_outcome_check CHECK ((outcome = ANY (ARRAY['Fired'::text, 'Missed'::text, 'Skipped'::text, 'Failed'::text])))
)
PARTITION BY RANGE (minute);

-- table: schedule_buckets_default
CREATE TABLE vigil_queue.schedule_buckets_default (
    minute timestamp with time zone NOT NULL,
    shard smallint NOT NULL,
    job_id text NOT NULL,
    nominal timestamp with time zone NOT NULL,
    fire_at timestamp with time zone NOT NULL,
    fired_at timestamp with time zone,
    outcome text,
    execution_id text,
    reason text,
    CONSTRAINT schedule_buckets_marked CHECK (((fired_at IS NULL) = (outcome IS NULL))),
    CONSTRAINT schedule_buckets_outcome_check CHECK ((outcome = ANY (ARRAY['Fired'::text, 'Missed'::text, 'Skipped'::text, 'Failed'::text])))
);

-- table: tenant_roles
CREATE TABLE vigil_queue.tenant_roles (
    role text NOT NULL,
    namespace text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tenant_roles_namespace_check CHECK (((namespace <> ''::text) AND (namespace <> '*'::text)))
);

-- table: vigil_queue_version
CREATE TABLE vigil_queue.vigil_queue_version (
    version_num character varying(32) NOT NULL
);

-- table: watch_summaries
CREATE TABLE vigil_queue.watch_summaries (
    queue text NOT NULL,
    checked_at timestamp with time zone NOT NULL,
    overdue integer NOT NULL,
    overdue_jobs jsonb DEFAULT '[]'::jsonb NOT NULL,
    audited_at timestamp with time zone,
    broken integer,
    broken_jobs jsonb,
    CONSTRAINT watch_summaries_broken_check CHECK ((broken >= 0)),
    CONSTRAINT watch_summaries_overdue_check CHECK ((overdue >= 0))
);

-- table attach: attempts_default
ALTER TABLE ONLY vigil_queue.attempts ATTACH PARTITION vigil_queue.attempts_default DEFAULT;

-- table attach: schedule_buckets_default
ALTER TABLE ONLY vigil_queue.schedule_buckets ATTACH PARTITION vigil_queue.schedule_buckets_default DEFAULT;

-- constraint: attempts attempts_pkey
ALTER TABLE ONLY vigil_queue.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (execution_id, attempt, day);

-- constraint: attempts_default attempts_default_pkey
ALTER TABLE ONLY vigil_queue.attempts_default
    ADD CONSTRAINT attempts_default_pkey PRIMARY KEY (execution_id, attempt, day);

-- constraint: executions executions_pkey
ALTER TABLE ONLY vigil_queue.executions
    ADD CONSTRAINT executions_pkey PRIMARY KEY (execution_id);

-- constraint: jobs jobs_idempotency
ALTER TABLE ONLY vigil_queue.jobs
    ADD CONSTRAINT jobs_idempotency UNIQUE (queue, idempotency_key);

-- constraint: jobs jobs_pkey
ALTER TABLE ONLY vigil_queue.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (job_id);

-- constraint: namespace_quotas namespace_quotas_pkey
ALTER TABLE ONLY vigil_queue.namespace_quotas
    ADD CONSTRAINT namespace_quotas_pkey PRIMARY KEY (namespace);

-- constraint: once_marks once_marks_pkey
ALTER TABLE ONLY vigil_queue.once_marks
    ADD CONSTRAINT once_marks_pkey PRIMARY KEY (execution_id, key);

-- constraint: queues queues_pkey
ALTER TABLE ONLY vigil_queue.queues
    ADD CONSTRAINT queues_pkey PRIMARY KEY (queue);

-- constraint: schedule_buckets schedule_buckets_occurrence
ALTER TABLE ONLY vigil_queue.schedule_buckets
    ADD CONSTRAINT schedule_buckets_occurrence UNIQUE (job_id, nominal, minute);

-- constraint: schedule_buckets_default schedule_buckets_default_job_id_nominal_minute_key
ALTER TABLE ONLY vigil_queue.schedule_buckets_default
    ADD CONSTRAINT schedule_buckets_default_job_id_nominal_minute_key UNIQUE (job_id, nominal, minute);

-- constraint: tenant_roles tenant_roles_namespace_key
ALTER TABLE ONLY vigil_queue.tenant_roles
    ADD CONSTRAINT tenant_roles_namespace_key UNIQUE (namespace);

-- constraint: tenant_roles tenant_roles_pkey
ALTER TABLE ONLY vigil_queue.tenant_roles
    ADD CONSTRAINT tenant_roles_pkey PRIMARY KEY (role);

-- constraint: vigil_queue_version vigil_queue_version_pkc
ALTER TABLE ONLY vigil_queue.vigil_queue_version
    ADD CONSTRAINT vigil_queue_version_pkc PRIMARY KEY (version_num);

-- constraint: watch_summaries watch_summaries_pkey
ALTER TABLE ONLY vigil_queue.watch_summaries
    ADD CONSTRAINT watch_summaries_pkey PRIMARY KEY (queue);

-- index: executions_cancelled
CREATE INDEX executions_cancelled ON vigil_queue.executions USING btree (queue, finished_at) WHERE (state = 'cancelled'::text);

-- index: executions_dead
CREATE INDEX executions_dead ON vigil_queue.executions USING btree (queue, finished_at) WHERE (state = 'dead'::text);

-- index: executions_idempotency
CREATE UNIQUE INDEX executions_idempotency ON vigil_queue.executions USING btree (queue, idempotency_key) WHERE (idempotency_key IS NOT NULL);

-- index: executions_job
CREATE INDEX executions_job ON vigil_queue.executions USING btree (job_id, scheduled_for) WHERE (job_id IS NOT NULL);

-- index: executions_job_succeeded
CREATE INDEX executions_job_succeeded ON vigil_queue.executions USING btree (job_id, finished_at) WHERE ((state = 'succeeded'::text) AND (job_id IS NOT NULL));

-- index: executions_leased
CREATE INDEX executions_leased ON vigil_queue.executions USING btree (queue, lease_expires_at) WHERE (state = 'leased'::text);

-- index: executions_leased_tenant
CREATE INDEX executions_leased_tenant ON vigil_queue.executions USING btree (queue, tenant) WHERE (state = 'leased'::text);

-- index: executions_ready
CREATE INDEX executions_ready ON vigil_queue.executions USING btree (queue, tenant, priority, run_after) WHERE (state = 'ready'::text);

-- index: executions_succeeded
CREATE INDEX executions_succeeded ON vigil_queue.executions USING btree (queue, finished_at) WHERE (state = 'succeeded'::text);

-- index: jobs_deleted
CREATE INDEX jobs_deleted ON vigil_queue.jobs USING btree (deleted_at) WHERE (deleted_at IS NOT NULL);

-- index: jobs_queue
CREATE INDEX jobs_queue ON vigil_queue.jobs USING btree (queue, created_at, job_id);

-- index: schedule_buckets_due
CREATE INDEX schedule_buckets_due ON ONLY vigil_queue.schedule_buckets USING btree (shard, fire_at) WHERE (fired_at IS NULL);

-- index: schedule_buckets_default_shard_fire_at_idx
CREATE INDEX schedule_buckets_default_shard_fire_at_idx ON vigil_queue.schedule_buckets_default USING btree (shard, fire_at) WHERE (fired_at IS NULL);

-- index attach: attempts_default_pkey
ALTER INDEX vigil_queue.attempts_pkey ATTACH PARTITION vigil_queue.attempts_default_pkey;

-- index attach: schedule_buckets_default_job_id_nominal_minute_key
ALTER INDEX vigil_queue.schedule_buckets_occurrence ATTACH PARTITION vigil_queue.schedule_buckets_default_job_id_nominal_minute_key;

-- index attach: schedule_buckets_default_shard_fire_at_idx
ALTER INDEX vigil_queue.schedule_buckets_due ATTACH PARTITION vigil_queue.schedule_buckets_default_shard_fire_at_idx;

-- fk constraint: executions executions_job_id_fkey
ALTER TABLE ONLY vigil_queue.executions
    ADD CONSTRAINT executions_job_id_fkey FOREIGN KEY (job_id) REFERENCES vigil_queue.jobs(job_id) ON DELETE SET NULL;

-- The functions the migrations install: each one's body is a named block of vigil/queue/sql/*.sql
-- (vigil/queue/functions.py), so only their signatures are listed here.
-- function: admit_api_execution(text)
-- function: admit_api_job(text)
-- function: admit_api_namespace(text)
-- function: admit_api_queue(text)
-- function: admit_api_queues(text[])
-- function: admit_caller(text)
-- function: api_attempts_of(text)
-- function: api_cancel(timestamp with time zone, text, text, text)
-- function: api_catalogue_add(smallint, timestamp with time zone, text[], text[], text[], smallint[], text[], smallint[], text[], text[], text[], text[], jsonb[], interval[], interval[], text[], interval[], integer[], text[], smallint[], timestamp with time zone[], timestamp with time zone[], timestamp with time zone[])
-- function: api_catalogue_by_key(text, text[])
-- function: api_dead_letters(text, timestamp with time zone, text, integer)
-- function: api_disable_job(timestamp with time zone, text)
-- function: api_drop_job(text)
-- function: api_execution_output(text)
-- function: api_insert_job(text, text, text, jsonb, smallint, text, smallint, smallint, timestamp with time zone)
-- function: api_insert_job_execution(text, text, text, text, jsonb, smallint, text, smallint, smallint, timestamp with time zone, text, timestamp with time zone)
-- function: api_job(text)
-- function: api_job_executions(text, integer)
-- function: api_job_of_key(text, text)
-- function: api_login_locate_execution(text)
-- function: api_login_locate_job(text)
-- function: api_namespace()
-- function: api_notify(text)
-- function: api_queue_breakdown(text, timestamp with time zone, integer)
-- function: api_queue_jobs(text, timestamp with time zone, text, integer)
-- function: api_quota_admit(jsonb[], text)
-- function: api_quota_ensure(text)
-- function: api_retry(timestamp with time zone, text)
-- function: api_timeline(text)
-- function: namespace_of(text)
-- function: worker_acknowledged_among(text[], smallint[], text[], text, text)
-- function: worker_cancelled_among(text[], smallint[], text)
-- function: worker_declared_queue(text)
-- function: worker_expired(text, timestamp with time zone, integer)
-- function: worker_heartbeat(timestamp with time zone, text[], smallint[], uuid[], text, text)
-- function: worker_lease(text, integer, jsonb, integer, timestamp with time zone, text[], smallint[], integer[], integer, text, timestamp with time zone)
-- function: worker_lock_tenants(text)
-- function: worker_mark_duplicates(text[], smallint[], text)
-- function: worker_once(text, smallint, text, timestamp with time zone, text, text, uuid)
-- function: worker_record_attempts(text[], smallint[], text[], text[], timestamp with time zone[], timestamp with time zone[], text[], text)
-- function: worker_settle(text, smallint, timestamp with time zone, text, timestamp with time zone, text, smallint, text, text, uuid)
-- function: worker_settle_succeeded(timestamp with time zone, text[], smallint[], uuid[], text[], timestamp with time zone[], timestamp with time zone[], text, text)
