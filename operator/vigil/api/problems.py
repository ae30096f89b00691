"""One shape for every error the HTTP API answers: RFC 9457 problem details.

Every 4xx and 5xx, from a route, the application around the routes or the transport under it,
is ``application/problem+json``::

    {"type": "urn:vigil:problem:Invalid", "title": "Unprocessable Content", "status": 422,
     "detail": "payload.a: holds NUL (\\u0000) ...", "reason": "Invalid",
     "errors": [{"field": "payload.a", "reason": "holds NUL (\\u0000) ..."}]}

* ``type`` is stable and made from ``reason`` (the CamelCase word programs switch on, kept as
  an extension member because the API's clients and tests have always read it);
* ``title`` is the status's phrase, the same for every occurrence;
* ``detail`` says what happened in words; it names fields and limits, never the values a caller
  sent (a payload can hold anything, and details reach logs and terminals);
* ``errors`` appears when one field is at fault: its path (``payload.a[3]``, ``limit``) and why.

Other extension members (``namespace``, ``quota``, ``limit``, ``used`` of a 429) carry values
the server computed, never the caller's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

#: (status, content type, body): what every route answers.
Answer = tuple[int, str, bytes]

CONTENT_TYPE = "application/problem+json"
#: Where a problem's type URI starts; the reason completes it.
TYPE_PREFIX = "urn:vigil:problem:"
#: The reason of a 404 for a path no route serves (``NotFound`` is a route's: no such object).
NO_ROUTE = "NoRoute"


def problem_type(reason: str) -> str:
    """The stable ``type`` of a problem with `reason`."""
    return TYPE_PREFIX + reason


def problem(status: int, detail: str, reason: str, *, field: str | None = None, **extra: Any) -> Answer:
    """A problem answer: `status`, what happened (`detail`), its `reason`, the `field` at fault
    (when there is one) and `extra` members the server computed."""
    body: dict[str, Any] = {
        "type": problem_type(reason),
        "title": _title(status),
        "status": status,
        "detail": detail,
        "reason": reason,
    }
    if field is not None:
        prefix = f"{field}: "
        why = detail[len(prefix):] if detail.startswith(prefix) else detail
        body["errors"] = [{"field": field, "reason": why}]
    body.update(extra)
    return status, CONTENT_TYPE, json.dumps(body, indent=2, default=str).encode()


def json_answer(status: int, body: Mapping[str, Any]) -> Answer:
    """A success's JSON answer."""
    return status, "application/json", json.dumps(body, indent=2, default=str).encode()


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
