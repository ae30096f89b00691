"""The request bodies are validated by the models the OpenAPI document is generated from (issue 37, item 6).

vigil.api.bodymodels holds each body's pydantic model; the routes validate with it
(vigil.api.queuefields, .approvals, .queuerecords) and vigil.api.openapi renders it. Two checks
hold them together: the document's request schemas are those classes' own, and every bound the
document states for a submission's field (a length, a pattern, a range) is what the route
refuses, naming that field — read from the document, so a bound changed in one place only
fails here. The hostile-input bounds (NUL, lone surrogates, NaN, nesting, size) stay
vigil.core.jsonvalues' and are held by tests/unit/test_api_problems.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.test_api_problems import api
from vigil.api import bodymodels, openapi

REQUEST_MODELS = ["OneOffSubmission", "RecurringSubmission", "ApprovalBody", "ActionBody"]
VALID = {"namespace": "shop", "queue": "orders", "task": "t"}


@pytest.mark.parametrize("name", REQUEST_MODELS)
def test_the_documents_request_bodies_are_the_models_that_validate_them(name: str) -> None:
    assert getattr(openapi, name) is getattr(bodymodels, name)
    schema = openapi.document()["components"]["schemas"][name]
    made = getattr(bodymodels, name).model_json_schema(ref_template="#/components/schemas/{model}")
    assert schema["properties"] == made["properties"]
    assert schema.get("required") == made.get("required")


def past_each_bound(kind: str) -> list[Any]:
    """(field, a value breaking one bound the document states for it) for a submission's fields."""
    props = openapi.document()["components"]["schemas"][kind]["properties"]
    cases: list[Any] = []
    for field, prop in props.items():
        for option in prop.get("anyOf", [prop]):
            if option.get("type") == "string" and "maxLength" in option:
                cases.append(pytest.param(kind, field, "x" * (option["maxLength"] + 1), id=f"{kind}.{field} too long"))
            if option.get("type") == "string" and option.get("minLength", 0) > 0:
                cases.append(pytest.param(kind, field, "", id=f"{kind}.{field} too short"))
            if option.get("type") == "string" and "pattern" in option:
                cases.append(pytest.param(kind, field, "Not A Name!", id=f"{kind}.{field} off its pattern"))
            if option.get("type") == "integer" and "maximum" in option and "enum" not in option:
                cases.append(pytest.param(kind, field, option["maximum"] + 1, id=f"{kind}.{field} too large"))
            if option.get("type") == "integer" and "minimum" in option:
                cases.append(pytest.param(kind, field, option["minimum"] - 1, id=f"{kind}.{field} too small"))
            if option.get("type") == "object":
                cases.append(pytest.param(kind, field, [1], id=f"{kind}.{field} not an object"))
    return cases


@pytest.mark.parametrize(
    ("kind", "field", "value"), past_each_bound("OneOffSubmission") + past_each_bound("RecurringSubmission")
)
def test_every_bound_the_document_states_is_what_the_route_refuses(kind: str, field: str, value: Any) -> None:
    built, _, store = api()
    body = {**VALID, **({"cron": "0 3 * * *"} if kind == "RecurringSubmission" else {}), field: value}
    status, _, raw = built.dispatch("POST", "/v1/jobs", "", "t-alice", json.dumps(body).encode())
    problem = json.loads(raw)
    assert (status, problem["errors"][0]["field"]) == (422, field), problem
    assert store.calls == []


def test_a_valid_body_passes_its_model() -> None:
    made = bodymodels.validated(bodymodels.OneOffSubmission, {**VALID, "priority": "high", "maxAttempts": 3})
    assert (made.priority, made.maxAttempts, made.payload) == ("high", 3, {})
    with pytest.raises(bodymodels.BodyInvalid) as refused:
        bodymodels.validated(bodymodels.OneOffSubmission, {**VALID, "maxAttempts": True})
    assert (refused.value.field, "True" in str(refused.value)) == ("maxAttempts", False)
