"""The operator's queue store migrates in a child process, and the operator never holds alembic.

The operator's `QueueStore(dsn, migrate_first=True)` (the HTTP API's, the task submitter's), its
TaskQueue pass and its trigger shards bring the schema up to date through `python -m vigil.queue.migrating` (the
DSN on standard input). Covers, on real PostgreSQL: a fresh database is usable after the first
call, and the process that made it imported neither alembic nor what alembic brings (mako,
pygments); migrating twice is a no-op; an unreachable store is QueueUnavailable (the API answers
503, the shards wait and try again), not a crash.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest

from tests.contract.postgres import PostgresServer
from tests.queue.conftest import conninfo
from vigil.core.queue import QueueUnavailable
from vigil.queue.migrating import migrate_apart
from vigil.queue.store import QueueStore, Submission

pytestmark = pytest.mark.postgres

#: Run in a fresh interpreter, as the operator's API opens the store: it submits (so the migrated
#: tables must exist), and reports which modules it holds.
OPENS = """
import sys
from datetime import UTC, datetime
from vigil.core.recurring import RecurringJob
from vigil.queue.store import QueueStore
store = QueueStore(sys.stdin.read().strip(), migrate_first=True)
added = store.add_recurring(RecurringJob("shop/orders", "report", "0 * * * *"), now=datetime.now(UTC))
assert store.job(added.job_id) is not None
print(",".join(sorted(m for m in ("alembic", "mako", "pygments") if m in sys.modules)) or "none")
"""


#: The leader's TaskQueue pass on a fresh store, as the operator runs it (no TaskQueue declared:
#: the pass still migrates, publishes nothing and reads the counts).
PASSES = """
import sys
from datetime import UTC, datetime
from vigil.kube.wiring import SystemClock
from vigil.kube.controllers.taskqueues import TaskQueueController
from vigil.queue.store import QueueStore

class NoCache:
    def add_handler(self, handler):
        pass

controller = TaskQueueController(cache=NoCache(), store=QueueStore(sys.stdin.read().strip()), writer=None,
                                 events=None, clock=SystemClock(), interval_seconds=1)
assert controller._sync_store({}, now=datetime.now(UTC)) == {}
print(",".join(sorted(m for m in ("alembic", "mako", "pygments") if m in sys.modules)) or "none")
"""


@pytest.fixture
def fresh(postgres: PostgresServer) -> str:
    """A database of its own with no queue schema yet."""
    return conninfo(postgres, postgres.create_database())


def test_a_fresh_store_is_migrated_apart_and_the_process_holds_no_alembic(fresh: str) -> None:
    opened = subprocess.run([sys.executable, "-c", OPENS], input=fresh, text=True, capture_output=True, check=False)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == "none"


def test_the_leaders_task_queue_pass_migrates_a_fresh_store_apart(fresh: str) -> None:
    passed = subprocess.run([sys.executable, "-c", PASSES], input=fresh, text=True, capture_output=True, check=False)
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout.strip() == "none"


def test_migrating_twice_is_a_no_op(fresh: str) -> None:
    migrate_apart(fresh)
    migrate_apart(fresh)
    assert len(QueueStore(fresh).submit("q", [Submission("record")], now=datetime.now(UTC))) == 1


def test_an_unreachable_store_is_unavailable_not_a_crash() -> None:
    with pytest.raises(QueueUnavailable):
        migrate_apart("host=127.0.0.1 port=1 dbname=vigil user=vigil connect_timeout=2")
    store = QueueStore("host=127.0.0.1 port=1 dbname=vigil user=vigil connect_timeout=2", migrate_first=True)
    with pytest.raises(QueueUnavailable):
        store.job("any")
