"""The operator's HTTP API as `kubectl vigil` reaches it: where, as whom, and what it answers.

The history database is the long-term record of a job's executions: retention deletes old
Execution objects, and the operator's API serves their history rows (docs/executions.md).
Unlike the Kubernetes API, the CLI cannot find that address by itself: the operator's Service
is inside the cluster, and the API server's service proxy drops the caller's token. So the
address is given: ``--api-url`` or ``VIGIL_API_URL`` (for example ``http://127.0.0.1:8080``
after ``kubectl -n vigil-system port-forward svc/vigil 8080:http``, or the Service's own name
from inside the cluster).

The caller is who the kubeconfig says: its bearer token (a token, an exec plugin's, an OIDC
provider's) is sent, and the operator asks the API server about it (TokenReview,
SubjectAccessReview), so the answer holds what the caller may list and nothing else. A user
who authenticates with a client certificate has no token to send: ``VIGIL_API_TOKEN`` gives
one (``kubectl create token …``) and wins over the kubeconfig's.

Everything that keeps the history from being shown — no address, no token, the API down, a
refusal — is one `HistoryNotShown` with a one-line reason; the caller still shows what the
API server holds.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from vigil.cli.errors import BadInput
from vigil.core.history import MAX_PAGE_SIZE, AttemptState, ExecutionSummary

API_URL_ENV = "VIGIL_API_URL"
API_TOKEN_ENV = "VIGIL_API_TOKEN"
#: How long one request may take: a page is one indexed query, so this is a dead or hung API.
REQUEST_TIMEOUT_SECONDS = 10.0
#: The longest error message from the API repeated to the user (one line).
MESSAGE_MAX = 200


class HistoryNotShown(Exception):
    """The history could not be asked; the message says why, in one line."""


def api_url(given: str | None) -> str | None:
    """The API's base URL (no trailing slash), or None when none is given; BadInput if unusable."""
    if not given:
        return None
    parts = urllib.parse.urlsplit(given)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise BadInput(
            f"the operator's API URL must be http(s)://HOST[:PORT][/PATH], not {given!r} "
            f"(--api-url or {API_URL_ENV})"
        )
    try:
        parts.port  # noqa: B018 - reading it validates it
    except ValueError:
        raise BadInput(f"the operator's API URL has a bad port: {given!r} (--api-url or {API_URL_ENV})") from None
    return given.rstrip("/")


@dataclasses.dataclass(frozen=True)
class OperatorApi:
    """The operator's HTTP API at `url`, called with `token` (never logged, never printed)."""

    url: str
    token: str
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS

    def job_executions(
        self, namespace: str, job: str, *, limit: int, cont: str | None = None
    ) -> tuple[list[ExecutionSummary], str | None]:
        """A page of the job's executions from the history database, newest first, and the
        token of the next page (None on the last)."""
        query = {"limit": str(min(limit, MAX_PAGE_SIZE))} | ({"continue": cont} if cont else {})
        path = f"/namespaces/{_q(namespace)}/scheduledjobs/{_q(job)}/executions?{urllib.parse.urlencode(query)}"
        body = self._get(path)
        try:
            found = [summary_from_json(item, namespace=namespace, job=job) for item in body["executions"]]
            following = body.get("continue")
        except (KeyError, TypeError, ValueError) as error:
            raise HistoryNotShown(f"the operator's API at {self.url} answered a page it cannot read: {error}") from None
        return found, str(following) if following else None

    def _get(self, path: str) -> Mapping[str, Any]:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            with error:
                raise HistoryNotShown(self._refusal(error.code, error.read())) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", None) or error
            raise HistoryNotShown(f"cannot reach the operator's API at {self.url}: {reason}") from None
        try:
            body = json.loads(raw)
        except ValueError:
            raise HistoryNotShown(f"the operator's API at {self.url} did not answer JSON") from None
        if not isinstance(body, dict):
            raise HistoryNotShown(f"the operator's API at {self.url} did not answer a JSON object")
        return body

    def _refusal(self, status: int, raw: bytes) -> str:
        try:
            message = str(json.loads(raw).get("error") or "")
        except (ValueError, AttributeError):
            message = raw.decode(errors="replace")
        message = " ".join(message.split())[:MESSAGE_MAX]
        if status == 401:
            return f"the operator's API at {self.url} did not accept your token (401); set {API_TOKEN_ENV}"
        return f"the operator's API at {self.url} answered {status}: {message or '(no message)'}"


def summary_from_json(item: Mapping[str, Any], *, namespace: str, job: str) -> ExecutionSummary:
    """An execution of the API's page, as the core's summary; ValueError/KeyError if malformed."""

    def t(name: str) -> datetime | None:
        value = item.get(name)
        return None if value is None else _aware(datetime.fromisoformat(str(value)), name)

    scheduled_for = t("scheduledFor")
    if scheduled_for is None:
        raise ValueError("an execution without scheduledFor")
    return ExecutionSummary(
        execution_id=str(item["executionId"]), namespace=namespace, job=job, job_uid=str(item.get("jobUid", "")),
        priority=str(item.get("priority", "")), scheduled_for=scheduled_for, state=AttemptState(item["state"]),
        attempts=int(item["attempts"]), reason=str(item.get("reason") or ""), started_at=t("startedAt"),
        finished_at=t("finishedAt"), pod=str(item.get("pod") or ""), error=str(item.get("error") or ""),
    )  # fmt: skip


def _aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{name} has no time zone")
    return value


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def connect(given_url: str | None, *, environ: Mapping[str, str], kube_token: Callable[[], str | None]) -> OperatorApi:
    """The API named by `given_url` (else ``VIGIL_API_URL``), called with ``VIGIL_API_TOKEN`` or
    else the kubeconfig's token (`kube_token`). BadInput for an unusable URL; HistoryNotShown
    when there is no address or no token."""
    url = api_url(given_url or environ.get(API_URL_ENV))
    if url is None:
        raise HistoryNotShown(f"no address for the operator's API: set {API_URL_ENV} or --api-url (docs/executions.md)")
    token = environ.get(API_TOKEN_ENV) or kube_token()
    if not token:
        raise HistoryNotShown(
            f"your kubeconfig has no bearer token for the operator's API (a client certificate cannot be sent on): "
            f"set {API_TOKEN_ENV}, e.g. from kubectl create token"
        )
    return OperatorApi(url, token)


def kubeconfig_token(configuration: Any) -> str | None:
    """The bearer token a kubernetes client `Configuration` sends (refreshed first, for exec
    plugins and OIDC), or None when it authenticates otherwise."""
    refresh = getattr(configuration, "refresh_api_key_hook", None)
    if refresh is not None:
        refresh(configuration)
    keys = getattr(configuration, "api_key", None) or {}
    value = str(keys.get("BearerToken") or keys.get("authorization") or "")  # the loader's key, or a hand-set one
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
