"""A job or execution by id: read, deleted, cancelled or retried, by id alone or within its queue.

    GET, DELETE  /v1/jobs/{id}                     /v1/namespaces/{ns}/taskqueues/{q}/jobs/{id}
    GET          /v1/executions/{id}               /v1/namespaces/{ns}/taskqueues/{q}/executions/{id}
    POST         /v1/executions/{id}/cancel|retry  /v1/namespaces/{ns}/taskqueues/{q}/executions/{id}/cancel|retry

Within its queue (the right-hand paths), the caller is authorised on that queue before the store
is read at all: a caller without the verb there is 403 and the store is never asked. A record
that is not of that queue is 404, so nothing of another queue is learnt.

By id alone, the id names no queue, so the caller is authorised before the store is read on
what does not need the record: the verb on the executions of every TaskQueue in every
namespace, or, for a ServiceAccount, of every TaskQueue in its own namespace (what the chart's
aggregated -edit and -view roles grant where they are bound). The store is then read, and a
record of another namespace is refused. Anyone else (a RoleBinding naming one TaskQueue, a user
who is not a ServiceAccount) is 403 with the store never asked, and acts within the queue, as
`vigil.client` does when given `queue=` and `kubectl vigil queue retry` always does. An id that
exists nowhere the caller may act is 403, like one in another namespace
(QueueContext.by_id).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable

from vigil.api.bodies import read_json
from vigil.api.bodymodels import ActionBody, BodyInvalid, validated
from vigil.api.problems import Answer, json_answer, problem
from vigil.api.queuebase import (
    CONFLICT,
    DONE,
    EXECUTION_ACTION_PATH,
    EXECUTION_PATH,
    JOB_PATH,
    QUEUE_EXECUTION_ACTION_PATH,
    QUEUE_EXECUTION_PATH,
    QUEUE_JOB_PATH,
    Invalid,
    JobStore,
    QueueContext,
    Record,
    Refused,
    executions_access,
    forbidden,
    invalid,
    not_found,
)
from vigil.api.queueshapes import (
    execution_to_json,
    job_to_json,
)
from vigil.core.access import User
from vigil.core.jsonvalues import UnsafeValue
from vigil.core.queue import queue_key

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Target:
    """What a path names: an id, the action asked (cancel, retry or ""), and its queue when the
    path is within one (namespace and name), else None."""

    ident: str
    action: str
    queue: tuple[str, str] | None


def target(path: str, by_id: re.Pattern[str], in_queue: re.Pattern[str]) -> Target:
    """The Target of `path`, which one of the two patterns matches (the dispatch said so)."""
    scoped = in_queue.match(path)
    if scoped is not None:
        rest = scoped.groups()[4:]
        return Target(rest[0], rest[1] if len(rest) > 1 else "", (scoped.group(1), scoped.group(3)))
    match = by_id.match(path)
    assert match is not None  # the dispatch matched one of the two
    return Target(match.group(1), match.group(2) if by_id.groups > 1 else "", None)


def record(
    ctx: QueueContext, user: User, verb: str, kind: str, where: Target, read: Callable[[], Record | None]
) -> Record:
    """The record `where` names if `user` may `verb` its queue; else Refused. The caller is
    authorised before `read` is called: on the queue named, or by id alone as QueueContext.by_id
    says."""
    if where.queue is None:
        return ctx.by_id(user, verb, kind, where.ident, read)
    namespace, name = where.queue
    access = executions_access(verb, namespace, name)
    if not ctx.allowed(user, access):
        raise Refused(forbidden(user, access))
    found = read()
    if found is None or found.queue != queue_key(namespace, name):
        raise Refused(not_found(kind, where.ident))
    return found


def get_job(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    where = target(path, JOB_PATH, QUEUE_JOB_PATH)
    return json_answer(200, job_to_json(record(ctx, user, "get", "job", where, lambda: store.job(where.ident))))


def delete_job(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    where = target(path, JOB_PATH, QUEUE_JOB_PATH)
    job = record(ctx, user, "delete", "job", where, lambda: store.job(where.ident))
    deleted = store.delete_job(where.ident, now=ctx.clock.now(), by=user.name)
    if deleted is None:
        return not_found("job", where.ident)
    log.info("queue API: %s deleted job %s of %s", user.name, where.ident, job.queue)
    return json_answer(200, job_to_json(deleted))


def get_execution(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    where = target(path, EXECUTION_PATH, QUEUE_EXECUTION_PATH)
    found = record(ctx, user, "get", "execution", where, lambda: store.timeline(where.ident))
    return json_answer(200, execution_to_json(found))


def act(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    where = target(path, EXECUTION_ACTION_PATH, QUEUE_EXECUTION_ACTION_PATH)
    execution_id, action = where.ident, where.action
    if raw.strip():
        try:
            validated(ActionBody, read_json(raw, field="body"))  # the document's body: an empty object
        except (BodyInvalid, UnsafeValue):
            return invalid(Invalid("body", f"{action} takes no body (or an empty JSON object)"))
    found = record(ctx, user, "update", "execution", where, lambda: store.timeline(execution_id))
    now = ctx.clock.now()
    if action == "cancel":
        change = store.cancel(execution_id, now=now, by=user.name)
    else:
        change = store.retry(execution_id, now=now)
    if change is None:
        return not_found("execution", execution_id)
    if change.refusal is not None:
        return problem(409, f"execution {execution_id} cannot be {DONE[action]}: {change.refusal}", CONFLICT)
    log.info("queue API: %s %s execution %s of %s", user.name, DONE[action], execution_id, found.queue)
    return json_answer(200, execution_to_json(change.record))
