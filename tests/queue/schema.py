"""The queue schema as PostgreSQL describes it: `pg_dump`, normalised, for schema.sql and its test.

Why a normalised `pg_dump` and not a query over information_schema: pg_dump already knows every
kind of object the migrations make (tables and their partitions, defaults, CHECK, UNIQUE and
foreign-key constraints, partial and expression indexes, partition and index attachments) and
spells each one in a canonical form and a stable order, which a hand-written catalogue query
would have to rebuild kind by kind and would miss the kinds nobody thought of. What it adds that
is not schema is removed here: its comments and `SET` lines, the `\\restrict` key that recent
versions draw at random, owners and privileges (`--no-owner --no-privileges`: the roles are
made by vigil/queue/roles.py, per cluster, not by the schema).

Functions are kept apart: their bodies are the named blocks of vigil/queue/sql/*.sql, installed by
vigil/queue/functions.py at every migration, so schema.sql lists their signatures only (one
comment line each) instead of repeating the SQL.

`python -m tests.queue.schema` (`make queue-schema`) migrates an empty database on a throwaway
server and writes vigil/queue/sql/schema.sql from it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass

from tests.contract.postgres import PostgresServer
from vigil.queue.queries import SCHEMA_FILE
from vigil.queue.store import QueueStore

SCHEMA = "vigil_queue"
HEADER = re.compile(r"^-- Name: (?P<name>.*); Type: (?P<type>[A-Z ]+); Schema: (?P<schema>[^;]*); Owner: .*$")
FUNCTION_LINE = "-- function: "


@dataclass(frozen=True)
class Entry:
    """One object of the dump: its kind (pg_dump's TOC type), its name and its DDL."""

    kind: str
    name: str
    ddl: str


def dump(server: PostgresServer, database: str) -> str:
    """`pg_dump --schema-only` of the queue schema in `database`, by the server's own pg_dump."""
    return subprocess.run(
        [str(server.bin_dir / "pg_dump"), "--schema-only", f"--schema={SCHEMA}", "--no-owner",
         "--no-privileges", "--dbname", server.conninfo(database)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def entries(dumped: str) -> list[Entry]:
    """The dump's objects in its order, each DDL without comments, `SET` lines or blank lines."""
    found: list[Entry] = []
    kind = name = ""
    lines: list[str] = []

    def close() -> None:
        if kind:
            found.append(Entry(kind=kind, name=name, ddl="\n".join(lines).strip()))

    for line in dumped.splitlines():
        header = HEADER.match(line)
        if header:
            close()
            kind, name, lines = header["type"], header["name"], []
        elif line.startswith(("--", "SET ", "SELECT pg_catalog.set_config", "\\")) or not line.strip():
            continue
        elif kind:
            lines.append(line)
    close()
    return found


def tables_and_indexes(found: list[Entry]) -> list[Entry]:
    """Everything but the functions: what schema.sql spells out and the test compares."""
    return [entry for entry in found if entry.kind != "FUNCTION"]


def functions(found: list[Entry]) -> list[str]:
    """The functions' signatures, sorted."""
    return sorted(entry.name for entry in found if entry.kind == "FUNCTION")


def listed_functions(schema_sql: str) -> list[str]:
    """The signatures schema.sql lists (its `-- function: ` lines), sorted."""
    return sorted(line.removeprefix(FUNCTION_LINE) for line in schema_sql.splitlines() if line.startswith(FUNCTION_LINE))


def render(found: list[Entry]) -> str:
    """schema.sql: a header, each object's DDL in the dump's order, then the functions' signatures."""
    out = [
        "-- The vigil_queue schema as the migrations (vigil/queue/migrations/) leave it: generated, do not edit.",
        "-- Regenerate with `make queue-schema` after adding a migration; tests/queue/test_schema.py fails until",
        "-- this file matches (it applies this file to an empty database and compares both dumps).",
        "-- Owners and privileges are not here: the roles are vigil/queue/roles.py's.",
        "",
    ]
    for entry in tables_and_indexes(found):
        out += [f"-- {entry.kind.lower()}: {entry.name}", entry.ddl, ""]
    out += [
        "-- The functions the migrations install: each one's body is a named block of vigil/queue/sql/*.sql",
        "-- (vigil/queue/functions.py), so only their signatures are listed here.",
    ]
    out += [f"{FUNCTION_LINE}{signature}" for signature in functions(found)]
    return "\n".join(out) + "\n"


def migrated(server: PostgresServer) -> str:
    """A new database on `server` with the queue schema migrated: its name."""
    database = server.create_database().rsplit("/", 1)[1]
    QueueStore(server.conninfo(database)).migrate()
    return database


def main() -> int:
    """Write schema.sql from an empty database migrated on a throwaway server."""
    server = PostgresServer.create()
    try:
        SCHEMA_FILE.write_text(render(entries(dump(server, migrated(server)))), encoding="utf-8")
    finally:
        server.drop()
    print(f"wrote {SCHEMA_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
