"""The workers' statements as functions: the only door a namespace's database role has.

A worker never reads or writes a table. Each statement a worker runs (its block in
`queries.sql`) is installed as a `SECURITY DEFINER` function of the schema's owner,
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
  its estimate grows with the table but, JIT being off, compiles nothing. The other statements
  are cheap to plan and keep PostgreSQL's choice: a plan made once, when a table was empty, would
  otherwise serve the whole session however the table grew (until an ANALYZE invalidates it).
* What acknowledges, extends or claims by a lease (heartbeat, settle, settle_succeeded, once)
  names the lease's token, drawn when the lease is taken: an acknowledgement of a lease taken
  since by another attempt (a stale token) changes nothing.

The functions are replaced whenever the store migrates (`install`), so they always run this
version's statements. EXECUTE is revoked from PUBLIC; a namespace's role is granted each one
(`GRANTS`) and USAGE on the schema, nothing else (vigil.queue.roles).
"""

from __future__ import annotations

import dataclasses
import re

from vigil.queue.queries import QUERIES

SCHEMA = "vigil_queue"
PREFIX = "worker_"
PLACEHOLDER = re.compile(r"%\((\w+)\)s")

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
}

#: The statements whose plan is made once per session (see the module doc).
PLANNED_ONCE = frozenset({"lease"})

ROW_OF_LEASE = (
    "execution_id text, task text, payload jsonb, attempt smallint, max_attempts smallint, "
    "scheduled_for timestamptz, idempotency_key text, priority smallint, tenant text, lease_token uuid"
)


@dataclasses.dataclass(frozen=True)
class WorkerStatement:
    """A block of queries.sql a worker runs, and what its function returns (None: nothing)."""

    block: str
    returns: str | None


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


def parameters(statement: str) -> list[str]:
    """The statement's parameter names, in the order they first appear."""
    return list(dict.fromkeys(PLACEHOLDER.findall(statement)))


def function_name(block: str) -> str:
    return f"{SCHEMA}.{PREFIX}{block}"


def definition(spec: WorkerStatement) -> str:
    """`CREATE OR REPLACE FUNCTION` for one worker statement (see the module docstring)."""
    statement = QUERIES[spec.block].strip().rstrip(";")
    names = parameters(statement)
    if "queue" not in names:
        raise ValueError(f"worker statement {spec.block} is not confined to a queue: it has no %(queue)s")
    unknown = [n for n in names if n not in PARAMETER_TYPES]
    if unknown:
        raise ValueError(f"worker statement {spec.block}: no type for parameters {unknown}")
    body = PLACEHOLDER.sub(lambda m: f"p_{m.group(1)}", statement)
    arguments = ", ".join(f"p_{n} {PARAMETER_TYPES[n]}" for n in names)
    if spec.returns is None:  # a SELECT whose rows are not wanted (a lock) is PL/pgSQL's PERFORM
        returns, run = "void", re.sub(r"^SELECT\b", "PERFORM", body) + ";"
    else:
        returns, run = f"TABLE ({spec.returns})", f"RETURN QUERY {body};"
    return (
        f"CREATE OR REPLACE FUNCTION {function_name(spec.block)}({arguments}) RETURNS {returns}\n"
        "LANGUAGE plpgsql VOLATILE SECURITY DEFINER\n"
        f"SET search_path = pg_catalog, pg_temp SET jit = off{_planning(spec.block)}\n"
        "AS $worker$\n#variable_conflict use_column\nBEGIN\n"
        f"PERFORM {SCHEMA}.admit_caller(p_queue);\n{run}\nEND\n$worker$;\n"
        f"REVOKE ALL ON FUNCTION {function_name(spec.block)}({_types(names)}) FROM PUBLIC;\n"
    )


def _planning(block: str) -> str:
    """The function's plan cache setting: the lease's plan is made once per session (module doc)."""
    return " SET plan_cache_mode = force_generic_plan" if block in PLANNED_ONCE else ""


def call(block: str) -> str:
    """The statement a worker sends for `block`: its function, the same parameters by name."""
    spec = _spec(block)
    names = parameters(QUERIES[spec.block])
    arguments = ", ".join(f"p_{n} => %({n})b::{PARAMETER_TYPES[n]}" for n in names)
    if spec.returns is None:
        return f"SELECT {function_name(block)}({arguments})"
    return f"SELECT * FROM {function_name(block)}({arguments})"


def signatures() -> list[str]:
    """Each worker function's signature, as GRANT and REVOKE name it."""
    return [
        f"{function_name(s.block)}({_types(parameters(QUERIES[s.block]))})" for s in WORKER_STATEMENTS
    ]


def install_sql() -> str:
    """What the store runs after each migration: the caller check, every worker function, and
    the grants of each namespace's role (again: a function new in this version needs its grant)."""
    return ADMIT_CALLER + "\n".join(definition(spec) for spec in WORKER_STATEMENTS) + REGRANT.replace(
        "SIGNATURES", ", ".join(signatures())
    )


def grant_sql(role: str) -> str:
    """What one namespace's role is granted: the schema (to name the functions) and the functions."""
    quoted = quote_identifier(role)
    return (
        f"GRANT USAGE ON SCHEMA {SCHEMA} TO {quoted};\n"
        f"GRANT EXECUTE ON FUNCTION {', '.join(signatures())} TO {quoted};\n"
    )


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _types(names: list[str]) -> str:
    return ", ".join(PARAMETER_TYPES[n] for n in names)


def _spec(block: str) -> WorkerStatement:
    for spec in WORKER_STATEMENTS:
        if spec.block == block:
            return spec
    raise KeyError(f"{block} is not a worker statement")


REGRANT = f"""
DO $grant$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT t.role FROM {SCHEMA}.tenant_roles AS t LOOP
        EXECUTE format('GRANT USAGE ON SCHEMA {SCHEMA} TO %I', r);
        EXECUTE format('GRANT EXECUTE ON FUNCTION SIGNATURES TO %I', r);
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


#: What WorkerStore sends for each worker statement: the call of its function.
CALLS: dict[str, str] = {spec.block: call(spec.block) for spec in WORKER_STATEMENTS}
