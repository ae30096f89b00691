"""Fixtures and hooks of the stress suite: off unless VIGIL_STRESS=1, figures reported at the end.

The stress tests take about 75 minutes at their default sizes (tests/stress/sizes.py), so the
normal suite never runs them: unless VIGIL_STRESS=1 they are deselected at collection (not
skipped: a skip in `make test` is a failure). `make stress` sets it and selects `-m stress`.

They need the real local control plane, so the `cluster` and per-test `namespace` fixtures are
re-exported from tests/integration and the tests get the `integration` marker too. The `fleet`
of operator processes is this suite's own: it keeps its logs in `.cluster/stress-logs/<test>/`
and on failure prints those of the last few processes only, where a hundred killed ones would
bury the one that matters.

Each test fills a `figures` block as it runs; every block is printed in the terminal summary
and written to `.cluster/stress-report.txt` (after each test, so an interrupted run keeps the
figures so far).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.conftest import (
    REPO,
    KubeCluster,
    cluster,
    namespace,
    pytest_runtest_makereport,
)
from tests.integration.operators import OperatorFleet
from tests.stress.figures import Figures
from tests.stress.sizes import SIZES

__all__ = ["cluster", "figures", "fleet", "namespace", "pytest_runtest_makereport", "watches"]

HERE = Path(__file__).resolve().parent
REPORT = REPO / ".cluster" / "stress-report.txt"
LOGS = REPO / ".cluster" / "stress-logs"
LOGS_SHOWN = 3  # the last processes' logs printed when a test fails
FIGURES = pytest.StashKey[list[Figures]]()
STARTED = pytest.StashKey[datetime]()


def ours(item: pytest.Item) -> bool:
    return HERE in Path(str(item.path)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the stress tests as integration tests; deselect them unless VIGIL_STRESS=1.

    This hook sees every item of the session: only those under tests/stress are touched.
    """
    stress = [item for item in items if ours(item)]
    for item in stress:
        item.add_marker(pytest.mark.integration)
    if stress and os.environ.get("VIGIL_STRESS") != "1":
        config.hook.pytest_deselected(items=stress)
        deselected = set(stress)
        items[:] = [item for item in items if item not in deselected]


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FIGURES] = []
    config.stash[STARTED] = datetime.now(UTC)


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    """This test's block of figures, reported whatever its outcome."""
    block = Figures(title=request.node.nodeid)
    request.config.stash[FIGURES].append(block)
    started = time.monotonic()
    yield block
    block.seconds = time.monotonic() - started
    report = getattr(request.node, "rep_call", None)
    block.outcome = "passed" if report is not None and report.passed else "FAILED"
    write_report(request.config)


@pytest.fixture
def watches() -> Iterator[contextlib.ExitStack]:
    """Where a test enters its `Sightings` watches, so they stop when it ends, however it ends."""
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.fixture
def fleet(cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[OperatorFleet]:
    """Operator processes of one test, in an operator namespace of their own.

    Their logs and history database are kept in `.cluster/stress-logs/<test>/` until the test
    runs again (pytest's tmp_path is rotated away while a long run is still being read).
    """
    workdir = LOGS / request.node.name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    operators = OperatorFleet(cluster, workdir)
    yield operators
    operators.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        shown = operators.processes[-LOGS_SHOWN:]
        print(f"{len(operators.processes)} operator processes; logs in {workdir}; the last {len(shown)}:")
        for op in shown:
            print(f"--- {op.name}\n{op.log.read_text(errors='replace')[-6000:]}")
    cluster.clear_namespace(operators.namespace)


def header(config: pytest.Config) -> str:
    started = config.stash[STARTED].strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"Vigil stress figures of the run started {started}; {SIZES}"


def write_report(config: pytest.Config) -> None:
    blocks = config.stash.get(FIGURES, [])
    if blocks:
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text("\n\n".join([header(config), *(block.render() for block in blocks)]) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    blocks = config.stash.get(FIGURES, [])
    if not blocks:
        return
    terminalreporter.section("stress figures")
    terminalreporter.write_line(header(config))
    for block in blocks:
        terminalreporter.write_line("")
        terminalreporter.write_line(block.render())
    terminalreporter.write_line("")
    terminalreporter.write_line(f"(also written to {REPORT.relative_to(REPO)})")
