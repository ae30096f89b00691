"""POST /v1/jobs: a one-off job (its execution runs at runAt), or a recurring one (cron).

401 before anything; then the queue named (422), then may they ``create`` there (403), then the
rest of the body by its model (422; vigil.api.bodymodels, what the OpenAPI document shows), the
tenant (the caller's own, vigil.core.tenancy), what the model cannot say (422) and the priority
(403 above normal outside the chart's high-priority namespaces), then the store.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from vigil.api.bodymodels import RecurringSubmission
from vigil.api.problems import Answer, json_answer, problem
from vigil.api.queuebase import (
    FORBIDDEN,
    PRIORITIES,
    Invalid,
    JobStore,
    QueueContext,
    Refused,
    executions_access,
    forbidden,
    invalid,
    taskqueue_access,
)
from vigil.api.queuefields import (
    object_of,
    one_off_job,
    queue_of,
    recurring_invalid,
    recurring_job,
    submission,
)
from vigil.api.queueshapes import (
    time_of,
)
from vigil.core.access import User
from vigil.core.tenancy import TenantRefused, resolve_tenant

log = logging.getLogger(__name__)


def submit(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    """401 before anything; then the queue named (422), then may they (403), then the rest."""
    try:
        data = object_of(raw)
        namespace, name = queue_of(data)
    except Invalid as error:
        return invalid(error)
    access = executions_access("create", namespace, name)
    if not ctx.allowed(user, access):
        return forbidden(user, access)
    try:
        body = submission(data)
    except Invalid as error:
        return invalid(error)
    tenant = _tenant(ctx, user, body.tenant, namespace=namespace, name=name)
    now = ctx.clock.now()
    if isinstance(body, RecurringSubmission):
        return _submit_recurring(ctx, store, user, body, data, namespace=namespace, name=name, tenant=tenant, now=now)
    try:
        job = one_off_job(body, namespace=namespace, name=name, tenant=tenant, now=now)
    except Invalid as error:
        return invalid(error)
    _check_priority(ctx, job.priority, namespace)
    submitted = store.submit_job(job, now=now)
    if submitted.created:
        log.info("queue API: %s submitted job %s to %s", user.name, submitted.job_id, job.queue)
    return json_answer(201 if submitted.created else 200, {
        "jobId": submitted.job_id,
        "executionId": submitted.execution_id,
        "scheduledFor": time_of(submitted.scheduled_for),
    })  # fmt: skip



def _submit_recurring(
    ctx: QueueContext, store: JobStore, user: User, body: RecurringSubmission, data: Mapping[str, Any], *,
    namespace: str, name: str, tenant: str, now: datetime,
) -> Answer:  # fmt: skip
    try:
        job = recurring_job(body, data, namespace=namespace, name=name, tenant=tenant)
        _check_priority(ctx, job.priority, namespace)
        added = store.add_recurring(job, now=now)
    except Invalid as error:
        return invalid(error)
    except ValueError as error:  # the catalogue's own last check: a cron with no occurrence ahead
        return invalid(recurring_invalid(error, data))
    if added.created:
        log.info("queue API: %s catalogued recurring job %s on %s", user.name, added.job_id, job.queue)
    return json_answer(201 if added.created else 200, {"jobId": added.job_id, "nextRun": time_of(added.next_run)})

def _tenant(ctx: QueueContext, user: User, named: str | None, *, namespace: str, name: str) -> str:
    """The submission's tenant: the caller's own (vigil.core.tenancy). Naming another is
    Refused (403) unless they may edit the TaskQueue, and with it every tenant's cap."""
    bindings = ctx.tenants.bindings(namespace, name)
    try:
        return resolve_tenant(named, user, queue_namespace=namespace, bindings=bindings)
    except TenantRefused as refused:
        if ctx.allowed(user, taskqueue_access("update", namespace, name)):
            return refused.named
        raise Refused(problem(
            403, f"{user.name} may not submit to {namespace}/{name} as {refused}: a tenant is who the caller "
            "is (its namespace, or a tenant the TaskQueue binds to it in spec.tenants.bindings)",
            FORBIDDEN, field="tenant",
        )) from None  # fmt: skip

def _check_priority(ctx: QueueContext, priority: int, namespace: str) -> None:
    """Refused (403) for a priority above normal outside the chart's high-priority namespaces."""
    allowed = ctx.high_priority
    if allowed is None or priority >= PRIORITIES["normal"] or namespace in allowed:
        return
    raise Refused(problem(
        403, f"priority {priority} is above normal, which is reserved for the namespaces the Vigil chart "
        f"lists (admission.highPriority.namespaces); {namespace} is not one: use normal or low",
        FORBIDDEN, field="priority",
    ))  # fmt: skip

