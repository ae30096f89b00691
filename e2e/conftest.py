"""Fixtures for the scenario tests: the same real control planes (the node agent's and the kubelet's) and operator fleet as tests/integration."""

from __future__ import annotations

from tests.integration.conftest import (
    cluster,
    fleet,
    kubelet_cluster,
    namespace,
    pytest_runtest_makereport,
)

__all__ = ["cluster", "fleet", "kubelet_cluster", "namespace", "pytest_runtest_makereport"]
