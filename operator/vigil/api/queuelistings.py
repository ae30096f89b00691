"""A queue's listings: GET /v1/namespaces/{ns}/taskqueues/{q}/jobs, /dead-letters and /stats.

``get`` on the queue's executions first (403), then the query string (422 naming the
parameter), then the store.
"""

from __future__ import annotations

from vigil.api.problems import Answer, json_answer
from vigil.api.queuebase import (
    PAGE_PARAMETERS,
    QUEUE_LISTING_PATH,
    Invalid,
    JobStore,
    QueueContext,
    executions_access,
    forbidden,
    invalid,
)
from vigil.api.queueshapes import (
    breakdown_to_json,
    dead_letter_to_json,
    page_request,
    paged,
    queue_job_to_json,
)
from vigil.core.access import User
from vigil.core.queue import (
    QUEUE_PAGE_MAX,
    queue_key,
)


def listing(ctx: QueueContext, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
    """A queue's jobs, dead letters or stats: `get` on its TaskQueue (403) first, then the
    query string (422 naming the parameter), then the store."""
    match = QUEUE_LISTING_PATH.match(path)
    assert match is not None  # _route() sent only these paths here
    namespace, name, kind = match.group(1), match.group(3), match.group(5)
    access = executions_access("get", namespace, name)
    if not ctx.allowed(user, access):
        return forbidden(user, access)
    key = queue_key(namespace, name)
    head = {"namespace": namespace, "queue": name}
    try:
        if kind == "stats":
            page_request(query, kind, allowed=frozenset())
            rows = store.queue_breakdown(key, now=ctx.clock.now(), limit=QUEUE_PAGE_MAX)
            return json_answer(200, head | {"breakdown": [breakdown_to_json(row) for row in rows]})
        limit, after = page_request(query, kind, allowed=PAGE_PARAMETERS)
    except Invalid as error:
        return invalid(error)
    if kind == "jobs":
        jobs = store.queue_jobs(key, limit=limit, after=after)
        return json_answer(200, paged(head | {"jobs": [queue_job_to_json(j) for j in jobs.jobs]}, kind, jobs.after))
    dead = store.dead_letters(key, limit=limit, after=after)
    now = ctx.clock.now()
    body = head | {"deadLetters": [dead_letter_to_json(d, now=now) for d in dead.dead]}
    return json_answer(200, paged(body, kind, dead.after))

