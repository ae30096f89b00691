"""What a console viewer may see: the SubjectAccessReviews each page asks, made in one place.

A page lists a namespace only if the viewer may ``list scheduledjobs`` (or ``list workflows``)
there; it shows a job if they may ``get`` it, its executions from the history database if they
may ``list executions`` there, and a stored log if they may ``get pods/log`` (as
`kubectl logs`); a workflow if they may ``get`` it. The answers are cached briefly by the
Guard's authorizer, like the API's.
"""

from __future__ import annotations

from collections.abc import Sequence

from vigil.api.guards import Guard, list_executions_access, workflow_access
from vigil.api.histories import pod_log_access
from vigil.core.access import Access, User
from vigil.model.names import GROUP, SCHEDULED_JOBS, WORKFLOWS


def list_jobs_access(namespace: str) -> Access:
    return Access(verb="list", group=GROUP, resource=SCHEDULED_JOBS, namespace=namespace)


def list_workflows_access(namespace: str) -> Access:
    return Access(verb="list", group=GROUP, resource=WORKFLOWS, namespace=namespace)


def job_access(namespace: str, name: str) -> Access:
    return Access(verb="get", group=GROUP, resource=SCHEDULED_JOBS, namespace=namespace, name=name)


class Viewer:
    """One authenticated viewer and the guard that answers for them."""

    def __init__(self, guard: Guard, user: User, token: str) -> None:
        self.guard = guard
        self.user = user
        self.token = token

    def may(self, access: Access) -> bool:
        return self.guard.authorizer.allowed(self.user, access)

    def namespaces(self, candidates: Sequence[str], *, workflows: bool = False) -> list[str]:
        """Those of `candidates` the viewer may list jobs (or workflows) in."""
        ask = list_workflows_access if workflows else list_jobs_access
        return [ns for ns in candidates if self.may(ask(ns))]

    def may_get_job(self, namespace: str, name: str) -> bool:
        return self.may(job_access(namespace, name))

    def may_list_executions(self, namespace: str) -> bool:
        return self.may(list_executions_access(namespace))

    def may_read_logs(self, namespace: str) -> bool:
        return self.may(pod_log_access(namespace))

    def may_get_workflow(self, namespace: str, name: str) -> bool:
        return self.may(workflow_access(namespace, name))
