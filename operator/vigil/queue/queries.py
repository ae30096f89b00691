"""The queue store's named SQL, read once: every module of the store asks here.

The statements live in `sql/`, one file per table or concern (`executions.sql`, `attempts.sql`,
`jobs.sql`, `buckets.sql`, `queues.sql`, `quotas.sql`, `retention.sql`, `watchdog.sql`,
`migrations.sql`), each a set of `-- name: NAME` blocks; a name is unique across the files (the
loader raises on a duplicate). `sql/schema.sql` is not statements: it is the schema the
migrations produce, kept for reading and checked by tests/queue/test_schema.py.
"""

from __future__ import annotations

from pathlib import Path

from vigil.sqlfiles import load_query_dir

SQL_DIR = Path(__file__).parent / "sql"
SCHEMA_FILE = SQL_DIR / "schema.sql"
QUERIES = load_query_dir(SQL_DIR, exclude=frozenset({SCHEMA_FILE.name}))
