"""The queue store's named SQL, read once: every module of the store asks here.

The statements live in `sql/`, one file per table or concern (`executions.sql`, `attempts.sql`,
`jobs.sql`, `buckets.sql`, `queues.sql`, `quotas.sql`, `retention.sql`, `watchdog.sql`,
`migrations.sql`), each a set of `-- name: NAME` blocks; a name is unique across the files (the
loader raises on a duplicate). `sql/schema.sql` is not statements: it is the schema the
migrations produce, kept for reading and checked by tests/queue/test_schema.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from vigil.sqlfiles import load_query_dir

SQL_DIR = Path(__file__).parent / "sql"
SCHEMA_FILE = SQL_DIR / "schema.sql"
QUERIES = load_query_dir(SQL_DIR, exclude=frozenset({SCHEMA_FILE.name}))
PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def binary(statement: str) -> str:
    """`statement` with every parameter sent in binary (psycopg's `%(name)b`)."""
    return PLACEHOLDER.sub(r"%(\1)b", statement)


#: What the owner's stores send for each block: the block as written, and those that carry a batch's
#: long arrays with binary parameters: each element goes as it is, not escaped into an array's text
#: on the client and parsed back on the server (a submit of 500 spent most of its client time so).
OWNER_STATEMENTS: Mapping[str, str] = {**QUERIES, **{block: binary(QUERIES[block]) for block in ("submit", "quota_admit")}}


def checked_json(text: str) -> Jsonb:
    """A jsonb parameter from JSON text already checked (vigil.core.jsonvalues): sent as it is, so
    what is written is the text whose size was counted, and nothing is serialised twice."""
    return Jsonb(text, dumps=_as_is)


def _as_is(text: Any) -> str:
    return str(text)
