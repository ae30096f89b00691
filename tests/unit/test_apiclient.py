"""The operator's Kubernetes client (kube/kits/apiclient.py) against a real HTTP server on loopback.

Covers: a plain JSON body is sent as it is (not walked), a model object as JSON; the loaded
credentials are re-applied at most once a second; a 429 is waited out — what Retry-After says,
capped — and retried for every method,
each one counted; after the last retry the caller gets ApiException(429); a request the server
never answers gives up after the default timeout, and is not sent again; a call's own timeout
wins over the default; a watch's default allows its server-side duration.

The server is a plain `http.server` in a thread standing in for the API server's answers (the
real API server's throttling, through API Priority and Fairness, is in
tests/integration/test_sick_network.py).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.kube.kits.apiclient import (
    AUTH_REFRESH_SECONDS,
    PlainJsonClient,
    RequestPolicy,
    build_client,
    default_timeout,
    spaced,
)

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}
POLICY = RequestPolicy(timeout_seconds=5, retry_after_cap_seconds=1)
#: Seconds of slack on a measured wait: this machine is shared and a thread can be late.
SLACK = 1.0


class Script:
    """What the server answers: `throttle` 429s (with `retry_after`), then 200; or nothing."""

    def __init__(self) -> None:
        self.throttle = 0
        self.retry_after: str | None = "1"
        self.hang = False
        self.arrivals: list[tuple[str, float]] = []
        self.bodies: list[object] = []
        self.released = threading.Event()


def handler_for(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length)
            script.bodies.append(json.loads(data) if data else None)
            script.arrivals.append((self.command, time.monotonic()))
            if script.hang:
                script.released.wait(30)  # forwards nothing: the client must give up by itself
                return
            if script.throttle:
                script.throttle -= 1
                self._send(429, {"kind": "Status", "code": 429, "reason": "TooManyRequests"}, script.retry_after)
                return
            self._send(200, CONFIG_MAP, None)

        def _send(self, status: int, body: object, retry_after: str | None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def server(script: Script) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(script))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    script.released.set()
    httpd.shutdown()
    httpd.server_close()


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def core(host: str, policy: RequestPolicy, counter: Counter) -> client.CoreV1Api:
    configuration = client.Configuration(host=host)
    return client.CoreV1Api(build_client(configuration, policy, on_throttled=counter))


def gaps(script: Script) -> list[float]:
    times = [at for _, at in script.arrivals]
    return [b - a for a, b in itertools.pairwise(times)]


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_a_429_is_waited_out_and_retried_for_every_method(server: str, script: Script, method: str) -> None:
    script.throttle, script.retry_after = 2, "1"
    throttled = Counter()
    api = core(server, RequestPolicy(timeout_seconds=5, retry_after_cap_seconds=0.2, throttle_retries=3), throttled)
    calls = {
        "GET": lambda: api.read_namespaced_config_map("c", "ns"),
        "POST": lambda: api.create_namespaced_config_map("ns", CONFIG_MAP),
        "PUT": lambda: api.replace_namespaced_config_map("c", "ns", CONFIG_MAP),
        "PATCH": lambda: api.patch_namespaced_config_map("c", "ns", {"data": {"a": "b"}}),
        "DELETE": lambda: api.delete_namespaced_config_map("c", "ns"),
    }
    calls[method]()
    assert [m for m, _ in script.arrivals] == [method] * 3
    assert throttled.count == 2
    assert all(0.2 <= gap < 0.2 + SLACK for gap in gaps(script)), gaps(script)  # capped Retry-After: 1


def test_the_wait_is_what_retry_after_says(server: str, script: Script) -> None:
    script.throttle, script.retry_after = 1, "1"
    api = core(server, RequestPolicy(timeout_seconds=5, retry_after_cap_seconds=5), Counter())
    api.read_namespaced_config_map("c", "ns")
    [gap] = gaps(script)
    assert 1.0 <= gap < 1.0 + SLACK


def test_a_long_retry_after_is_capped(server: str, script: Script) -> None:
    script.throttle, script.retry_after = 1, "60"
    api = core(server, RequestPolicy(timeout_seconds=5, retry_after_cap_seconds=0.5, throttle_retries=3), Counter())
    api.read_namespaced_config_map("c", "ns")
    [gap] = gaps(script)
    assert 0.5 <= gap < 0.5 + SLACK


def test_a_429_without_retry_after_still_waits_a_little(server: str, script: Script) -> None:
    script.throttle, script.retry_after = 2, None
    api = core(server, RequestPolicy(timeout_seconds=5, retry_after_cap_seconds=5, backoff_seconds=0.25), Counter())
    api.read_namespaced_config_map("c", "ns")
    assert len(script.arrivals) == 3
    assert gaps(script)[1] >= 0.25  # the second wait backs off


def test_when_the_retries_are_spent_the_caller_gets_the_429(server: str, script: Script) -> None:
    script.throttle, script.retry_after = 100, "0"
    throttled = Counter()
    api = core(server, RequestPolicy(timeout_seconds=5, retry_after_cap_seconds=1, throttle_retries=2), throttled)
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_config_map("ns", CONFIG_MAP)
    assert caught.value.status == 429
    assert len(script.arrivals) == 3 and throttled.count == 3  # the first answer and two retries


def test_a_request_never_answered_gives_up_after_the_default_timeout_and_is_not_resent(
    server: str, script: Script
) -> None:
    script.hang = True
    api = core(server, RequestPolicy(timeout_seconds=0.5, retry_after_cap_seconds=1), Counter())
    started = time.monotonic()
    with pytest.raises(Exception, match="timed out"):
        api.read_namespaced_config_map("c", "ns")
    took = time.monotonic() - started
    assert 0.5 <= took < 0.5 + SLACK
    assert len(script.arrivals) == 1


def test_a_call_that_passes_its_own_timeout_keeps_it(server: str, script: Script) -> None:
    script.hang = True
    api = core(server, RequestPolicy(timeout_seconds=30, retry_after_cap_seconds=1), Counter())
    started = time.monotonic()
    with pytest.raises(Exception, match="timed out"):
        api.read_namespaced_config_map("c", "ns", _request_timeout=0.3)
    assert time.monotonic() - started < 0.3 + SLACK


def test_a_watch_may_last_its_server_side_duration() -> None:
    assert default_timeout("https://k/api/v1/pods?limit=5", 2.0) == 2.0
    assert default_timeout("https://k/api/v1/pods?watch=true&timeoutSeconds=60", 2.0) == (2.0, 62.0)
    assert default_timeout("https://k/api/v1/pods?watch=1", 2.0) == (2.0, 302.0)

def test_a_plain_json_body_is_sent_as_it_is_and_a_model_object_or_a_datetime_still_as_json(
    server: str, script: Script
) -> None:
    api = PlainJsonClient(client.Configuration(host=server))
    plain = {"metadata": {"name": "c"}, "spec": {"n": [1, 2.5, None, True, {"a": ["b"]}]}}
    assert api.sanitize_for_serialization(plain) is plain  # not walked, not copied
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"a": "b"}},
        "data": {"k": "v"},
    }
    stamped = {"at": datetime(2026, 12, 4, 12, 0, tzinfo=UTC)}
    assert api.sanitize_for_serialization(stamped) == {"at": "2026-12-04T12:00:00+00:00"}
    core_api = client.CoreV1Api(build_client(client.Configuration(host=server), POLICY))
    core_api.create_namespaced_config_map("ns", body)
    core_api.create_namespaced_config_map(
        "ns", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="m"), data={"k": "v"})
    )
    assert script.bodies == [body, {"metadata": {"name": "m"}, "data": {"k": "v"}}]  # as JSON, both


def test_the_loaded_credentials_are_applied_again_at_most_once_a_second(server: str) -> None:
    applied = Counter()
    configuration = client.Configuration(host=server)
    configuration.api_key = {"BearerToken": "t"}
    configuration.refresh_api_key_hook = lambda _: applied()
    core_api = client.CoreV1Api(build_client(configuration, POLICY))
    for _ in range(5):
        core_api.read_namespaced_config_map("c", "ns")
    assert 1 <= applied.count <= 2  # once, or twice if a second passed between the five reads

    now = [0.0]
    ran = Counter()
    hook = spaced(lambda _: ran(), AUTH_REFRESH_SECONDS, clock=lambda: now[0])
    for at in (0.0, 0.5, 0.99, 1.0, 1.5, 2.2):
        now[0] = at
        hook(configuration)
    assert ran.count == 3  # at 0, 1.0 and 2.2
