"""Fixtures for the contract suites: every implementation of a port, behind one fixture.

In-memory twins need nothing; the Kubernetes adapters need the real local
control plane, so its `cluster` and per-test `namespace` fixtures are re-exported
from tests/integration and the cases that use them carry the `integration` marker.
"""

from __future__ import annotations

from tests.integration.conftest import cluster, namespace

__all__ = ["cluster", "namespace"]
