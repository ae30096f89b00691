"""`vigil.client`: a small synchronous client of the volume tier's HTTP API, for programs.

    from vigil.client import Client

    vigil = Client("https://vigil.vigil-system:8080", token_file="/var/run/secrets/vigil/token",
                   ca_file="/etc/vigil-api-ca/ca.crt")
    job = vigil.submit(namespace="shop", queue="orders", task="reconcile_daily",
                       payload={"date": "2026-12-01"}, idempotency_key="reconcile-2026-12-01")
    print(vigil.execution(job.execution_id).state)

It speaks the routes of vigil.api.queue (docs/queue.md, "HTTP API") with the caller's
Kubernetes bearer token: given directly, or read from a file at every request (a pod's
projected ServiceAccount token is rotated on disk, so it is never cached here). Every request
has a timeout. Answers are typed (frozen dataclasses, times as aware datetimes); an error answer
raises ApiError carrying its status, reason, message and (for a bad field) the field.

An ``https://`` address is always verified: against `ca_file` (the chart publishes its CA in the
ConfigMap ``<release>-api-ca``, key ``ca.crt``), else the system's trust store; only an explicit
``insecure_skip_tls_verify=True`` turns that off. The token must be bound to the audience
``vigil`` (a projected ServiceAccount token with ``audience: vigil``, or ``kubectl create token
SA --audience vigil``): the operator refuses tokens minted for other audiences (docs/security.md).

Only the standard library: a program that submits work needs neither Kubernetes' client nor a
database driver.
"""

from __future__ import annotations

import dataclasses
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

DEFAULT_TIMEOUT_SECONDS = 10.0  # one request, connect to last byte: the operator's own cap is 30 s


#: Where a problem's ``type`` starts; the API's reason completes it (vigil.api.problems).
PROBLEM_TYPE_PREFIX = "urn:vigil:problem:"


class ApiError(Exception):
    """An error answer (or no answer): `status` is the HTTP status (0: the request failed before
    one came), `reason` the API's reason (``Invalid``, ``Forbidden``, ``Conflict``, ...), `field`
    the request field at fault (a 422's, or a 403's ``tenant``), `request_id` the operator's id
    of the request (its log lines carry it; "" when none came back).

    The operator answers every error as RFC 9457 problem details (``application/problem+json``:
    ``type``, ``title``, ``status``, ``detail``, ``reason``, ``errors: [{field, reason}]``);
    an older operator's ``{"error", "reason", "field"}`` is read as well."""

    def __init__(
        self, status: int, message: str, *, reason: str = "", field: str | None = None, request_id: str = ""
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.field = field
        self.request_id = request_id


@dataclasses.dataclass(frozen=True)
class Submitted:
    """A submit's answer: `created` is False when the idempotency key named an earlier job."""

    job_id: str | None
    execution_id: str
    scheduled_for: datetime
    created: bool


@dataclasses.dataclass(frozen=True)
class ExecutionSummary:
    execution_id: str
    state: str
    attempt: int
    scheduled_for: datetime


@dataclasses.dataclass(frozen=True)
class Job:
    job_id: str
    namespace: str
    queue: str
    task: str
    payload: dict[str, Any]
    priority: int
    tenant: str
    max_attempts: int
    enabled: bool  # False once deleted
    created_at: datetime
    executions: tuple[ExecutionSummary, ...]  # the newest first


@dataclasses.dataclass(frozen=True)
class Attempt:
    attempt: int
    worker: str
    outcome: str  # succeeded, failed, lease_expired
    started_at: datetime | None
    finished_at: datetime
    error: str | None
    duplicate: bool


@dataclasses.dataclass(frozen=True)
class Execution:
    """An execution's timeline."""

    execution_id: str
    job_id: str | None
    namespace: str
    queue: str
    task: str
    payload: dict[str, Any]
    priority: int
    tenant: str
    idempotency_key: str | None
    state: str  # ready, leased, succeeded, dead, cancelled
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    run_after: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    finished_at: datetime | None
    last_error: str | None
    cancelled_by: str | None
    attempts: tuple[Attempt, ...]
    output: Any = None  # what the task returned, once succeeded (None: nothing, or not yet)


@dataclasses.dataclass(frozen=True)
class QueueJob:
    """A job of a queue's listing, with its newest execution's id and state (None: none)."""

    job_id: str
    task: str
    enabled: bool
    priority: int
    tenant: str
    created_at: datetime
    last_execution_id: str | None
    last_state: str | None


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """A dead execution of a queue's listing; `error` is its last line, cut."""

    execution_id: str
    task: str
    tenant: str
    priority: int
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    died_at: datetime
    age_seconds: int
    error: str


@dataclasses.dataclass(frozen=True)
class QueueJobs:
    jobs: tuple[QueueJob, ...]  # the newest first
    continue_token: str | None  # the next page's (None: this is the last)


@dataclasses.dataclass(frozen=True)
class DeadLetters:
    dead_letters: tuple[DeadLetter, ...]  # the longest dead first
    continue_token: str | None


@dataclasses.dataclass(frozen=True)
class Breakdown:
    """A queue's executions of one (priority, tenant) now."""

    priority: int
    tenant: str
    ready: int
    leased: int
    dead: int
    oldest_ready_seconds: int | None  # the oldest due ready one's wait (None: none is due)


class Client:
    """The HTTP API at `base_url` (the operator's API port), as the holder of a token.

    `token` is the bearer token itself; `token_file` a file holding it, read at every request.
    `ca_file`: PEM CA certificates an ``https://`` API's certificate must chain to (default: the
    system's); `insecure_skip_tls_verify` skips that check, and only when asked.
    """

    #: The pod's default ServiceAccount token: bound to the API server's audience, so an operator
    #: accepting only `vigil` (the default) refuses it; mount a projected token with
    #: ``audience: vigil`` and pass its path instead.
    IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        token_file: str | Path | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        ca_file: str | Path | None = None,
        insecure_skip_tls_verify: bool = False,
    ) -> None:
        if (token is None) == (token_file is None):
            raise ValueError("give exactly one of token and token_file")
        if ca_file is not None and insecure_skip_tls_verify:
            raise ValueError("give ca_file or insecure_skip_tls_verify, not both")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._token_file = Path(token_file) if token_file is not None else None
        self.timeout = timeout
        self._tls = tls_context(ca_file, insecure_skip_tls_verify=insecure_skip_tls_verify)

    def submit(
        self,
        *,
        namespace: str,
        queue: str,
        task: str,
        payload: dict[str, Any] | None = None,
        run_at: datetime | None = None,
        priority: int | str | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        tenant: str | None = None,
    ) -> Submitted:
        """Submit a one-off job to the TaskQueue `queue` in `namespace` (runs at `run_at`, an
        aware datetime; None: now). `priority`: a number (lower runs first) or high/normal/low;
        above normal only from the namespaces the chart lists. `tenant`: None for the caller's
        own (its namespace, or the tenant the TaskQueue binds to it); naming one that is not the
        caller's is refused (ApiError 403, field "tenant"). Needs `create` on
        taskqueues/executions."""
        body: dict[str, Any] = {"namespace": namespace, "queue": queue, "task": task}
        optional = {
            "payload": payload,
            "runAt": _aware(run_at).isoformat() if run_at is not None else None,
            "priority": priority,
            "maxAttempts": max_attempts,
            "idempotencyKey": idempotency_key,
            "tenant": tenant,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        status, answer = self._call("POST", "/v1/jobs", body)
        return Submitted(
            job_id=answer["jobId"],
            execution_id=answer["executionId"],
            scheduled_for=_when(answer["scheduledFor"]),
            created=status == 201,
        )

    def job(self, job_id: str, *, queue: tuple[str, str] | None = None) -> Job:
        """The job and its newest executions. Given its `queue` (namespace, TaskQueue name), the
        operator checks the caller's right on that queue before it reads anything (a job of
        another queue is then 404). By id alone the caller needs the verb in every namespace (or,
        a ServiceAccount, on every TaskQueue of its own namespace): a grant on one TaskQueue
        answers 403 there, so pass `queue`."""
        return _job(self._call("GET", _record_path("jobs", job_id, queue))[1])

    def delete_job(self, job_id: str, *, queue: tuple[str, str] | None = None) -> Job:
        """Delete (disable) the job: what of it has not finished is cancelled. The job as it is now."""
        return _job(self._call("DELETE", _record_path("jobs", job_id, queue))[1])

    def execution(self, execution_id: str, *, queue: tuple[str, str] | None = None) -> Execution:
        return _execution(self._call("GET", _record_path("executions", execution_id, queue))[1])

    def cancel(self, execution_id: str, *, queue: tuple[str, str] | None = None) -> Execution:
        """Cancel a ready or leased execution (409 ApiError when it has finished)."""
        return _execution(self._call("POST", _record_path("executions", execution_id, queue) + "/cancel", {})[1])

    def retry(self, execution_id: str, *, queue: tuple[str, str] | None = None) -> Execution:
        """Run a dead or cancelled execution again, same id (409 ApiError otherwise)."""
        return _execution(self._call("POST", _record_path("executions", execution_id, queue) + "/retry", {})[1])

    def queue_jobs(self, namespace: str, queue: str, *, limit: int = 50, cont: str | None = None) -> QueueJobs:
        """A page of the TaskQueue's jobs, newest first (`limit` 1 to 500); `cont` the token of
        the page to read (a QueueJobs' `continue_token`)."""
        answer = self._call("GET", _listing(namespace, queue, "jobs", limit=limit, cont=cont))[1]
        return QueueJobs(tuple(_queue_job(item) for item in answer["jobs"]), answer.get("continue"))

    def dead_letters(self, namespace: str, queue: str, *, limit: int = 50, cont: str | None = None) -> DeadLetters:
        """A page of the TaskQueue's dead executions, the longest dead first."""
        answer = self._call("GET", _listing(namespace, queue, "dead-letters", limit=limit, cont=cont))[1]
        return DeadLetters(tuple(_dead_letter(item) for item in answer["deadLetters"]), answer.get("continue"))

    def queue_stats(self, namespace: str, queue: str) -> tuple[Breakdown, ...]:
        """The TaskQueue's ready, leased and dead executions per (priority, tenant), most urgent first."""
        answer = self._call("GET", _listing(namespace, queue, "stats"))[1]
        return tuple(
            Breakdown(
                priority=b["priority"], tenant=b["tenant"], ready=b["ready"], leased=b["leased"],
                dead=b["dead"], oldest_ready_seconds=b["oldestReadySeconds"],
            )
            for b in answer["breakdown"]
        )  # fmt: skip

    def _bearer(self) -> str:
        if self._token is not None:
            return self._token
        assert self._token_file is not None
        try:
            return self._token_file.read_text().strip()
        except OSError as error:
            raise ApiError(0, f"cannot read the token file {self._token_file}: {error}", reason="NoToken") from None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self._bearer()}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._tls) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                raise _api_error(error.code, error.read(), request_id=error.headers.get("X-Request-Id") or "") from None
        except (urllib.error.URLError, OSError) as error:
            why = getattr(error, "reason", error)
            raise ApiError(0, f"{method} {self.base_url}{path} failed: {why}", reason="Unreachable") from None
        except ValueError as error:
            raise ApiError(0, f"{method} {path}: the answer is not JSON: {error}", reason="BadAnswer") from None


def tls_context(ca_file: str | Path | None, *, insecure_skip_tls_verify: bool = False) -> ssl.SSLContext:
    """How an ``https://`` API is verified: the certificate chains to `ca_file` (else the system's
    trust store) and names the host asked for; with `insecure_skip_tls_verify`, neither."""
    if insecure_skip_tls_verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)


def _api_error(status: int, raw: bytes, *, request_id: str = "") -> ApiError:
    """The ApiError of an error answer's body: problem details, or an older operator's shape."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return ApiError(status, raw.decode(errors="replace").strip(), request_id=request_id)
    kind = str(data.get("type") or "")
    reason = str(data.get("reason") or (kind[len(PROBLEM_TYPE_PREFIX):] if kind.startswith(PROBLEM_TYPE_PREFIX) else ""))
    message = str(data.get("detail") or data.get("title") or data.get("error") or "")
    errors = data.get("errors")
    field = data.get("field")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        field = errors[0].get("field")
    return ApiError(
        status, message, reason=reason, field=None if field is None else str(field), request_id=request_id
    )


def _segment(ident: str) -> str:
    if not ident or not ident.isascii() or not all(ch.isalnum() or ch == "-" for ch in ident):
        raise ValueError(f"{ident!r} is not a job or execution id")
    return ident


def _record_path(kind: str, ident: str, queue: tuple[str, str] | None) -> str:
    """A job's or execution's path: within its queue when given (authorised before any read)."""
    if queue is None:
        return f"/v1/{kind}/{_segment(ident)}"
    return _listing(queue[0], queue[1], f"{kind}/{_segment(ident)}")


def _listing(namespace: str, queue: str, kind: str, *, limit: int | None = None, cont: str | None = None) -> str:
    for name, value in (("namespace", namespace), ("queue", queue)):
        if not value or not value.isascii() or not all(ch.isalnum() or ch in "-." for ch in value):
            raise ValueError(f"{value!r} is not a {name} name")
    query = {"limit": str(limit)} if limit is not None else {}
    query |= {"continue": cont} if cont else {}
    path = f"/v1/namespaces/{namespace}/taskqueues/{queue}/{kind}"
    return f"{path}?{urllib.parse.urlencode(query)}" if query else path


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"run_at must be timezone-aware, got naive {value.isoformat()}")
    return value


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _maybe(text: str | None) -> datetime | None:
    return _when(text) if text is not None else None


def _job(data: dict[str, Any]) -> Job:
    return Job(
        job_id=data["jobId"], namespace=data["namespace"], queue=data["queue"], task=data["task"],
        payload=data["payload"], priority=data["priority"], tenant=data["tenant"],
        max_attempts=data["maxAttempts"], enabled=data["enabled"], created_at=_when(data["createdAt"]),
        executions=tuple(
            ExecutionSummary(e["executionId"], e["state"], e["attempt"], _when(e["scheduledFor"]))
            for e in data["executions"]
        ),
    )  # fmt: skip


def _queue_job(data: dict[str, Any]) -> QueueJob:
    return QueueJob(
        job_id=data["jobId"], task=data["task"], enabled=data["enabled"], priority=data["priority"],
        tenant=data["tenant"], created_at=_when(data["createdAt"]), last_execution_id=data["lastExecutionId"],
        last_state=data["lastState"],
    )  # fmt: skip


def _dead_letter(data: dict[str, Any]) -> DeadLetter:
    return DeadLetter(
        execution_id=data["executionId"], task=data["task"], tenant=data["tenant"], priority=data["priority"],
        attempt=data["attempt"], max_attempts=data["maxAttempts"], scheduled_for=_when(data["scheduledFor"]),
        died_at=_when(data["diedAt"]), age_seconds=data["ageSeconds"], error=data["error"],
    )  # fmt: skip


def _execution(data: dict[str, Any]) -> Execution:
    return Execution(
        execution_id=data["executionId"], job_id=data["jobId"], namespace=data["namespace"],
        queue=data["queue"], task=data["task"], payload=data["payload"], priority=data["priority"],
        tenant=data["tenant"], idempotency_key=data["idempotencyKey"], state=data["state"],
        attempt=data["attempt"], max_attempts=data["maxAttempts"],
        scheduled_for=_when(data["scheduledFor"]), run_after=_when(data["runAfter"]),
        lease_owner=data["leaseOwner"], lease_expires_at=_maybe(data["leaseExpiresAt"]),
        finished_at=_maybe(data["finishedAt"]), last_error=data["lastError"],
        cancelled_by=data["cancelledBy"], output=data.get("output"),  # .get: an older operator has no output
        attempts=tuple(
            Attempt(
                attempt=a["attempt"], worker=a["worker"], outcome=a["outcome"],
                started_at=_maybe(a["startedAt"]), finished_at=_when(a["finishedAt"]),
                error=a["error"], duplicate=a["duplicate"],
            )
            for a in data["attempts"]
        ),
    )  # fmt: skip
