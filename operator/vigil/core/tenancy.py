"""Whose cap a submission spends: a tenant is who the caller *is*, never what a body says.

A TaskQueue caps leased executions per tenant (`spec.tenants`). When the tenant was free text in
a submission, a program could spend another tenant's cap by naming it, or escape its own cap by
inventing names. So the tenant is derived from the caller's identity, as the TokenReview
described it:

* a TaskQueue may declare tenants and bind each to ServiceAccounts (``NS/NAME``) and groups
  (`spec.tenants.bindings`); a caller bound to one or more of them has those tenants, in the
  order the TaskQueue lists them, and no other (so a binding is a constraint, not a choice: a
  bound ServiceAccount cannot escape to its namespace's tenant);
* otherwise a ServiceAccount (``system:serviceaccount:NS:NAME``) has one tenant, its namespace
  NS; a caller who is not a ServiceAccount (a person, an administrator's client certificate
  identity, a user from an OIDC provider) has the queue's own namespace: they are acting for
  the queue's owners, not for a team of their own.

A submission that names no tenant gets the caller's first; naming one of the caller's own is
accepted, naming any other is refused (the HTTP API answers 403, unless the caller may edit the
TaskQueue itself — who may change every tenant's cap gains nothing by naming one).

Pure: the TaskQueue's bindings come in through the :class:`TenantDirectory` port (the kube
adapter reads the TaskQueue from the API server).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from vigil.core.access import User

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


@dataclasses.dataclass(frozen=True)
class TenantBinding:
    """A tenant a TaskQueue declares, and who has it: ServiceAccounts as "NS/NAME", and groups."""

    name: str
    service_accounts: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def binds(self, user: User) -> bool:
        account = service_account_of(user)
        if account is not None and f"{account[0]}/{account[1]}" in self.service_accounts:
            return True
        return any(group in self.groups for group in user.groups)


class TenantDirectory(Protocol):
    def bindings(self, namespace: str, name: str) -> Sequence[TenantBinding]:
        """The tenants TaskQueue `name` in `namespace` declares (none when it declares none or
        does not exist). Raises ReviewUnavailable when the API server cannot tell now."""
        ...


class NoBindings:
    """A TenantDirectory of TaskQueues that declare no tenants (every caller has its own)."""

    def bindings(self, namespace: str, name: str) -> Sequence[TenantBinding]:
        return ()


class TenantRefused(Exception):
    """A submission named a tenant the caller does not have."""

    def __init__(self, named: str, allowed: Sequence[str]) -> None:
        super().__init__(f"tenant {named!r} is not the caller's: theirs is {' or '.join(map(repr, allowed))}")
        self.named = named
        self.allowed = tuple(allowed)


def service_account_of(user: User) -> tuple[str, str] | None:
    """(namespace, name) of a ServiceAccount user; None for anyone else."""
    if not user.name.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    namespace, colon, name = user.name[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
    return (namespace, name) if colon and namespace and name else None


def tenants_of(user: User, *, queue_namespace: str, bindings: Sequence[TenantBinding]) -> tuple[str, ...]:
    """The caller's tenants on a queue in `queue_namespace`, the default first (never empty)."""
    bound = tuple(dict.fromkeys(b.name for b in bindings if b.binds(user)))
    if bound:
        return bound
    account = service_account_of(user)
    return (account[0] if account is not None else queue_namespace,)


def resolve_tenant(
    named: str | None, user: User, *, queue_namespace: str, bindings: Sequence[TenantBinding]
) -> str:
    """The tenant of `user`'s submission that names `named` (None: it names none); raises
    TenantRefused when `named` is not one of theirs."""
    allowed = tenants_of(user, queue_namespace=queue_namespace, bindings=bindings)
    if named is None:
        return allowed[0]
    if named in allowed:
        return named
    raise TenantRefused(named, allowed)
