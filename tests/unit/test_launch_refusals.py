"""Which answers of the API server end an occurrence's launch for good (it settles Failed) and which
the trigger retries: a quota's or an admission policy's 403 is for good; an authorisation denial
is not (a just-restarted API server answers one until its RBAC cache has synced), nor a 5xx."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from vigil.kube.controllers.launcher import permanent_refusal


def answer(status: int, message: str) -> ApiException:
    error = ApiException(status=status, reason="Forbidden" if status == 403 else "Error")
    error.body = json.dumps({"kind": "Status", "message": message})
    return error


@pytest.mark.parametrize(
    ("status", "message", "permanent"),
    [
        pytest.param(403, 'executions.vigil.dev "ex-1" is forbidden: exceeded quota: no-executions, requested: '
                     "count/executions.vigil.dev=1, used: count/executions.vigil.dev=0, limited: "
                     "count/executions.vigil.dev=0", True, id="quota"),
        pytest.param(403, "executions.vigil.dev \"ex-1\" is forbidden: ValidatingAdmissionPolicy 'p' with binding "
                     "'b' denied request: no", True, id="admission-policy"),
        pytest.param(422, 'Execution.vigil.dev "ex-1" is invalid: spec.job: Required value', True, id="invalid"),
        pytest.param(403, 'executions.vigil.dev is forbidden: User "system:serviceaccount:vigil:vigil" cannot '
                     'create resource "executions" in API group "vigil.dev" in the namespace "team-a"', False,
                     id="authorisation-denied-retried"),
        pytest.param(503, "the server is currently unable to handle the request", False, id="unavailable"),
    ],
)  # fmt: skip
def test_only_a_refusal_that_a_retry_cannot_change_is_permanent(status: int, message: str, permanent: bool) -> None:
    refused = permanent_refusal(answer(status, message))
    assert (refused is not None) == permanent, refused
    if refused is not None:
        assert refused.startswith(str(status)) and message[:40] in refused
