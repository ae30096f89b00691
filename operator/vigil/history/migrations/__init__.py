"""Alembic migrations of the history database, run in code by `SqlHistory.migrate()` (no alembic.ini)."""

from pathlib import Path

SCRIPT_LOCATION = Path(__file__).parent
VERSION_TABLE = "vigil_history_version"  # not `alembic_version`: the database may be shared
