"""The workers' and the HTTP API's statements as functions: the only doors a namespace's roles have.

A worker never reads or writes a table. Each statement a worker runs (its block in
`sql/*.sql`) is installed as a `SECURITY DEFINER` function of the schema's owner,
`vigil_queue.worker_<block>`, and `WorkerStore` calls the function, whoever it connects as:

* Its body is the block itself, each `%(name)s` becoming the parameter `p_name`, so the
  statement is written once and the plans the tests explain are the plans the functions run.
* Every worker statement names its queue (`%(queue)s`) and is confined to it; the function first
  asks `vigil_queue.admit_caller(queue)`, which finds the namespace of the *session's* role
  (`session_user`: what the client logged in as, which `SET ROLE` does not change and only a
  superuser's `SET SESSION AUTHORIZATION` could) in `tenant_roles`. A namespace's role may use
  its own namespace's queues only; a role that is no namespace's must be the schema's owner (the
  operator, tests, a worker given the owner's DSN); anyone else is refused.
* `search_path` is pinned (`pg_catalog, pg_temp`: every name in a block is schema-qualified), so
  a caller's objects can never stand in for the owner's; JIT is off.
* The lease is planned once per session (`plan_cache_mode = force_generic_plan`). Left to choose,
  PostgreSQL planned it anew at every call (its generic plan's estimate is far above a custom
  one's, since a LIMIT that is a parameter is guessed at a tenth of the table): 0.7 ms of
  planning for 0.3 ms of execution, two thirds of a worker's time in the database on a backlog.
  Its generic plan reads the executions by index only, at 100,000 analysed rows, at 1,000,000,
  and when it was made on an empty queue before a backlog arrived (tests/queue/test_backlog.py);
  its estimate grows with the table but, JIT being off, compiles nothing. It is planned with
  sequential scans off: made on an empty table, whose size PostgreSQL guesses at 10 pages, the
  plan could otherwise join the chosen rows to the executions by reading the whole table (one
  added column, `output`, tipped that guess), and keep doing so through the backlog that
  followed. Every read of the lease has an index to use. The statements that read the
  executions by key for a batch (`BY_KEY`: acknowledgements, heartbeats, the attempts' rows) keep
  PostgreSQL's choice of plan but with sequential and bitmap scans off, for the same reason: made
  on a young table, `record_attempts`'s plan read the whole table for each row of a batch, and
  `settle_succeeded`'s every ready execution of the queue (which also names its batch's keys as an
  index condition, so no plan of it reads more than its batch). The other statements
  are cheap to plan and keep PostgreSQL's choice: a plan made once, when a table was empty, would
  otherwise serve the whole session however the table grew (until an ANALYZE invalidates it).
* What acknowledges, extends or claims by a lease (heartbeat, settle, settle_succeeded, once)
  names the lease's token, drawn when the lease is taken: an acknowledgement of a lease taken
  since by another attempt (a stale token) changes nothing.

The HTTP API's statements are installed the same way, as `vigil_queue.api_<block>`
(`API_STATEMENTS`; vigil.queue.apistore calls them), for the API acting as a namespace's *API role*
(`SET ROLE` from its own login role, which is granted each namespace's API role and no table).
Their check is `vigil_queue.api_namespace()`: the namespace whose API role the session took, read
from `current_setting('role')` (inside a SECURITY DEFINER function `current_user` is the owner,
but the `role` setting is still the caller's, and PostgreSQL lets a session set it only to a role
its session user was granted). Each API function is confined to that namespace by the queue it
names, else the queues, else the namespace, else the execution or job ids it is given (each must
be of a row in that namespace). The API's login role may call only the two `api_login_locate_*`
functions, which say which queue holds an id.

The functions are replaced whenever the store migrates (`install`), so they always run this
version's statements. EXECUTE is revoked from PUBLIC; a namespace's role is granted each worker
function, its API role each API function (`grant_sql`, `api_grant_sql`), and both USAGE on the
schema, nothing else (vigil.queue.roles).
"""

from __future__ import annotations

import dataclasses
import re

from vigil.queue.queries import PLACEHOLDER, QUERIES

SCHEMA = "vigil_queue"
PREFIX = "worker_"

#: Each parameter's type: one meaning per name across the worker's statements.
PARAMETER_TYPES: dict[str, str] = {
    "queue": "text",
    "tasks": "text[]",
    "limit": "integer",
    "now": "timestamptz",
    "worker": "text",
    "expires": "timestamptz",
    "tenant_cap": "integer",
    "tenant_caps": "jsonb",
    "reserved_priorities": "smallint[]",
    "reserved_free": "integer[]",
    "shared_free": "integer",
    "execution_ids": "text[]",
    "attempts": "smallint[]",
    "tokens": "uuid[]",
    "token": "uuid",
    "state": "text",
    "next_attempt": "smallint",
    "run_after": "timestamptz",
    "error": "text",
    "execution_id": "text",
    "attempt": "smallint",
    "key": "text",
    "outcomes": "text[]",
    "workers": "text[]",
    "started": "timestamptz[]",
    "finished": "timestamptz[]",
    "errors": "text[]",
    "outputs": "text[]",  # JSON text, cast to jsonb by the statement (settle_succeeded)
    # the HTTP API's statements (API_STATEMENTS)
    "job_id": "text",
    "task": "text",
    "payload": "jsonb",
    "priority": "smallint",
    "tenant": "text",
    "max_attempts": "smallint",
    "default_max_attempts": "smallint",
    "run_at": "timestamptz",
    "idempotency_key": "text",
    "by": "text",
    "namespace": "text",
    "payloads": "jsonb[]",
    "after_at": "timestamptz",
    "after_id": "text",
    "queues": "text[]",
    "job_ids": "text[]",
    "priorities": "smallint[]",
    "tenants": "text[]",
    "crons": "text[]",
    "timezones": "text[]",
    "dst_gaps": "text[]",
    "dst_overlaps": "text[]",
    "payload_templates": "jsonb[]",
    "expected_max_intervals": "interval[]",
    "jitters": "interval[]",
    "catch_up_policies": "text[]",
    "catch_up_windows": "interval[]",
    "catch_up_limits": "integer[]",
    "idempotency_keys": "text[]",
    "shards": "smallint[]",
    "next_runs": "timestamptz[]",
    "minutes": "timestamptz[]",
    "fire_ats": "timestamptz[]",
}

#: The statements whose plan is made once per session (see the module doc).
PLANNED_ONCE = frozenset({"lease"})
#: What such a statement's function sets besides every function's: the plan made once, and made
#: without a sequential scan of the executions, whatever size the table had when it was made.
PLANNED_ONCE_SETTINGS = (("plan_cache_mode", "force_generic_plan"), ("enable_seqscan", "off"))
#: The statements that read the executions by key for a batch of ids (an acknowledgement, a
#: heartbeat, the attempts' rows): PostgreSQL's choice of plan, but never a sequential or bitmap scan
#: of the executions. A session's plan can be one made while the table was young (a worker started
#: into a stream), and is kept until an ANALYZE: `record_attempts` so joined each batch to the whole
#: table (3.5 s a batch of 2,400 at 50,000 rows: a streaming worker ran 630 executions/s, not
#: 6,000), and `settle_succeeded` read every ready execution of the queue through a bitmap of the
#: partial indexes of its states (9,190 read to settle 90 in a stream of 4 workers, 7 ms a call).
BY_KEY = frozenset({"record_attempts", "settle", "settle_succeeded", "heartbeat"})
BY_KEY_SETTINGS = (("enable_seqscan", "off"), ("enable_bitmapscan", "off"))
#: Each statement's planner settings beside every function's (none for the rest).
PLANNING: dict[str, tuple[tuple[str, str], ...]] = {
    **dict.fromkeys(PLANNED_ONCE, PLANNED_ONCE_SETTINGS),
    **dict.fromkeys(BY_KEY, BY_KEY_SETTINGS),
}

ROW_OF_LEASE = (
    "execution_id text, task text, payload jsonb, attempt smallint, max_attempts smallint, "
    "scheduled_for timestamptz, idempotency_key text, priority smallint, tenant text, lease_token uuid"
)


@dataclasses.dataclass(frozen=True)
class WorkerStatement:
    """A named block of sql/*.sql a worker (or the API) runs, and what its function returns (None:
    nothing); `types`: a parameter whose type differs in this block from PARAMETER_TYPES'."""

    block: str
    returns: str | None
    types: tuple[tuple[str, str], ...] = ()

    def type_of(self, name: str) -> str:
        return dict(self.types).get(name) or PARAMETER_TYPES[name]


WORKER_STATEMENTS: tuple[WorkerStatement, ...] = (
    WorkerStatement("lease", ROW_OF_LEASE),
    WorkerStatement("lock_tenants", None),
    WorkerStatement("declared_queue", (
        "lease_seconds double precision, heartbeat_seconds double precision, max_attempts smallint, "
        "backoff_initial_seconds double precision, backoff_factor double precision, "
        "backoff_max_seconds double precision, dead_retention_seconds double precision, "
        "tenant_max_concurrent integer, tenant_caps jsonb, priorities jsonb, objective_seconds double precision"
    )),
    WorkerStatement("heartbeat", "execution_id text"),
    WorkerStatement("expired", (
        "execution_id text, attempt smallint, max_attempts smallint, lease_owner text, "
        "lease_expires_at timestamptz, lease_token uuid"
    )),
    WorkerStatement("settle", "execution_id text"),
    WorkerStatement("settle_succeeded", "execution_id text"),
    WorkerStatement("record_attempts", None),
    WorkerStatement("mark_duplicates", "execution_id text"),
    WorkerStatement("acknowledged_among", "execution_id text, attempt smallint"),
    WorkerStatement("cancelled_among", "execution_id text"),
    WorkerStatement("once", "execution_id text"),
)


#: The HTTP API's statements (vigil.queue.apistore): each becomes `vigil_queue.api_<block>`,
#: callable only by a namespace's API role (`SET ROLE` by the API's login role) and confined to that
#: namespace (see `_api_guard`). The two `locate_*` blocks are the API login role's own, before it
#: acts for any namespace: they answer only which queue holds an id, so the API learns whom to ask.
API_STATEMENTS: tuple[WorkerStatement, ...] = (
    WorkerStatement("insert_job", None),
    WorkerStatement("insert_job_execution", "execution_id text"),
    WorkerStatement("drop_job", None),
    WorkerStatement("job_of_key", "job_id text, execution_id text, scheduled_for timestamptz"),
    WorkerStatement("notify", None),
    WorkerStatement("quota_ensure", None),
    WorkerStatement("quota_admit", (
        "admitted bigint, admitted_bytes bigint, offered_bytes bigint, executions bigint, "
        "payload_bytes bigint, max_executions bigint, max_payload_bytes bigint"
    )),
    WorkerStatement("job", (
        "job_id text, queue text, task text, payload jsonb, priority smallint, tenant text, "
        "max_attempts smallint, enabled boolean, created_at timestamptz, cron text, timezone text, "
        "payload_template jsonb, expected_max_interval interval, next_run timestamptz"
    )),
    WorkerStatement("job_executions", "execution_id text, state text, attempt smallint, scheduled_for timestamptz"),
    WorkerStatement("disable_job", "job_id text"),
    WorkerStatement("cancel", "execution_id text"),
    WorkerStatement("retry", "queue text, payload jsonb"),
    WorkerStatement("timeline", (
        "execution_id text, job_id text, queue text, task text, payload jsonb, priority smallint, "
        "tenant text, state text, attempt smallint, max_attempts smallint, lease_owner text, "
        "lease_expires_at timestamptz, run_after timestamptz, scheduled_for timestamptz, "
        "idempotency_key text, finished_at timestamptz, last_error text, cancelled_by text, job_enabled boolean"
    )),
    WorkerStatement("execution_output", "output jsonb"),
    WorkerStatement("attempts_of", (
        "execution_id text, attempt smallint, worker text, outcome text, started_at timestamptz, "
        "finished_at timestamptz, error text, duplicate boolean"
    )),
    WorkerStatement("queue_jobs", (
        "job_id text, task text, enabled boolean, priority smallint, tenant text, created_at timestamptz, "
        "execution_id text, state text"
    )),
    WorkerStatement("dead_letters", (
        "execution_id text, task text, tenant text, priority smallint, attempt smallint, max_attempts smallint, "
        "scheduled_for timestamptz, finished_at timestamptz, last_error text"
    )),
    WorkerStatement("queue_breakdown", (
        "priority smallint, tenant text, ready numeric, leased numeric, dead numeric, oldest_ready timestamptz"
    )),
    WorkerStatement("catalogue_add", "job_id text", types=(("max_attempts", "smallint[]"),)),
    WorkerStatement("catalogue_by_key", "idempotency_key text, job_id text, next_run timestamptz"),
)
API_PREFIX = "api_"
LOCATE_PREFIX = "api_login_"
LOCATE_STATEMENTS: tuple[WorkerStatement, ...] = (
    WorkerStatement("locate_execution", "queue text"),
    WorkerStatement("locate_job", "queue text"),
)


def parameters(statement: str) -> list[str]:
    """The statement's parameter names, in the order they first appear."""
    return list(dict.fromkeys(PLACEHOLDER.findall(statement)))


def function_name(block: str, prefix: str = PREFIX) -> str:
    return f"{SCHEMA}.{prefix}{block}"


def _worker_guard(names: list[str], spec: WorkerStatement) -> str:
    if "queue" not in names:
        raise ValueError(f"worker statement {spec.block} is not confined to a queue: it has no %(queue)s")
    return f"PERFORM {SCHEMA}.admit_caller(p_queue);"


def _api_guard(names: list[str], spec: WorkerStatement) -> str:
    """What confines an API statement to the namespace its caller acts for (`api_namespace`): the
    queue it names, else the queues, else the namespace; a statement that names none of these
    reads or writes by id, and each id it is given must be of a row in that namespace."""
    for name, check in (("queue", "admit_api_queue"), ("queues", "admit_api_queues"),
                        ("namespace", "admit_api_namespace")):  # fmt: skip
        if name in names:
            return f"PERFORM {SCHEMA}.{check}(p_{name});"
    ids = [n for n in ("execution_id", "job_id") if n in names]
    if not ids:
        raise ValueError(f"API statement {spec.block} names no queue, namespace or id to confine it by")
    return "\n".join(f"PERFORM {SCHEMA}.admit_api_{n.removesuffix('_id')}(p_{n});" for n in ids)


def _no_guard(names: list[str], spec: WorkerStatement) -> str:
    return ""  # the locate functions: EXECUTE is granted to the API's login role alone


def definition(spec: WorkerStatement, *, prefix: str = PREFIX) -> str:
    """`CREATE OR REPLACE FUNCTION` for one statement (see the module docstring)."""
    statement = QUERIES[spec.block].strip().rstrip(";")
    names = parameters(statement)
    guard = {PREFIX: _worker_guard, API_PREFIX: _api_guard, LOCATE_PREFIX: _no_guard}[prefix](names, spec)
    unknown = [n for n in names if n not in PARAMETER_TYPES]
    if unknown:
        raise ValueError(f"statement {spec.block}: no type for parameters {unknown}")
    body = PLACEHOLDER.sub(lambda m: f"p_{m.group(1)}", statement)
    arguments = ", ".join(f"p_{n} {spec.type_of(n)}" for n in names)
    if spec.returns is None:  # a SELECT whose rows are not wanted (a lock) is PL/pgSQL's PERFORM
        returns, run = "void", re.sub(r"^SELECT\b", "PERFORM", body) + ";"
    else:
        returns, run = f"TABLE ({spec.returns})", f"RETURN QUERY {body};"
    name = function_name(spec.block, prefix)
    return (
        f"CREATE OR REPLACE FUNCTION {name}({arguments}) RETURNS {returns}\n"
        "LANGUAGE plpgsql VOLATILE SECURITY DEFINER\n"
        f"SET search_path = pg_catalog, pg_temp SET jit = off{_planning(spec.block) if prefix == PREFIX else ''}\n"
        "AS $worker$\n#variable_conflict use_column\nBEGIN\n"
        f"{guard}\n{run}\nEND\n$worker$;\n"
        f"REVOKE ALL ON FUNCTION {name}({_types(names, spec)}) FROM PUBLIC;\n"
    )


def _planning(block: str) -> str:
    """The function's planner settings: the lease's plan is made once per session (module doc); the
    reads by key never scan the whole table."""
    return "".join(f" SET {name} = {value}" for name, value in PLANNING.get(block, ()))


def call(block: str, *, prefix: str = PREFIX) -> str:
    """The statement a worker (or the API) sends for `block`: its function, the same parameters by
    name, sent in binary."""
    spec = _spec(block, prefix)
    names = parameters(QUERIES[spec.block])
    arguments = ", ".join(f"p_{n} => %({n})b::{spec.type_of(n)}" for n in names)
    if spec.returns is None:
        return f"SELECT {function_name(block, prefix)}({arguments})"
    return f"SELECT * FROM {function_name(block, prefix)}({arguments})"


def signatures(prefix: str = PREFIX) -> list[str]:
    """Each function's signature (the workers', the API's or the locating ones), as GRANT and REVOKE name it."""
    return [
        f"{function_name(s.block, prefix)}({_types(parameters(QUERIES[s.block]), s)})" for s in STATEMENTS[prefix]
    ]


def install_sql() -> str:
    """What the store runs after each migration: the caller checks, every worker and API function,
    and the grants of each namespace's roles (again: a function new in this version needs its grant)."""
    made = "\n".join(definition(spec, prefix=prefix) for prefix, specs in STATEMENTS.items() for spec in specs)
    regrant = REGRANT.replace("SIGNATURES", ", ".join(signatures())).replace(
        "API_FUNCTIONS", ", ".join(signatures(API_PREFIX))
    )
    return ADMIT_CALLER + ADMIT_API + made + regrant


def grant_sql(role: str) -> str:
    """What one namespace's role is granted: the schema (to name the functions) and the functions."""
    quoted = quote_identifier(role)
    return (
        f"GRANT USAGE ON SCHEMA {SCHEMA} TO {quoted};\n"
        f"GRANT EXECUTE ON FUNCTION {', '.join(signatures())} TO {quoted};\n"
    )


def api_grant_sql(role: str) -> str:
    """What one namespace's API role is granted: the schema and the API's functions, nothing else."""
    quoted = quote_identifier(role)
    return (
        f"GRANT USAGE ON SCHEMA {SCHEMA} TO {quoted};\n"
        f"GRANT EXECUTE ON FUNCTION {', '.join(signatures(API_PREFIX))} TO {quoted};\n"
    )


def login_grant_sql(role: str) -> str:
    """What the API's login role is granted of its own: the schema and the locating functions."""
    quoted = quote_identifier(role)
    return (
        f"GRANT USAGE ON SCHEMA {SCHEMA} TO {quoted};\n"
        f"GRANT EXECUTE ON FUNCTION {', '.join(signatures(LOCATE_PREFIX))} TO {quoted};\n"
    )


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _types(names: list[str], spec: WorkerStatement) -> str:
    return ", ".join(spec.type_of(n) for n in names)


def _spec(block: str, prefix: str = PREFIX) -> WorkerStatement:
    for spec in STATEMENTS[prefix]:
        if spec.block == block:
            return spec
    raise KeyError(f"{block} is not a statement of {prefix}")


API_ROLE_SUFFIX = "_api"  # a namespace's API role is its workers' role's name and this (vigil.queue.roles)

REGRANT = f"""
DO $grant$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT t.role FROM {SCHEMA}.tenant_roles AS t LOOP
        EXECUTE format('GRANT USAGE ON SCHEMA {SCHEMA} TO %I', r);
        EXECUTE format('GRANT EXECUTE ON FUNCTION SIGNATURES TO %I', r);
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r || '{API_ROLE_SUFFIX}') THEN
            EXECUTE format('GRANT USAGE ON SCHEMA {SCHEMA} TO %I', r || '{API_ROLE_SUFFIX}');
            EXECUTE format('GRANT EXECUTE ON FUNCTION API_FUNCTIONS TO %I', r || '{API_ROLE_SUFFIX}');
        END IF;
    END LOOP;
END
$grant$;
"""

ADMIT_CALLER = f"""
CREATE OR REPLACE FUNCTION {SCHEMA}.admit_caller(queue text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $admit$
DECLARE
    own text;
BEGIN
    SELECT t.namespace INTO own FROM {SCHEMA}.tenant_roles AS t WHERE t.role = session_user;
    IF FOUND THEN
        IF {SCHEMA}.namespace_of(queue) IS DISTINCT FROM own THEN
            RAISE EXCEPTION 'role % may use the queues of namespace % only, not %', session_user, own, queue
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSIF NOT pg_has_role(session_user,
                          (SELECT n.nspowner FROM pg_namespace AS n WHERE n.nspname = '{SCHEMA}'), 'MEMBER') THEN
        RAISE EXCEPTION 'role % is no namespace''s queue role and not the queue schema''s owner', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$admit$;
REVOKE ALL ON FUNCTION {SCHEMA}.admit_caller(text) FROM PUBLIC;
"""


# The HTTP API's namespace: the one whose API role the session has SET ROLE to. Inside a SECURITY
# DEFINER function current_user is the owner, but the `role` setting is still the caller's SET ROLE,
# and PostgreSQL lets a session SET ROLE (or set_config('role'), or `options=-c role=`) only to a
# role its session user is a member of: the API's login role is a member of each namespace's API
# role, nothing else is. So the namespace comes from a grant the owner made, never from an argument.
ADMIT_API = f"""
CREATE OR REPLACE FUNCTION {SCHEMA}.api_namespace() RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $admit$
DECLARE
    acting text := current_setting('role');
    own text;
BEGIN
    SELECT t.namespace INTO own FROM {SCHEMA}.tenant_roles AS t
    WHERE right(acting, {len(API_ROLE_SUFFIX)}) = '{API_ROLE_SUFFIX}' AND t.role = left(acting, -{len(API_ROLE_SUFFIX)});
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the queue API acts only as a namespace''s API role (SET ROLE), not as % (session %)',
            acting, session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN own;
END
$admit$;
CREATE OR REPLACE FUNCTION {SCHEMA}.admit_api_queue(queue text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $admit$
BEGIN
    IF {SCHEMA}.namespace_of(queue) IS DISTINCT FROM {SCHEMA}.api_namespace() THEN
        RAISE EXCEPTION 'queue % is not of the namespace the API acts for', queue
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$admit$;
CREATE OR REPLACE FUNCTION {SCHEMA}.admit_api_queues(queues text[]) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $admit$
DECLARE
    own text := {SCHEMA}.api_namespace();
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(queues) AS q(queue) WHERE {SCHEMA}.namespace_of(q.queue) IS DISTINCT FROM own) THEN
        RAISE EXCEPTION 'a queue of % is not of the namespace the API acts for', queues
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$admit$;
CREATE OR REPLACE FUNCTION {SCHEMA}.admit_api_namespace(namespace text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $admit$
BEGIN
    IF namespace IS DISTINCT FROM {SCHEMA}.api_namespace() THEN
        RAISE EXCEPTION 'namespace % is not the one the API acts for', namespace
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$admit$;
CREATE OR REPLACE FUNCTION {SCHEMA}.admit_api_execution(execution_id text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $admit$
BEGIN
    IF execution_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM {SCHEMA}.executions AS e WHERE e.execution_id = admit_api_execution.execution_id
          AND {SCHEMA}.namespace_of(e.queue) = {SCHEMA}.api_namespace()
    ) THEN
        RAISE EXCEPTION 'execution % is not in the namespace the API acts for', execution_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$admit$;
CREATE OR REPLACE FUNCTION {SCHEMA}.admit_api_job(job_id text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $admit$
BEGIN
    IF job_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM {SCHEMA}.jobs AS j WHERE j.job_id = admit_api_job.job_id
          AND {SCHEMA}.namespace_of(j.queue) = {SCHEMA}.api_namespace()
    ) THEN
        RAISE EXCEPTION 'job % is not in the namespace the API acts for', job_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$admit$;
REVOKE ALL ON FUNCTION {SCHEMA}.api_namespace(), {SCHEMA}.admit_api_queue(text), {SCHEMA}.admit_api_queues(text[]),
    {SCHEMA}.admit_api_namespace(text), {SCHEMA}.admit_api_execution(text), {SCHEMA}.admit_api_job(text) FROM PUBLIC;
"""

STATEMENTS: dict[str, tuple[WorkerStatement, ...]] = {
    PREFIX: WORKER_STATEMENTS,
    API_PREFIX: API_STATEMENTS,
    LOCATE_PREFIX: LOCATE_STATEMENTS,
}

#: What WorkerStore sends for each worker statement: the call of its function.
CALLS: dict[str, str] = {spec.block: call(spec.block) for spec in WORKER_STATEMENTS}
#: What the API's store sends for each of its statements (vigil.queue.apistore).
API_CALLS: dict[str, str] = {spec.block: call(spec.block, prefix=API_PREFIX) for spec in API_STATEMENTS}
LOCATE_CALLS: dict[str, str] = {spec.block: call(spec.block, prefix=LOCATE_PREFIX) for spec in LOCATE_STATEMENTS}
