"""The queue store's migrations in a child process, as the operator runs them.

`python -m vigil.queue.migrating` reads the DSN on its standard input (never a command line,
where `ps` shows it) and brings the `vigil_queue` schema up to date. Alembic brings mako and
pygments, megabytes the operator would otherwise hold for its whole life to use once; tests and
`vigil worker --migrate` call `QueueStore.migrate()` in their own process instead.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import psycopg
import sqlalchemy as sa

from vigil.core.queue import QueueUnavailable
from vigil.queue.store import QueueStore

log = logging.getLogger(__name__)

MIGRATE_TIMEOUT_SECONDS = 300.0  # includes waiting for another replica's migrations (a DDL lock)
EXIT_UNAVAILABLE = 3  # the child's exit code when the store cannot be reached
STDERR_SHOWN = 2000  # characters of the child's output kept in an error


def migrate_apart(dsn: str, *, timeout: float = MIGRATE_TIMEOUT_SECONDS) -> None:
    """Bring the queue store's schema up to date in a child process.

    Raises QueueUnavailable when the store cannot be reached, RuntimeError when a migration fails.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-m", "vigil.queue.migrating"],
            input=dsn, text=True, capture_output=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as err:
        raise QueueUnavailable(f"queue migrations did not finish within {timeout:.0f}s") from err
    output = done.stderr.strip()
    for line in output.splitlines():
        log.info("queue migrations: %s", line)
    if done.returncode == EXIT_UNAVAILABLE:
        raise QueueUnavailable(output[-STDERR_SHOWN:] or "queue store unreachable")
    if done.returncode != 0:
        raise RuntimeError(f"queue migrations failed (exit {done.returncode}): {output[-STDERR_SHOWN:]}")


def main() -> int:
    """The child: migrate the store whose DSN is on standard input."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("alembic.runtime.migration").setLevel(logging.INFO)  # "Running upgrade …" only
    try:
        QueueStore(sys.stdin.read().strip()).migrate()
    except (psycopg.OperationalError, sa.exc.OperationalError) as err:
        print(err, file=sys.stderr)
        return EXIT_UNAVAILABLE
    return 0


if __name__ == "__main__":
    sys.exit(main())
