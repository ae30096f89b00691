"""What the queue store takes: the HTTP API's rules on a submission, for every caller of the store.

`QueueStore.submit` is a public door of its own (programs, the `task:` ScheduledJob
path, the benchmark), so it must refuse what `POST /v1/jobs` refuses — a queue
key off the grammar, a task, tenant or key that is not plain text, a payload
that is no JSON object, holds a value PostgreSQL refuses or is over the size
limit (vigil.core.jsonvalues) — and must refuse before the batch's one
statement, where one bad row would fail every other. The message names the
submission and the field (`submissions[2].payload.a[3]`).

An execution id a submission brings is its occurrence's (a ScheduledJob's: job uid
and nominal time). Finding it already enqueued in the same queue is a repeat;
in another queue of the same namespace under the same idempotency key it is the
same occurrence launched again after the job's `task.queue` changed (the first
launch's execution stands); anywhere else it belongs to someone else, and the
store raises `ExecutionIdTaken` rather than answer as if it had enqueued it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from vigil.core import jsonvalues
from vigil.core.queue import Submission, split_queue_key

#: A namespace: a DNS label, as the HTTP API's.
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: A TaskQueue's name: a DNS subdomain, as every object's name.
QUEUE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
TEXT_MAX_LENGTH = 253  # task, tenant and idempotency key: as long as an object name


class SubmissionRefused(ValueError):
    """A submission the store does not take; the message names the submission and its field."""


class ExecutionIdTaken(SubmissionRefused):
    """A submission's execution id exists already in another queue, not as this occurrence's."""


def queue_refusal(queue: str) -> str | None:
    """Why `queue` is no store key ("NS/NAME", or a bare NAME for a queue no TaskQueue declares)."""
    namespace, name = split_queue_key(queue)
    if "/" in queue and not NAMESPACE.fullmatch(namespace):
        return f"{queue!r}: the namespace must be a DNS label"
    if not QUEUE_NAME.fullmatch(name):
        return f"{queue!r}: the queue's name must be a DNS subdomain"
    return None


def text_refusal(value: str) -> str | None:
    """Why `value` is not plain text the API would take as a task, tenant or key (as vigil.api.queue's)."""
    if not value or len(value) > TEXT_MAX_LENGTH:
        return f"must be 1 to {TEXT_MAX_LENGTH} characters long"
    if not value.isprintable() or value != value.strip():
        return "must be printable, without leading or trailing spaces"
    return None


def payload_text(submission: Submission, *, field: str) -> str:
    """`submission`'s payload as the compact JSON text the store writes, the text whose size was
    checked; SubmissionRefused ("FIELD.part: why") for what the store must not take."""
    texts = {"task": submission.task, "tenant": submission.tenant or None, "idempotency_key": submission.idempotency_key}
    for name, value in texts.items():
        why = None if value is None else text_refusal(value)
        if why is not None:
            raise SubmissionRefused(f"{field}.{name}: {why}")
    if not isinstance(submission.payload, dict):
        raise SubmissionRefused(str(jsonvalues.UnsafeValue(f"{field}.payload", "must be a JSON object")))
    try:
        return jsonvalues.checked_text(submission.payload, path=f"{field}.payload")
    except jsonvalues.UnsafeValue as found:
        raise SubmissionRefused(str(found)) from None


def checked_submissions(queue: str, submissions: Sequence[Submission]) -> list[str]:
    """Each submission's payload as JSON text (`payload_text`), checked once and written as
    checked; SubmissionRefused for the first thing the store must not take."""
    why = queue_refusal(queue)
    if why is not None:
        raise SubmissionRefused(f"queue: {why}")
    return [payload_text(submission, field=f"submissions[{index}]") for index, submission in enumerate(submissions)]


def is_same_occurrence(queue: str, submission: Submission, *, found_queue: str, found_key: str | None) -> bool:
    """Whether an execution found under `submission`'s id (in `found_queue`, keyed `found_key`)
    is this submission's own occurrence: a repeat in the same queue, or a launch in another queue
    of the same namespace under the same key (the job's task.queue changed between launches)."""
    if found_queue == queue:
        return True
    same_namespace = split_queue_key(found_queue)[0] == split_queue_key(queue)[0]
    return same_namespace and submission.idempotency_key is not None and found_key == submission.idempotency_key
