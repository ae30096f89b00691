"""The long variant of tests/unit/test_probes.py: 500 idle sockets and 50 slow writers hold the API.

The probes on their own listener still answer 200 every time, and the API an ordinary request.
"""

from __future__ import annotations

import pytest

from tests.unit.test_probes import api_port, held_probes_and_api

pytestmark = pytest.mark.stress
__all__ = ["api_port"]  # the fixture, used by name


def test_probes_and_the_api_answer_while_500_idle_sockets_and_50_slow_writers_hold_it(api_port: int) -> None:
    held_probes_and_api(api_port, idle=500, slow=50)
