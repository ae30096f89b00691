"""Log lines: JSON mode emits one parseable object per line carrying the message."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from vigil import logs


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    yield None
    root.handlers[:] = saved
    root.setLevel(level)


def test_json_lines_are_parseable_and_carry_the_execution_id(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(level="INFO", format="json")
    logging.getLogger("vigil.kube.controllers.launcher").info("fired ns/job execution=%s", "ex-abc123")
    entry = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert entry["level"] == "INFO"
    assert entry["logger"] == "vigil.kube.controllers.launcher"
    assert "ex-abc123" in entry["message"]


def test_text_lines_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(level="INFO", format="text")
    logging.getLogger("vigil").warning("overdue ns/job")
    assert "WARNING vigil: overdue ns/job" in capsys.readouterr().err
