"""The operator's Kubernetes client: no request waits forever, and a 429 is waited out.

Two ways a sick network or a busy API server hurts an operator that the
official client does nothing about by default:

* **A request with no timeout can wait forever.** A half-open TCP connection
  (a proxy, NAT or node that stops forwarding without closing anything)
  leaves the client waiting for an answer that never comes, and the thread
  that sent it is gone for good. Every request sent through `build_client`'s
  client therefore carries a timeout (connect + read, `urllib3.Timeout(total=)`):
  its own `_request_timeout` when the call passes one, else the policy's
  default, which the composition root derives from the leader-election
  settings so that it is shorter than the renew deadline. A watch that passes
  none gets the default to connect and its server-side `timeoutSeconds` (or
  `WATCH_SECONDS`) plus the default to read: a watch is quiet by nature, and
  anything longer-lived than the default should pass its own.
* **API Priority and Fairness answers 429 Too Many Requests** with a
  Retry-After when the operator's share of the API server is used up. A 429
  means the request was *not* processed, so any method may be sent again.
  urllib3's `Retry` on the client's connection pool (the kubernetes client's
  `Configuration.retries`, which its RESTClientObject hands to every pool and
  never overrides per request, except for its opt-in `client_go_retries` on
  reads, which we leave off) waits what the server says, capped, and retries up
  to `throttle_retries` times; after that the caller gets ApiException(429),
  which every caller treats as transient (never a permanent refusal). Each 429
  answer is reported to `on_throttled`, which the composition root counts in a
  metric.

Two costs of the official client, per request, that an operator writing hundreds of objects a
second need not carry (a profiler put them at about 4 ms of the operator's CPU per request under
50 10-step workflows; a profiler inflates small calls, and the operator's CPU in that benchmark
fell by little):

* **A body is walked in Python before it is sent** (`sanitize_for_serialization`, meant for the
  generated model objects). The operator's bodies are plain JSON already: `PlainJsonClient`
  sends them as they are, and walks only what is not (a model object, a datetime).
* **A loaded kubeconfig or in-cluster token is re-applied before every request** (its
  `refresh_api_key_hook`), and re-applying sets the host, which reads every proxy variable of
  the environment again. `build_client` lets it run once per `AUTH_REFRESH_SECONDS`: a token that
  expires or rotates is still picked up within that second.

A read that timed out is not retried: the request may have been processed, the
caller's loop repeats it (idempotently, with what it reads next), and retrying
here would multiply the wait the timeout bounds. A connection that fails or
breaks before any answer (refused, or a pooled connection the server had
closed) is tried once more, as urllib3 does by default.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client, config
from kubernetes.client import rest
from urllib3 import BaseHTTPResponse
from urllib3.exceptions import ReadTimeoutError
from urllib3.util.retry import Retry

TOO_MANY_REQUESTS = 429
#: Seconds between two re-applications of the loaded credentials (see the module docstring).
AUTH_REFRESH_SECONDS = 1.0
#: Seconds a watch that names no `timeoutSeconds` is expected to last (the caches' own server timeout).
WATCH_SECONDS = 300.0


@dataclasses.dataclass(frozen=True)
class RequestPolicy:
    timeout_seconds: float  # connect + read of one attempt, for every call that passes no timeout
    retry_after_cap_seconds: float  # the longest wait one 429's Retry-After buys
    throttle_retries: int = 5  # 429 answers waited out before the caller sees one
    backoff_seconds: float = 0.25  # wait after a 429 with no Retry-After, doubling per repeat

    def __post_init__(self) -> None:
        if self.timeout_seconds <= 0 or self.retry_after_cap_seconds < 0 or self.throttle_retries < 0:
            raise ValueError(f"a request policy needs a positive timeout and no negative figure: {self}")


class ThrottleRetry(Retry):
    """urllib3's Retry for 429 only, on every method, honouring Retry-After up to a cap.

    urllib3 copies a Retry on every step (`new`), so the cap and the callback travel with it.
    """

    def __init__(
        self, *args: Any, cap_seconds: float = 0.0, on_throttled: Callable[[], None] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.cap_seconds = cap_seconds
        self.on_throttled = on_throttled or _nothing

    def new(self, **kw: Any) -> ThrottleRetry:
        kw.setdefault("cap_seconds", self.cap_seconds)
        kw.setdefault("on_throttled", self.on_throttled)
        return super().new(**kw)

    def get_retry_after(self, response: BaseHTTPResponse) -> float | None:
        seconds = super().get_retry_after(response)
        return None if seconds is None else min(seconds, self.cap_seconds)

    def _is_read_error(self, err: Exception) -> bool:
        return super()._is_read_error(err) and not isinstance(err, ReadTimeoutError)

    def increment(self, method: str | None = None, url: str | None = None, *args: Any, **kwargs: Any) -> ThrottleRetry:
        response = kwargs.get("response", args[0] if args else None)
        if response is not None and response.status == TOO_MANY_REQUESTS:
            self.on_throttled()
        return super().increment(method, url, *args, **kwargs)


def _nothing() -> None:
    pass


def throttle_retry(policy: RequestPolicy, on_throttled: Callable[[], None] | None = None) -> ThrottleRetry:
    return ThrottleRetry(
        total=None,
        connect=1,  # see the module docstring
        read=1,
        other=0,  # a read timeout counts here (`_is_read_error`): never retried
        redirect=0,
        status=policy.throttle_retries,
        status_forcelist=frozenset({TOO_MANY_REQUESTS}),
        allowed_methods=None,  # every method: a 429 was not processed
        respect_retry_after_header=True,
        raise_on_status=False,  # the last 429 reaches the caller as ApiException(429)
        raise_on_redirect=False,
        backoff_factor=policy.backoff_seconds / 2,  # urllib3 doubles it from the second retry on
        backoff_max=policy.retry_after_cap_seconds,
        cap_seconds=policy.retry_after_cap_seconds,
        on_throttled=on_throttled,
    )


class BoundedRestClient(rest.RESTClientObject):  # type: ignore[misc]  # the client is untyped
    """The kubernetes client's REST layer, giving every request without a timeout the default."""

    def __init__(self, configuration: client.Configuration, *, timeout_seconds: float) -> None:
        super().__init__(configuration)
        self.timeout_seconds = timeout_seconds

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> rest.RESTResponse:
        if not _request_timeout:
            _request_timeout = default_timeout(url, self.timeout_seconds)
        return super().request(
            method, url, headers=headers, body=body, post_params=post_params, _request_timeout=_request_timeout
        )


def default_timeout(url: str, timeout_seconds: float) -> float | tuple[float, float]:
    """The timeout of a request that passed none: `timeout_seconds` in all, or for a watch,
    that long to connect and its server-side duration plus that long to read."""
    query = parse_qs(urlsplit(url).query)
    if query.get("watch", [""])[0].lower() not in {"true", "1"}:
        return timeout_seconds
    try:
        server = float(query.get("timeoutSeconds", [WATCH_SECONDS])[0])
    except ValueError:
        server = WATCH_SECONDS
    return (timeout_seconds, server + timeout_seconds)


def build_client(
    configuration: client.Configuration,
    policy: RequestPolicy,
    *,
    on_throttled: Callable[[], None] | None = None,
) -> client.ApiClient:
    """An ApiClient whose every request is bounded by `policy` and waits out 429s."""
    configuration.retries = throttle_retry(policy, on_throttled)
    if configuration.refresh_api_key_hook is not None:
        configuration.refresh_api_key_hook = spaced(configuration.refresh_api_key_hook, AUTH_REFRESH_SECONDS)
    api = PlainJsonClient(configuration)
    api.rest_client.close()
    api.rest_client = BoundedRestClient(configuration, timeout_seconds=policy.timeout_seconds)
    return api


class PlainJsonClient(client.ApiClient):  # type: ignore[misc]  # the client is untyped
    """The ApiClient, sending a body that is plain JSON as it is (see the module docstring)."""

    def sanitize_for_serialization(self, obj: Any) -> Any:
        if isinstance(obj, dict | list):
            try:
                json.dumps(obj)  # in C: plain JSON throughout, or TypeError at the first that is not
            except (TypeError, ValueError):
                pass
            else:
                return obj
        return super().sanitize_for_serialization(obj)


def spaced(
    hook: Callable[[client.Configuration], None], seconds: float, *, clock: Callable[[], float] = time.monotonic
) -> Callable[[client.Configuration], None]:
    """`hook`, run at most once every `seconds` (the first call always runs it)."""
    lock = threading.Lock()
    last: list[float | None] = [None]

    def refresh(configuration: client.Configuration) -> None:
        now = clock()
        with lock:
            if last[0] is not None and now - last[0] < seconds:
                return
            last[0] = now
        hook(configuration)

    return refresh


def custom_object_or_none(
    custom: client.CustomObjectsApi, group: str, version: str, namespace: str, plural: str, name: str
) -> dict[str, Any] | None:
    """A namespaced custom object by name, or None when the API server has none (404)."""
    try:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(group, version, namespace, plural, name)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return obj


def operator_configuration() -> client.Configuration:
    """Where the API server is and how to trust it, as the operator reaches it: in-cluster (its
    service account), else the kubeconfig. The operator's clients and the console's writes (which
    keep only its host and CA, for the viewer's own token) start from it."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    return configuration
