"""Fixtures for the scenario tests: the same real control plane and operator fleet as tests/integration."""

from __future__ import annotations

from tests.integration.conftest import cluster, fleet, namespace, pytest_runtest_makereport

__all__ = ["cluster", "fleet", "namespace", "pytest_runtest_makereport"]
