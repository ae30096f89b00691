"""Schema migrations in a child process: the history's and the queue store's, as the operator runs them.

Alembic brings mako and pygments, megabytes an operator would otherwise hold for its whole life
to use once. The child is `python -m MODULE`, with the DSN on its standard input (never on a
command line, where `ps` shows it); it exits EXIT_UNAVAILABLE when the database cannot be
reached, anything else non-zero when a migration fails.
"""

from __future__ import annotations

import logging
import subprocess
import sys

log = logging.getLogger(__name__)

EXIT_UNAVAILABLE = 3  # the child's exit code when the database cannot be reached
STDERR_SHOWN = 2000  # characters of the child's output kept in an error


def migrate_apart(module: str, dsn: str, *, what: str, unavailable: type[Exception], timeout: float) -> None:
    """Run `python -m module` on `dsn`; its log lines go to this process's log as `what` migrations.

    Raises `unavailable` when the database cannot be reached or the child outlives `timeout`
    (tried again later), RuntimeError when a migration itself fails.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-m", module], input=dsn, text=True, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise unavailable(f"{what} migrations did not finish within {timeout:.0f}s") from err
    output = done.stderr.strip()
    for line in output.splitlines():
        log.info("%s migrations: %s", what, line)
    if done.returncode == EXIT_UNAVAILABLE:
        raise unavailable(output[-STDERR_SHOWN:] or f"{what} database unreachable")
    if done.returncode != 0:
        raise RuntimeError(f"{what} migrations failed (exit {done.returncode}): {output[-STDERR_SHOWN:]}")
