"""Who may call the read API: a Guard authenticates each caller's token and authorises each request.

Every route but the probes and the approval callback (whose signed token is its own authority)
needs the caller's Kubernetes bearer token: the API server authenticates it (a TokenReview) and
authorises each request (a SubjectAccessReview, vigil.core.access). The accesses each route
asks for are made here, so the routes and their documentation name the same verbs.
"""

from __future__ import annotations

import dataclasses

from vigil.api.problems import Answer, problem
from vigil.core.access import Access, Authenticator, Authorizer, User
from vigil.model.names import EXECUTIONS, GROUP, WORKFLOWS


@dataclasses.dataclass(frozen=True)
class Guard:
    """Who may call what: each caller's token is authenticated and each request authorised.

    ``leader_lease`` is the access /leader needs: ``get`` on the leader Lease.
    """

    authenticator: Authenticator
    authorizer: Authorizer
    leader_lease: Access


def execution_access(namespace: str, execution_id: str = "") -> Access:
    """``get executions.vigil.dev`` (that one, or any with an empty id) in `namespace` ("" = all)."""
    return Access(verb="get", group=GROUP, resource=EXECUTIONS, namespace=namespace, name=execution_id)


def list_executions_access(namespace: str) -> Access:
    """``list executions.vigil.dev`` in `namespace`: what `kubectl get executions -n NS` needs."""
    return Access(verb="list", group=GROUP, resource=EXECUTIONS, namespace=namespace)


def workflow_access(namespace: str, workflow: str) -> Access:
    """``get workflows.vigil.dev`` named `workflow` in `namespace`: what `kubectl get vwf` needs."""
    return Access(verb="get", group=GROUP, resource=WORKFLOWS, namespace=namespace, name=workflow)


def forbidden(user: User, access: Access) -> Answer:
    where = f" in namespace {access.namespace}" if access.namespace else " in every namespace"
    what = f"{access.resource}.{access.group}" if access.group else access.resource
    name = f" {access.name}" if access.name else ""
    return problem(403, f"{user.name} may not {access.verb} {what}{name}{where}", "Forbidden")


def unauthenticated() -> Answer:
    """401: no token, or one the API server does not accept."""
    return problem(
        401, "a Kubernetes bearer token the API server accepts is required (Authorization: Bearer ...)", "Unauthorized"
    )
