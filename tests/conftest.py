"""Test-suite wide configuration: markers by layer, and the shared wait helper.

Tests under tests/integration and e2e/ talk to the real local control plane
(started once per session by the `cluster` fixture in tests/integration); the
rest are pure and run without it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts or "e2e" in parts:
            item.add_marker(pytest.mark.integration)
