"""Answers held to the published contract (vigil.api.openapi): the check, and the hook that runs
it on every answer an ApiServer gives in the unit and queue suites.

`conforms` fails unless an answer to a documented operation has a status the document lists,
its content type and a body its schema accepts. `check_every_answer` wraps ApiServer's three
entry points so each test of the HTTP API checks its answers as a side effect: the document is
then held to every answer those tests produce, not only to the ones fuzzing reaches. Paths the
document does not have (the 404 of an unknown route, a 405) are left alone.
"""

from __future__ import annotations

import functools
import json
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from vigil.api.openapi import document
from vigil.api.router import ApiServer

Answer = tuple[int, str, bytes]


@functools.cache
def _spec() -> dict[str, Any]:
    return document()


@functools.cache
def _matchers() -> list[tuple[str, re.Pattern[str], str]]:
    """(method, path regex, template) of every operation, its path parameters by their patterns."""
    found = []
    for template, operations in _spec()["paths"].items():
        for method, operation in operations.items():
            patterns = {
                p["name"]: p["schema"].get("pattern", "^[^/]+$").strip("^$")
                for p in operation.get("parameters", []) if p["in"] == "path"
            }  # fmt: skip
            regex = re.sub(r"\{(\w+)\}", lambda m, named=patterns: f"(?:{named[m.group(1)]})", template)
            found.append((method.upper(), re.compile(f"^{regex}/?$"), template))
    return found


def documented(method: str, path: str) -> str | None:
    """The template of the documented operation serving `method` on `path`, or None."""
    plain = urllib.parse.unquote(path)
    return next((t for m, regex, t in _matchers() if m == method and regex.match(plain)), None)


@functools.cache
def _validator(template: str, method: str, status: str, content_type: str) -> Any:
    import jsonschema_rs  # schemathesis's validator (the dev extra); here, so a venv without it fails only HTTP tests

    spec = _spec()
    schema = spec["paths"][template][method]["responses"][status]["content"][content_type]["schema"]
    return jsonschema_rs.Draft202012Validator(schema | {"components": spec["components"]})


def conforms(method: str, path: str, answer: Answer) -> None:
    """Fails unless `answer` to `method` on `path` is one the document describes."""
    template = documented(method, path.partition("?")[0])
    assert template is not None, f"{method} {path} is not documented"
    responses = _spec()["paths"][template][method.lower()]["responses"]
    status, content_type, body = answer
    assert str(status) in responses, f"{method} {template}: {status} is not documented"
    content = responses[str(status)]["content"]
    assert content_type in content, f"{method} {template} {status}: {content_type} not {sorted(content)}"
    instance = json.loads(body) if content_type.endswith("json") else body.decode()
    errors = [e.message for e in _validator(template, method.lower(), str(status), content_type).iter_errors(instance)]
    assert errors == [], f"{method} {template} {status}: {errors}"


def _checked(method: str, call: Callable[..., Answer], path_of: Callable[..., str]) -> Callable[..., Answer]:
    def wrapper(*args: Any, **kwargs: Any) -> Answer:
        answer = call(*args, **kwargs)
        path = path_of(*args, **kwargs).partition("?")[0]
        if documented(method, path) is not None:
            conforms(method, path, answer)
        return answer

    return wrapper


def check_every_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every answer ApiServer gives from now on (in this test) checked with `conforms`."""
    monkeypatch.setattr(ApiServer, "answer", _checked("GET", ApiServer.answer, lambda self, target, **_: target))
    monkeypatch.setattr(ApiServer, "answer_post", _checked("POST", ApiServer.answer_post, lambda self, path, *_, **__: path))
    monkeypatch.setattr(ApiServer, "answer_delete", _checked("DELETE", ApiServer.answer_delete, lambda self, path, *_, **__: path))
