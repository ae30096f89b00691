"""The queue store's named SQL (`queries.sql`), read once: every module of the store asks here."""

from __future__ import annotations

from pathlib import Path

from vigil.sqlfiles import load_queries

QUERIES_FILE = Path(__file__).parent / "queries.sql"
QUERIES = load_queries(QUERIES_FILE)
