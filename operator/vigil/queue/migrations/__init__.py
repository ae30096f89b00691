"""Alembic migrations of the queue store, run in code by `QueueStore.migrate()` (no alembic.ini)."""

from pathlib import Path

SCRIPT_LOCATION = Path(__file__).parent
SCHEMA = "vigil_queue"  # every queue table lives here: the database may be the history's
VERSION_TABLE = "vigil_queue_version"  # its own chain, beside the history's vigil_history_version
