"""The operator's HTTP API as `kubectl vigil` reaches it: where, as whom, and what it answers.

The history database is the long-term record of a job's executions and of a workflow's
history: retention deletes old Execution objects and ttlAfterFinished finished Workflows, and
the operator's API serves their history rows (docs/executions.md, docs/workflows.md).
Unlike the Kubernetes API, the CLI cannot find that address by itself: the operator's Service
is inside the cluster, and the API server's service proxy drops the caller's token. So the
address is given: ``--api-url`` or ``VIGIL_API_URL`` (for example ``https://127.0.0.1:8080``
after ``kubectl -n vigil-system port-forward svc/vigil 8080:http``, or the Service's own name
from inside the cluster).

An ``https://`` API is always verified. The CA comes from ``--api-ca-file`` or
``VIGIL_API_CA_FILE``; else from the cluster, through the kubeconfig, if the caller may read it
(the chart's ConfigMap ``vigil-api-ca`` in ``vigil-system``, then ``ca.crt`` of the Secret
``vigil-api-tls`` there: a release of another name or namespace needs the flag); else the
system's trust store. Only ``--insecure-skip-tls-verify`` skips the check.

The caller is who the kubeconfig says: its bearer token (a token, an exec plugin's, an OIDC
provider's) is sent, and the operator asks the API server about it (TokenReview for the audience
``vigil``, SubjectAccessReview), so the answer holds what the caller may list and nothing else.
The operator accepts only tokens bound to that audience (settings ``http.tokenAudiences``), and
a kubeconfig's token usually is not: it is refused (401) unless the operator also lists the API
server's audience. ``VIGIL_API_TOKEN`` gives a token to send instead and wins over the
kubeconfig's: ``kubectl create token SA --audience vigil`` for a ServiceAccount. A human cannot
mint an audience-bound token for themselves (TokenRequest is for ServiceAccounts), so people
use a ServiceAccount's token bound to them by RBAC, or a cluster in migration accepts both.

Everything that keeps the history from being shown — no address, no token, the API down, a
refusal — is one `HistoryNotShown` with a one-line reason; the caller still shows what the
API server holds, or says why it has nothing to show.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from vigil.cli.cluster import connection
from vigil.cli.errors import BadInput, problem_of
from vigil.core.history import MAX_PAGE_SIZE, AttemptState, ExecutionSummary
from vigil.core.logtail import LogTail, log_tail_from_json

API_URL_ENV = "VIGIL_API_URL"
API_TOKEN_ENV = "VIGIL_API_TOKEN"
API_CA_ENV = "VIGIL_API_CA_FILE"
#: Where the chart of the default release publishes the API's CA (helm/vigil/templates/api-tls.yaml).
PUBLISHED_CA = ("vigil-system", "vigil-api-ca", "vigil-api-tls")
#: How long one request may take: a page is one indexed query, so this is a dead or hung API.
REQUEST_TIMEOUT_SECONDS = 10.0
#: The longest error message from the API repeated to the user (one line).
MESSAGE_MAX = 200


class HistoryNotShown(Exception):
    """The history could not be asked; the message says why, in one line."""


@dataclasses.dataclass(frozen=True)
class WorkflowHistory:
    """A workflow's history as the history database holds it: the newest workflow of the name
    asked (its `uid`), every entry from the first, and the pinned `definition` entry 0 carries
    (None when it was mirrored before the database kept definitions)."""

    uid: str
    definition: Mapping[str, Any] | None
    entries: list[Mapping[str, Any]]


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
    tls: ssl.SSLContext | None = None  # how an https:// API is verified (None: plain http)

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

    def workflow_history(self, namespace: str, workflow: str) -> WorkflowHistory | None:
        """The workflow's whole history from the history database, a page at a time; None when
        the database holds no entry of that name."""
        base = f"/namespaces/{_q(namespace)}/workflows/{_q(workflow)}/history"
        pages: list[Mapping[str, Any]] = []
        cont: str | None = None
        while not pages or cont:
            query = {"limit": str(MAX_PAGE_SIZE)} | ({"continue": cont} if cont else {})
            body = self._request(f"{base}?{urllib.parse.urlencode(query)}", absent_is_none=True)
            if body is None:
                return None
            pages.append(body)
            cont = str(body.get("continue") or "")
        try:
            return workflow_history_from_json(pages)
        except (KeyError, TypeError, ValueError) as error:
            raise HistoryNotShown(f"the operator's API at {self.url} answered a page it cannot read: {error}") from None

    def attempt_log(self, namespace: str, execution: str, *, attempt: int | None = None) -> LogTail | None:
        """The stored tail of an attempt's log (without `attempt`, of the latest attempt that has
        one) from the history database, or None when none is stored.

        The route is ``GET /namespaces/{ns}/executions/{id}/log[?attempt=N]``: 200 with the
        tail as `vigil.core.logtail.log_tail_to_json` writes it, 404 ``NotFound`` when none."""
        query = f"?{urllib.parse.urlencode({'attempt': str(attempt)})}" if attempt is not None else ""
        body = self._request(f"/namespaces/{_q(namespace)}/executions/{_q(execution)}/log{query}", absent_is_none=True)
        if body is None:
            return None
        try:
            return log_tail_from_json(dict(body))
        except (KeyError, TypeError, ValueError) as error:
            raise HistoryNotShown(f"the operator's API at {self.url} answered a log it cannot read: {error}") from None

    def _get(self, path: str) -> Mapping[str, Any]:
        body = self._request(path, absent_is_none=False)
        assert body is not None  # only absent_is_none answers None
        return body

    def _request(self, path: str, *, absent_is_none: bool) -> Mapping[str, Any] | None:
        """The JSON object answered; with `absent_is_none`, None for the API's 404 NotFound."""
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds, context=self.tls) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            with error:
                raw = error.read()
            if absent_is_none and error.code == 404 and _reason(raw) == "NotFound":
                return None
            if error.code == 404:
                raise HistoryNotShown(f"the operator's API at {self.url} does not serve {path.partition('?')[0]} "
                                      "(an operator older than this plugin?)") from None
            raise HistoryNotShown(self._refusal(error.code, raw)) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", None) or error
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise HistoryNotShown(
                    f"the operator's API at {self.url} has a certificate not signed by the CA used ({reason.verify_message}): "
                    f"give its CA with --api-ca-file or {API_CA_ENV} (ConfigMap <release>-api-ca, key ca.crt)"
                ) from None
            raise HistoryNotShown(f"cannot reach the operator's API at {self.url}: {reason}") from None
        try:
            body = json.loads(raw)
        except ValueError:
            raise HistoryNotShown(f"the operator's API at {self.url} did not answer JSON") from None
        if not isinstance(body, dict):
            raise HistoryNotShown(f"the operator's API at {self.url} did not answer a JSON object")
        return body

    def _refusal(self, status: int, raw: bytes) -> str:
        _, message = problem_of(raw)
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


def workflow_history_from_json(pages: Sequence[Mapping[str, Any]]) -> WorkflowHistory:
    """The API's pages of a workflow's history, as one; ValueError/KeyError/TypeError if
    malformed, or if an entry is missing (a fold over a history with a gap would be wrong)."""
    definition = pages[0].get("definition")
    if definition is not None and not isinstance(definition, dict):
        raise ValueError("the definition is not a JSON object")
    entries: list[Mapping[str, Any]] = []
    for page in pages:
        for item in page["entries"]:
            if int(item["seq"]) != len(entries):
                raise ValueError(f"entry {len(entries)} is missing (the page holds {item['seq']} there)")
            entries.append(dict(item["entry"]))
    return WorkflowHistory(uid=str(pages[0]["uid"]), definition=definition, entries=entries)


def _reason(raw: bytes) -> str:
    """The reason of the API's error body ("" when it is not one)."""
    return problem_of(raw)[0]


def _aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{name} has no time zone")
    return value


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def connect(
    given_url: str | None,
    *,
    environ: Mapping[str, str],
    kube_token: Callable[[], str | None],
    ca_file: str | None = None,
    insecure_skip_tls_verify: bool = False,
    published_ca: Callable[[], str | None] = lambda: None,
) -> OperatorApi:
    """The API named by `given_url` (else ``VIGIL_API_URL``), called with ``VIGIL_API_TOKEN`` or
    else the kubeconfig's token (`kube_token`). BadInput for an unusable URL; HistoryNotShown
    when there is no address or no token, or under `--as` without ``VIGIL_API_TOKEN`` (the
    kubeconfig's token is the caller's own, not the impersonated identity's). An https URL is
    verified against `ca_file` (else ``VIGIL_API_CA_FILE``, else `published_ca`, the PEM the
    cluster publishes, else the system's trust store) unless `insecure_skip_tls_verify`."""
    url = api_url(given_url or environ.get(API_URL_ENV))
    if url is None:
        raise HistoryNotShown(f"no address for the operator's API: set {API_URL_ENV} or --api-url (docs/executions.md)")
    token = environ.get(API_TOKEN_ENV)
    if not token and connection().impersonate:
        raise HistoryNotShown(
            f"--as reaches the API server only: the operator's API would see your own kubeconfig's token; "
            f"set {API_TOKEN_ENV} to a token of the identity to act as"
        )
    token = token or kube_token()
    if not token:
        raise HistoryNotShown(
            f"your kubeconfig has no bearer token for the operator's API (a client certificate cannot be sent on): "
            f"set {API_TOKEN_ENV}, e.g. from kubectl create token"
        )
    if not url.startswith("https://"):
        return OperatorApi(url, token)
    return OperatorApi(url, token, tls=tls_context(
        ca_file or environ.get(API_CA_ENV), insecure_skip_tls_verify=insecure_skip_tls_verify, published_ca=published_ca
    ))  # fmt: skip


def tls_context(
    ca_file: str | None, *, insecure_skip_tls_verify: bool, published_ca: Callable[[], str | None]
) -> ssl.SSLContext:
    """How the API's certificate is checked: against `ca_file`, else the PEM `published_ca`
    finds, else the system's trust store; never skipped but on `insecure_skip_tls_verify`."""
    if insecure_skip_tls_verify:
        if ca_file:
            raise BadInput("--insecure-skip-tls-verify and a CA file contradict each other; give one")
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if ca_file:
        try:
            return ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as error:
            raise BadInput(f"cannot read the operator API's CA from {ca_file}: {error}") from None
    pem = published_ca()
    try:
        return ssl.create_default_context(cadata=pem) if pem else ssl.create_default_context()
    except ssl.SSLError as error:
        raise HistoryNotShown(f"the CA the cluster publishes for the operator's API is not PEM: {error}") from None


def cluster_ca(api: Any, *, namespace: str = PUBLISHED_CA[0]) -> str | None:
    """The API's CA as the chart publishes it, read with the caller's kubeconfig (`api`, a
    kubernetes ApiClient): ConfigMap ``vigil-api-ca``, else the Secret ``vigil-api-tls``'s
    ``ca.crt``; None when neither exists or the caller may not read them."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    _, config_map, secret = PUBLISHED_CA
    core = client.CoreV1Api(api)
    try:
        found = core.read_namespaced_config_map(config_map, namespace, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        if found.data and found.data.get("ca.crt"):
            return str(found.data["ca.crt"])
    except ApiException:
        pass
    try:
        stored = core.read_namespaced_secret(secret, namespace, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        if stored.data and stored.data.get("ca.crt"):
            return base64.b64decode(stored.data["ca.crt"]).decode()
    except (ApiException, ValueError):
        pass
    return None


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    """The flags that say how an https:// operator API is verified."""
    parser.add_argument(
        "--api-ca-file", metavar="FILE",
        help=f"PEM CA the operator API's certificate must chain to (default: ${API_CA_ENV}, else the CA "
        "the chart publishes in vigil-system, else the system's)",
    )  # fmt: skip
    parser.add_argument(
        "--insecure-skip-tls-verify", action="store_true",
        help="do not verify the operator API's certificate (anyone on the path can read your token)",
    )  # fmt: skip


def operator_api(args: argparse.Namespace, api: Callable[[], Any], *, environ: Mapping[str, str]) -> OperatorApi:
    """`connect` with a command's flags (`--api-url`, `add_tls_options`') and the kubeconfig's
    ApiClient, made by `api` only when it is needed (its token, when VIGIL_API_TOKEN is not set;
    the published CA, for an https URL with no CA given): a caller with a URL and a token needs no
    kubeconfig."""
    return connect(
        args.api_url, environ=environ, kube_token=lambda: kubeconfig_token(api().configuration),
        ca_file=args.api_ca_file, insecure_skip_tls_verify=args.insecure_skip_tls_verify,
        published_ca=lambda: cluster_ca(api()),
    )  # fmt: skip


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
