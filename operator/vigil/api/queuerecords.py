"""A job or execution by id: GET and DELETE /v1/jobs/{id}, GET /v1/executions/{id}, and
POST /v1/executions/{id}/cancel and /retry.

The id names no namespace, so the record is read to learn its TaskQueue, and the caller is
authorised on that queue before anything of it is answered or changed; an id that exists
nowhere the caller may act is 403, like one in another namespace (QueueContext.visible).
"""

from __future__ import annotations

import logging

from vigil.api.problems import Answer, json_answer, problem
from vigil.api.queuebase import (
    CONFLICT,
    DONE,
    EXECUTION_ACTION_PATH,
    EXECUTION_PATH,
    JOB_PATH,
    Invalid,
    JobStore,
    QueueContext,
    invalid,
    not_found,
    path_id,
)
from vigil.api.queueshapes import (
    execution_to_json,
    job_to_json,
)
from vigil.core.access import User

log = logging.getLogger(__name__)


def get_job(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    job_id = path_id(JOB_PATH, path)
    return json_answer(200, job_to_json(ctx.visible(user, "get", "job", job_id, store.job(job_id))))

def delete_job(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    job_id = path_id(JOB_PATH, path)
    job = ctx.visible(user, "delete", "job", job_id, store.job(job_id))
    deleted = store.delete_job(job_id, now=ctx.clock.now(), by=user.name)
    if deleted is None:
        return not_found("job", job_id)
    log.info("queue API: %s deleted job %s of %s", user.name, job_id, job.queue)
    return json_answer(200, job_to_json(deleted))

def get_execution(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    execution_id = path_id(EXECUTION_PATH, path)
    record = ctx.visible(user, "get", "execution", execution_id, store.timeline(execution_id))
    return json_answer(200, execution_to_json(record))

def act(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    match = EXECUTION_ACTION_PATH.match(path)
    assert match is not None  # _route() sent only these paths here
    execution_id, action = match.group(1), match.group(2)
    if raw.strip() not in (b"", b"{}"):
        return invalid(Invalid("body", f"{action} takes no body (or an empty JSON object)"))
    record = ctx.visible(user, "update", "execution", execution_id, store.timeline(execution_id))
    now = ctx.clock.now()
    if action == "cancel":
        change = store.cancel(execution_id, now=now, by=user.name)
    else:
        change = store.retry(execution_id, now=now)
    if change is None:
        return not_found("execution", execution_id)
    if change.refusal is not None:
        return problem(409, f"execution {execution_id} cannot be {DONE[action]}: {change.refusal}", CONFLICT)
    log.info("queue API: %s %s execution %s of %s", user.name, DONE[action], execution_id, record.queue)
    return json_answer(200, execution_to_json(change.record))

