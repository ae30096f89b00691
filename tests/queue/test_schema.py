"""vigil/queue/sql/schema.sql is the schema the migrations produce, and the queue's SQL files load.

Covers, on real PostgreSQL (procrastinate's check): an empty database migrated to head and an
empty database given schema.sql have the same `pg_dump` of the vigil_queue schema, normalised
(tests/queue/schema.py says why a dump and what is removed); the functions the migrations
install are the ones schema.sql lists. A migration that changes the schema without
`make queue-schema` fails here. And the named blocks of sql/*.sql load with every name once: a
name given twice, in one file or in two, is refused when the SQL is read.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import psycopg
import pytest

from tests.contract.postgres import PostgresServer
from tests.queue.schema import (
    Entry,
    dump,
    entries,
    functions,
    listed_functions,
    migrated,
    tables_and_indexes,
)
from vigil.queue.queries import QUERIES, SCHEMA_FILE, SQL_DIR
from vigil.sqlfiles import DuplicateBlock, load_blocks, load_query_dir


def _text(found: list[Entry]) -> str:
    return "\n".join(str(entry) for entry in found)


@pytest.mark.postgres
def test_the_migrations_produce_schema_sql(postgres: PostgresServer) -> None:
    from_migrations = entries(dump(postgres, migrated(postgres)))

    written = SCHEMA_FILE.read_text(encoding="utf-8")
    from_schema = postgres.create_database().rsplit("/", 1)[1]
    with psycopg.connect(postgres.conninfo(from_schema), autocommit=True) as connection:
        connection.execute(written.encode())  # bytes: the file's statements as they are, no placeholders
    from_file = entries(dump(postgres, from_schema))

    expected, got = tables_and_indexes(from_migrations), tables_and_indexes(from_file)
    diff = "\n".join(difflib.unified_diff(
        _text(got).splitlines(), _text(expected).splitlines(), "schema.sql", "migrations", lineterm=""))  # fmt: skip
    assert got == expected, f"schema.sql is not what the migrations make: run `make queue-schema`\n{diff}"
    assert listed_functions(written) == functions(from_migrations), "schema.sql's functions: run `make queue-schema`"


def test_every_block_is_named_once_across_the_files() -> None:
    files = sorted(path for path in SQL_DIR.glob("*.sql") if path != SCHEMA_FILE)
    per_file = [load_blocks(path.read_text(encoding="utf-8")) for path in files]
    assert sum(len(blocks) for blocks in per_file) == len(QUERIES)
    assert "lease" in QUERIES and "trigger_apply" in QUERIES and "quota_admit" in QUERIES


def test_a_name_given_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DuplicateBlock, match="'a'"):
        load_blocks("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
    (tmp_path / "one.sql").write_text("-- name: a\nSELECT 1;\n")
    (tmp_path / "two.sql").write_text("-- name: b\nSELECT 2;\n-- name: a\nSELECT 3;\n")
    with pytest.raises(DuplicateBlock, match=r"one\.sql.*two\.sql"):
        load_query_dir(tmp_path)
