"""Alembic migrations of the history database, run in code by `SqlHistory.migrate()` (no alembic.ini)."""
