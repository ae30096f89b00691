"""Whose tenant a submission is (vigil.core.tenancy): derived from the caller, one named row per case.

A ServiceAccount's tenant is its namespace; a caller that is no ServiceAccount gets the queue's
namespace; a TaskQueue's bindings (by ServiceAccount or group) replace both, in their order; a
named tenant must be one of the caller's, whatever it is called.
"""

from __future__ import annotations

import pytest

from vigil.core.access import User
from vigil.core.tenancy import (
    TenantBinding,
    TenantRefused,
    resolve_tenant,
    service_account_of,
    tenants_of,
)

WORKER = User("system:serviceaccount:team-a:worker", groups=("system:serviceaccounts", "system:serviceaccounts:team-a"))
ADMIN = User("kubernetes-admin", groups=("system:masters", "ops"))
BATCH = TenantBinding("batch", service_accounts=("team-a/worker",))
OPS = TenantBinding("ops-tenant", groups=("ops",))
OTHER = TenantBinding("other", service_accounts=("team-b/worker",), groups=("team-b",))


@pytest.mark.parametrize(
    ("user", "bindings", "expected"),
    [
        pytest.param(WORKER, (), ("team-a",), id="a ServiceAccount has its namespace"),
        pytest.param(ADMIN, (), ("shop",), id="a user who is no ServiceAccount has the queue's namespace"),
        pytest.param(WORKER, (BATCH, OTHER), ("batch",), id="a bound ServiceAccount has its binding only"),
        pytest.param(ADMIN, (OTHER, OPS), ("ops-tenant",), id="a group binds its members"),
        pytest.param(
            User("system:serviceaccount:team-a:worker", groups=("ops",)), (OPS, BATCH), ("ops-tenant", "batch"),
            id="several bindings in the TaskQueue's order",
        ),
        pytest.param(WORKER, (OTHER,), ("team-a",), id="another's binding changes nothing"),
    ],
)
def test_the_callers_tenants(user: User, bindings: tuple[TenantBinding, ...], expected: tuple[str, ...]) -> None:
    assert tenants_of(user, queue_namespace="shop", bindings=bindings) == expected


def test_naming_none_is_the_first_and_naming_ones_own_is_accepted() -> None:
    both = User("system:serviceaccount:team-a:worker", groups=("ops",))
    assert resolve_tenant(None, both, queue_namespace="shop", bindings=(OPS, BATCH)) == "ops-tenant"
    assert resolve_tenant("batch", both, queue_namespace="shop", bindings=(OPS, BATCH)) == "batch"
    assert resolve_tenant("team-a", WORKER, queue_namespace="shop", bindings=()) == "team-a"


@pytest.mark.parametrize(
    ("named", "bindings"),
    [
        pytest.param("team-b", (), id="another namespace"),
        pytest.param("invented-1", (), id="an invented name"),
        pytest.param("team-a", (BATCH,), id="its namespace once a binding holds it"),
        pytest.param("other", (BATCH, OTHER), id="another's binding"),
    ],
)
def test_naming_a_tenant_that_is_not_the_callers_is_refused(named: str, bindings: tuple[TenantBinding, ...]) -> None:
    with pytest.raises(TenantRefused) as refused:
        resolve_tenant(named, WORKER, queue_namespace="shop", bindings=bindings)
    assert refused.value.named == named and named in str(refused.value)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("system:serviceaccount:ns:sa", ("ns", "sa")),
        ("system:serviceaccount:ns", None),
        ("system:serviceaccount::sa", None),
        ("alice", None),
        ("system:serviceaccounts:ns", None),
    ],
)
def test_service_account_names(name: str, expected: tuple[str, str] | None) -> None:
    assert service_account_of(User(name)) == expected
