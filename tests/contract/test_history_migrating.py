"""The operator's history database migrates in a child process, and the operator never holds alembic.

`MigratingHistory` is how the operator opens the history database: on first use it runs the
migrations in `python -m vigil.history.migrating` (the DSN on standard input), then uses the
database. Covers, on real SQLite and real PostgreSQL: a fresh database is usable after the first
use, and the process that used it imported neither alembic nor what alembic brings (mako,
pygments: about 11 MiB held for the operator's life); an unreachable database is
HistoryUnavailable (tried again on the next use), not a crash.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.contract.historydb import fresh_dsn
from vigil.core.ports import HistoryUnavailable
from vigil.history.migrating import MigratingHistory, migrate_apart

#: Run in a fresh interpreter, as the operator opens its history: it writes nothing, reads the
#: job's history (so the migrated tables must exist), and reports which modules it holds.
OPENS = """
import sys
from vigil.history.migrating import MigratingHistory
history = MigratingHistory(sys.stdin.read().strip(), retention_days=30)
history.write([])
assert history.history.job_executions("ns", "job", limit=5).executions == []
print(",".join(sorted(m for m in ("alembic", "mako", "pygments") if m in sys.modules)) or "none")
"""


def test_a_fresh_database_is_migrated_apart_and_the_process_holds_no_alembic(
    backend: str, request: pytest.FixtureRequest
) -> None:
    dsn = fresh_dsn(backend, request)
    opened = subprocess.run([sys.executable, "-c", OPENS], input=dsn, text=True, capture_output=True, check=False)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == "none"


def test_migrating_twice_is_a_no_op(backend: str, request: pytest.FixtureRequest) -> None:
    dsn = fresh_dsn(backend, request)
    migrate_apart(dsn)
    migrate_apart(dsn)
    history = MigratingHistory(dsn, retention_days=30).history
    try:
        assert history.job_executions("ns", "job", limit=5).executions == []
    finally:
        history.close()


def test_an_unreachable_database_is_unavailable_not_a_crash() -> None:
    with pytest.raises(HistoryUnavailable, match="unreachable"):
        MigratingHistory("postgresql+psycopg://vigil@127.0.0.1:1/history", retention_days=30).write([])
