"""The HTTP API's published contract: an OpenAPI 3.1 document generated from pydantic models.

The request bodies' models are the ones that validate them (vigil.api.bodymodels: the approval
decision, a submission of either kind, a cancel's or retry's empty body), so the document cannot
say one thing and the routes check another. The answers are written by hand
(vigil.api.queueshapes, ...); the models here describe them, and the one problem+json error
shape (vigil.api.problems). The suite holds them to the
code both ways: the committed document equals this one (tests/unit/test_api_openapi.py), the
answers the routes give conform to it, and schemathesis fuzzes the real application from it
(tests/integration/test_api_fuzz.py).

    python -m vigil.api.openapi > docs/reference/openapi.json     # regenerate (make openapi)

Served at ``GET /openapi.json`` without a token: it describes routes, never data.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from vigil.api.bodymodels import (
    NAMESPACE_PATTERN,
    QUEUE_PATTERN,
    ActionBody,
    ApprovalBody,
    OneOffSubmission,
    RecurringSubmission,
)
from vigil.api.queuebase import ID
from vigil.api.router import OPENAPI_PATH
from vigil.core.queue import QUEUE_PAGE_DEFAULT, QUEUE_PAGE_MAX

API_VERSION = "v1"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
ID_PATTERN = rf"^{ID}$"
HISTORY_PAGE_MAX = 500
MAX_LOG_ATTEMPT = 1000


class _Answer(BaseModel):
    """An answer's members are exactly these: a new one is a change to the contract."""

    model_config = ConfigDict(extra="forbid")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- errors --------------------------------------------------------------------------------


class ProblemError(_Answer):
    field: str = Field(description="The field or parameter at fault: `payload.a[3]`, `limit`.")
    reason: str = Field(description="Why it is wrong, in words; never the value sent.")


class Problem(BaseModel):
    """RFC 9457 problem details: every 4xx and 5xx (vigil.api.problems)."""

    model_config = ConfigDict(extra="allow")  # extension members the server computed (429: quota, limit, ...)

    type: str = Field(description="urn:vigil:problem:REASON, stable.")
    title: str = Field(description="The status's phrase.")
    status: int
    detail: str = Field(description="What happened, naming fields and limits, never the values sent.")
    reason: str = Field(description="The CamelCase word programs switch on.")
    errors: list[ProblemError] | None = Field(default=None, description="Present when one field is at fault.")


# --- the read API ----------------------------------------------------------------------------


class AttemptRecordAnswer(_Answer):
    executionId: str
    attempt: int
    namespace: str
    job: str
    priority: str = Field(description="The ScheduledJob's priority class name.")
    state: str
    reason: str | None
    scheduledFor: str | None
    startedAt: str | None
    finishedAt: str | None
    pod: str | None
    error: str | None


class ExecutionAnswer(_Answer):
    executionId: str
    namespace: str
    spec: dict[str, Any] | None = Field(default=None, description="The Execution's spec, while it exists.")
    status: dict[str, Any] | None = Field(default=None, description="The Execution's status, while it exists.")
    history: list[AttemptRecordAnswer] | None = Field(description="Null when the history could not be read.")
    historyError: str | None = None


class ExecutionSummaryAnswer(_Answer):
    executionId: str
    jobUid: str | None
    priority: str = Field(description="The ScheduledJob's priority class name.")
    scheduledFor: str | None
    state: str
    attempts: int
    reason: str | None
    startedAt: str | None
    finishedAt: str | None
    pod: str | None
    error: str | None


class JobExecutionsPage(_Answer):
    namespace: str
    job: str
    executions: list[ExecutionSummaryAnswer]
    continue_: str | None = Field(default=None, alias="continue", description="The next page's token.")


class HistoryEntry(_Answer):
    seq: int
    entry: dict[str, Any]


class WorkflowHistoryPage(_Answer):
    namespace: str
    workflow: str
    uid: str
    entries: list[HistoryEntry]
    definition: dict[str, Any] | None = Field(default=None, description="On the page holding entry 0.")
    continue_: str | None = Field(default=None, alias="continue", description="The next page's token.")


class LogTailAnswer(_Answer):
    executionId: str
    attempt: int
    namespace: str
    job: str
    pod: str | None
    scheduledFor: str
    capturedAt: str
    truncated: bool
    logBytes: int
    note: str | None
    text: str


# --- the approval callback ---------------------------------------------------------------


class ApprovalDecision(_Answer):
    namespace: str
    workflow: str
    step: str
    decision: str
    by: str
    approver: str
    at: str
    tokenLevel: int = Field(description="The escalation level at which the token's approver joined the step (0: first).")
    records: list[dict[str, Any]] = Field(description="The workflow history entries the decision added.")


# --- the volume tier ---------------------------------------------------------------------

class Submitted(_Answer):
    jobId: str
    executionId: str
    scheduledFor: str | None


class RecurringAdded(_Answer):
    jobId: str
    nextRun: str | None


class JobExecutionRef(_Answer):
    executionId: str
    state: str
    attempt: int
    scheduledFor: str | None


class JobAnswer(_Answer):
    jobId: str
    namespace: str
    queue: str
    task: str
    payload: Any
    priority: int
    tenant: str
    maxAttempts: int
    enabled: bool
    createdAt: str | None
    cron: str | None = None
    timezone: str | None = None
    payloadTemplate: Any = None
    expectedMaxInterval: str | None = None
    nextRun: str | None = None
    executions: list[JobExecutionRef]


class QueueAttempt(_Answer):
    attempt: int
    worker: str | None
    outcome: str
    startedAt: str | None
    finishedAt: str | None
    error: str | None
    duplicate: bool


class QueueExecution(_Answer):
    executionId: str
    jobId: str | None = Field(description="Null for an execution submitted without a job.")
    namespace: str
    queue: str
    task: str
    payload: Any
    priority: int
    tenant: str
    idempotencyKey: str | None
    state: str
    attempt: int
    maxAttempts: int
    scheduledFor: str | None
    runAfter: str | None
    leaseOwner: str | None
    leaseExpiresAt: str | None
    finishedAt: str | None
    lastError: str | None
    cancelledBy: str | None
    output: Any = Field(
        description="What the task returned, kept when the execution succeeded: any JSON value, at most 32 KiB "
        "as compact JSON. Null when it returned None or a value the store could not keep, and for every "
        "execution that has not succeeded."
    )
    attempts: list[QueueAttempt]


class QueueJob(_Answer):
    jobId: str
    task: str
    enabled: bool
    priority: int
    tenant: str
    createdAt: str | None
    lastExecutionId: str | None
    lastState: str | None


class QueueJobsPage(_Answer):
    namespace: str
    queue: str
    jobs: list[QueueJob]
    continue_: str | None = Field(default=None, alias="continue", description="The next page's token.")


class DeadLetter(_Answer):
    executionId: str
    task: str
    tenant: str
    priority: int
    attempt: int
    maxAttempts: int
    scheduledFor: str | None
    diedAt: str | None
    ageSeconds: int
    error: str | None


class DeadLettersPage(_Answer):
    namespace: str
    queue: str
    deadLetters: list[DeadLetter]
    continue_: str | None = Field(default=None, alias="continue", description="The next page's token.")


class Breakdown(_Answer):
    priority: int
    tenant: str
    ready: int
    leased: int
    dead: int
    oldestReadySeconds: int | None


class QueueStats(_Answer):
    namespace: str
    queue: str
    breakdown: list[Breakdown]


MODELS: tuple[type[BaseModel], ...] = (
    Problem, ExecutionAnswer, JobExecutionsPage, WorkflowHistoryPage, LogTailAnswer, ApprovalBody, ApprovalDecision,
    OneOffSubmission, RecurringSubmission, ActionBody, Submitted, RecurringAdded, JobAnswer, QueueExecution,
    QueueJobsPage, DeadLettersPage, QueueStats,
)  # fmt: skip


# --- the document ----------------------------------------------------------------------------


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _path_param(name: str, pattern: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": {"type": "string", "pattern": pattern}}  # fmt: skip


NS = _path_param("namespace", NAMESPACE_PATTERN, "A namespace.")
QUEUE = _path_param("queue", QUEUE_PATTERN, "A TaskQueue's name.")
EXECUTION = _path_param("id", NAME_PATTERN, "An Execution's name.")
JOB_ID = _path_param("id", ID_PATTERN, "A job's id.")
EXECUTION_ID = _path_param("id", ID_PATTERN, "An execution's id.")


def _page_params(maximum: int) -> list[dict[str, Any]]:
    return [
        {"name": "limit", "in": "query", "required": False, "description": "Rows per page.",
         "schema": {"type": "integer", "minimum": 1, "maximum": maximum, "default": QUEUE_PAGE_DEFAULT}},
        {"name": "continue", "in": "query", "required": False,
         "description": "The `continue` of the previous page's answer.", "schema": {"type": "string"}},
    ]  # fmt: skip


PROBLEM_WHY = {
    400: "The query string or body cannot be read.",
    401: "No bearer token, or one the API server does not accept.",
    403: "Not allowed.",
    404: "No such object (or the route is not served here).",
    409: "The object's state does not allow it.",
    413: "The request body is too large.",
    422: "A field or parameter is wrong (named in `errors`).",
    429: "The namespace is at its quota; `Retry-After` says when to try again.",
    503: "A dependency (the API server's reviews, a database) cannot be reached now, or every worker is "
         "busy; try again.",
}  # fmt: skip


#: What a success answers: a model's JSON, a JSON schema's, or (None) text.
Success = Mapping[int, tuple[str, type[BaseModel] | dict[str, Any] | None]]


def _responses(ok: Success, errors: tuple[int, ...]) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    for status, (why, model) in ok.items():
        if model is None:
            content = {"text/plain": {"schema": {"type": "string"}}}
        else:
            content = {"application/json": {"schema": model if isinstance(model, dict) else _ref(model)}}
        answers[str(status)] = {"description": why, "content": content}
    for status in sorted({*errors, 413, 503}):
        answer: dict[str, Any] = {
            "description": PROBLEM_WHY[status], "content": {"application/problem+json": {"schema": _ref(Problem)}}
        }  # fmt: skip
        if status == 429:
            answer["headers"] = {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds."}}
        answers[str(status)] = answer
    return answers


GUARDED = (401, 403, 404)
SUBMITTED = {"oneOf": [_ref(Submitted), _ref(RecurringAdded)]}
BEARER: list[dict[str, list[str]]] = [{"bearer": []}]
BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "The caller's Kubernetes token, reviewed by the API server (TokenReview, SubjectAccessReview) "
    "for each request.",
}


#: Who may read an execution by id alone, and what is asked before the history database.
EXECUTION_BY_ID = (
    "Needs `get` on `executions.vigil.dev` (that name) in its namespace. The namespaces tried are learnt "
    "without the history database: those holding an Execution of that id (the operator's memory, or the API "
    "server), then the caller's own ServiceAccount's; a caller who may get executions in every namespace is "
    "served whatever the history holds. Anyone else is 403 with the database never asked, whether the id "
    "exists elsewhere or nowhere: an execution that retention deleted is read at "
    "/namespaces/{namespace}/executions/{id}."
)
#: Who may act on a queue's job or execution by id alone, before the queue store is read.
QUEUE_BY_ID = (
    "By id alone the queue is not known, so before the store is read the caller must hold the verb on "
    "`taskqueues/executions` in every namespace, or be a ServiceAccount holding it on every TaskQueue of its "
    "own namespace (a record of another namespace is then 403). Anyone else is 403 with the store never asked, "
    "whether the id exists elsewhere or nowhere, and acts within the queue: "
    "/v1/namespaces/{namespace}/taskqueues/{queue}/..."
)


def _op(
    summary: str, ok: Success, errors: tuple[int, ...], *,
    params: list[dict[str, Any]] | None = None, body: dict[str, Any] | None = None, open_: bool = False,
    description: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    operation: dict[str, Any] = {"summary": summary, "responses": _responses(ok, errors)}
    if description is not None:
        operation["description"] = description
    if params:
        operation["parameters"] = params
    if body is not None:
        operation["requestBody"] = body
    operation["security"] = [] if open_ else BEARER
    return operation


def _json_body(schema: dict[str, Any], *, required: bool) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _paths() -> dict[str, Any]:
    probe = _op("200 while the process serves.", {200: ("ok", None)}, (), open_=True)
    v1 = (*GUARDED, 422)
    act_body = _json_body(_ref(ActionBody), required=False)
    execution = {200: ("The execution.", QueueExecution)}
    paths: dict[str, Any] = {
        "/healthz": {"get": probe},
        "/readyz": {"get": probe},
        OPENAPI_PATH: {"get": _op("This document.", {200: ("The OpenAPI document.", {"type": "object"})}, (), open_=True)},
        "/leader": {"get": _op("The identity holding the trigger Lease.", {200: ("Its identity.", None)}, GUARDED)},
        "/executions/{id}": {"get": _op(
            "An Execution and its history rows, in whichever namespace the caller may read it.",
            {200: ("The execution.", ExecutionAnswer)}, GUARDED, params=[EXECUTION], description=EXECUTION_BY_ID)},
        "/namespaces/{namespace}/executions/{id}": {"get": _op(
            "An Execution and its history rows in a namespace.",
            {200: ("The execution.", ExecutionAnswer)}, GUARDED, params=[NS, EXECUTION])},
        "/namespaces/{namespace}/executions/{id}/log": {"get": _op(
            "An attempt's stored log tail (default: the newest attempt).", {200: ("The tail.", LogTailAnswer)},
            (*GUARDED, 400), params=[NS, EXECUTION, {
                "name": "attempt", "in": "query", "required": False,
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LOG_ATTEMPT}}])},
        "/namespaces/{namespace}/scheduledjobs/{job}/executions": {"get": _op(
            "A ScheduledJob's executions in the history database, newest first, a page at a time.",
            {200: ("A page.", JobExecutionsPage)}, (*GUARDED, 400),
            params=[NS, _path_param("job", NAME_PATTERN, "A ScheduledJob's name."), *_page_params(HISTORY_PAGE_MAX)])},
        "/namespaces/{namespace}/workflows/{workflow}/history": {"get": _op(
            "A workflow's history entries in order, a page at a time; the page holding entry 0 holds its definition.",
            {200: ("A page.", WorkflowHistoryPage)}, (*GUARDED, 400),
            params=[NS, _path_param("workflow", NAME_PATTERN, "A Workflow's name."), *_page_params(HISTORY_PAGE_MAX)])},
        "/v1/jobs": {"post": _op(
            "Submit a one-off job, or a recurring one (with `cron`).",
            {200: ("Already submitted (same idempotency key).", SUBMITTED), 201: ("Submitted.", SUBMITTED)},
            (*v1, 429), body=_json_body({"oneOf": [_ref(OneOffSubmission), _ref(RecurringSubmission)]}, required=True))},
        "/v1/jobs/{id}": _job_ops([JOB_ID], v1, description=QUEUE_BY_ID),
        "/v1/namespaces/{namespace}/taskqueues/{queue}/jobs/{id}": _job_ops([NS, QUEUE, JOB_ID], v1),
        "/v1/executions/{id}": {"get": _op("An execution's timeline.", execution, v1, params=[EXECUTION_ID],
                                           description=QUEUE_BY_ID)},
        "/v1/namespaces/{namespace}/taskqueues/{queue}/executions/{id}": {"get": _op(
            "An execution's timeline, within its queue.", execution, v1, params=[NS, QUEUE, EXECUTION_ID])},
        "/v1/namespaces/{namespace}/taskqueues/{queue}/jobs": {"get": _op(
            "The queue's jobs, newest first, a page at a time.", {200: ("A page.", QueueJobsPage)}, v1,
            params=[NS, QUEUE, *_page_params(QUEUE_PAGE_MAX)])},
        "/v1/namespaces/{namespace}/taskqueues/{queue}/dead-letters": {"get": _op(
            "The queue's dead executions, the longest dead first.", {200: ("A page.", DeadLettersPage)}, v1,
            params=[NS, QUEUE, *_page_params(QUEUE_PAGE_MAX)])},
        "/v1/namespaces/{namespace}/taskqueues/{queue}/stats": {"get": _op(
            "Ready, leased, dead and the oldest ready age per (priority, tenant).", {200: ("The stats.", QueueStats)},
            v1, params=[NS, QUEUE])},
    }  # fmt: skip
    for action, what in (("cancel", "A ready or leased execution never runs (again)."),
                         ("retry", "A dead or cancelled execution runs again, same id.")):  # fmt: skip
        for prefix, params in (("/v1", [EXECUTION_ID]), ("/v1/namespaces/{namespace}/taskqueues/{queue}", [NS, QUEUE, EXECUTION_ID])):
            paths[f"{prefix}/executions/{{id}}/{action}"] = {
                "post": _op(what, execution, (*v1, 409), params=params, body=act_body,
                            description=QUEUE_BY_ID if prefix == "/v1" else None)
            }
    token = {"name": "token", "in": "path", "required": True, "description": "The token the approval notice carries.",
             "schema": {"type": "string", "minLength": 1, "maxLength": 4096, "pattern": "^[^/]+$"}}  # fmt: skip
    for action in ("approve", "reject"):
        paths[f"/approvals/{{token}}/{action}"] = {"post": _op(
            f"{action.capitalize()} the approval step the token was minted for (its signature is its authority).",
            {200: ("The recorded decision.", ApprovalDecision)}, (400, 403, 404, 409), params=[token],
            body=_json_body(_ref(ApprovalBody), required=False), open_=True)}  # fmt: skip
    return paths


def _job_ops(params: list[dict[str, Any]], errors: tuple[int, ...], *, description: str | None = None) -> dict[str, Any]:
    return {
        "get": _op("The job and its newest executions.", {200: ("The job.", JobAnswer)}, errors, params=params,
                   description=description),
        "delete": _op("Disable the job; cancel what of it has not finished.", {200: ("The job.", JobAnswer)},
                      errors, params=params, description=description),
    }  # fmt: skip


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the operator's HTTP API."""
    _, schemas = models_json_schema(
        [(model, "validation") for model in MODELS], ref_template="#/components/schemas/{model}"
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Vigil operator HTTP API",
            "version": API_VERSION,
            "description": "Execution timelines, workflow histories, stored log tails, the approval callback and "
            "the volume tier's /v1/ routes. Every error is application/problem+json (RFC 9457).",
        },
        "paths": _paths(),
        "components": {"schemas": schemas["$defs"], "securitySchemes": {"bearer": BEARER_SCHEME}},
    }


def rendered() -> bytes:
    """The document as served and committed (docs/reference/openapi.json)."""
    return (json.dumps(document(), indent=2, sort_keys=True) + "\n").encode()


if __name__ == "__main__":
    sys.stdout.buffer.write(rendered())
