"""Fixtures every unit test gets: each answer of the HTTP API held to its published contract."""

from __future__ import annotations

import pytest

from tests.conformance import check_every_answer


@pytest.fixture(autouse=True)
def answers_conform(monkeypatch: pytest.MonkeyPatch) -> None:
    check_every_answer(monkeypatch)
