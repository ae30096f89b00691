"""The clients read the API's errors (issue 37, item 5): vigil.client's ApiError and the CLI's one line.

Both read RFC 9457 problem details (`detail`, `reason`, else the tail of `type`, and the field of
`errors`), and an older operator's `{"error", "reason", "field"}` as well, so a new client still
explains an old operator's refusal.
"""

from __future__ import annotations

import json

import pytest

from vigil.api.problems import problem
from vigil.cli.errors import problem_of
from vigil.client import _api_error

PROBLEM = problem(422, "payload.a: holds NUL", "Invalid", field="payload.a")[2]
WITHOUT_REASON = json.dumps({"type": "urn:vigil:problem:Forbidden", "title": "Forbidden", "status": 403,
                             "detail": "bob may not get executions"}).encode()  # fmt: skip
OLD = json.dumps({"error": "payload.a: holds NUL", "reason": "Invalid", "field": "payload.a"}).encode()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(PROBLEM, (422, "Invalid", "payload.a: holds NUL", "payload.a"), id="problem details"),
        pytest.param(WITHOUT_REASON, (403, "Forbidden", "bob may not get executions", None), id="reason from type"),
        pytest.param(OLD, (422, "Invalid", "payload.a: holds NUL", "payload.a"), id="an older operator"),
        pytest.param(b"busy\n", (503, "", "busy", None), id="not JSON"),
    ],
)
def test_the_python_client_reads_every_shape(raw: bytes, expected: tuple[object, ...]) -> None:
    error = _api_error(int(str(expected[0])), raw, request_id="r-1")
    assert (error.status, error.reason, error.message, error.field, error.request_id) == (*expected, "r-1")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(PROBLEM, ("Invalid", "payload.a: holds NUL"), id="problem details"),
        pytest.param(WITHOUT_REASON, ("Forbidden", "bob may not get executions"), id="reason from type"),
        pytest.param(OLD, ("Invalid", "payload.a: holds NUL"), id="an older operator"),
        pytest.param(b"not found\n", ("", "not found\n"), id="plain text"),
    ],
)
def test_the_cli_reads_every_shape(raw: bytes, expected: tuple[str, str]) -> None:
    assert problem_of(raw) == expected
