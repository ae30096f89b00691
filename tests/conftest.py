"""Test-suite wide configuration: markers by layer, the shared wait helper, and the skip gate.

Tests under tests/integration and e2e/ talk to the real local control plane
(started once per session by the `cluster` fixture in tests/integration); the
rest are pure and run without it.

A skipped test checks nothing, and a run where most tests skipped still ends
green. With VIGIL_FAIL_ON_SKIP=1 (set by `make test` and .ci/run) the session
fails if any test skipped without `@pytest.mark.may_skip("why skipping is
acceptable here")`, and lists those tests. Expected failures (xfail) are not
skips and are left alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MAY_SKIP = "may_skip"  # the marker naming why a test may skip on this machine
FAIL_ON_SKIP_ENV = "VIGIL_FAIL_ON_SKIP"


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(FAIL_ON_SKIP_ENV) == "1":
        # A plugin object, not hooks of this conftest: those would see only tests under tests/,
        # and the skips of e2e/ count too.
        config.pluginmanager.register(SkipGate(), "vigil-skip-gate")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts or "e2e" in parts:
            item.add_marker(pytest.mark.integration)


def may_skip_reason(item: pytest.Item) -> str:
    """The reason a test's `may_skip` marker gives; empty when it has none (or names none)."""
    marker = item.get_closest_marker(MAY_SKIP)
    if marker is None or not marker.args:
        return ""
    return str(marker.args[0]).strip()


class SkipGate:
    """Fails the session when a test skipped without naming why it may (see the module docstring)."""

    def __init__(self) -> None:
        self.explained: set[str] = set()  # node ids whose may_skip marker names a reason
        self.unexplained: dict[str, str] = {}  # node id -> the skip's own reason

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.explained = {item.nodeid for item in items if may_skip_reason(item)}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:  # a whole module skipped while importing: no marker can speak for it
            self.unexplained[report.nodeid] = skip_reason(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail") and report.nodeid not in self.explained:
            self.unexplained.setdefault(report.nodeid, skip_reason(report))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.unexplained:
            return
        terminalreporter.section(f"skipped without @pytest.mark.{MAY_SKIP} ({FAIL_ON_SKIP_ENV}=1)", red=True)
        for nodeid, reason in sorted(self.unexplained.items()):
            terminalreporter.line(f"{nodeid}: {reason}")
        terminalreporter.line(
            f"{len(self.unexplained)} skipped without naming why they may: the session fails. Make them run "
            f'here, or mark them @pytest.mark.{MAY_SKIP}("why skipping is acceptable on this machine").'
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.unexplained and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    """The message a skip was given, from its longrepr (path, line, message)."""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr)
