"""Fixtures of the fault scenarios: each scenario's verdict kept and printed as one table at the end.

A scenario asks for `verdicts` and appends the checker's verdict (tests/faults/checker.py) of its
history; the terminal summary prints every verdict of the session as the checker's table, with
the sizes the run used (tests/faults/sizes.py), and `make faults` writes it to
`.cluster/faults-report.txt` too. The PostgreSQL fixtures are the queue tests' (a server of the
scenario's own where it is stopped); the cluster fixtures are the integration tests'.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.faults.checker import Verdict, table
from tests.faults.sizes import SIZES
from tests.integration.conftest import REPO, cluster, namespace, pytest_runtest_makereport
from tests.queue.conftest import own_postgres, postgres

__all__ = ["cluster", "namespace", "own_postgres", "postgres", "pytest_runtest_makereport", "verdicts"]

VERDICTS = pytest.StashKey[list[Verdict]]()
REPORT_ENV = "VIGIL_FAULTS_REPORT"  # where `make faults` has the table written


def pytest_configure(config: pytest.Config) -> None:
    config.stash[VERDICTS] = []


@pytest.fixture
def verdicts(request: pytest.FixtureRequest) -> Iterator[list[Verdict]]:
    """Where a scenario puts its verdicts; they are printed in the session's table."""
    kept: list[Verdict] = []
    yield kept
    request.config.stash[VERDICTS].extend(kept)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    kept = config.stash.get(VERDICTS, [])
    if not kept:
        return
    printed = f"{SIZES}\n{table(kept)}"
    terminalreporter.section("fault scenarios: the checker's table")
    terminalreporter.write_line(printed)
    if report := os.environ.get(REPORT_ENV):
        path = REPO / report
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(printed + "\n")
        terminalreporter.write_line(f"(also written to {report})")
