"""The operator's HTTP API as one ASGI application: request ids, deadlines, a bounded executor.

The routes (vigil.api.router and the route modules under it) are plain functions of (method, path, query,
token, body) that block: they ask the API server's reviews, the history database and the queue
store. This application is what stands between them and the network:

* every request gets a request id, returned as ``X-Request-Id`` and written on every log line
  about it (`REQUEST_ID`); logs name the method, the route (an approval token redacted), the
  status and the time, never the body or the query string;
* a body is read only up to ``max_request_bytes`` (413 from its Content-Length, or as soon as more
  arrives), and only within the request's deadline;
* the route runs in a bounded executor: ``workers`` threads, at most ``workers + queued`` calls
  admitted at once; a request whose deadline passes is
  answered 503 at once and its handler is freed — a call not yet started is dropped, one that is
  running finishes on its thread and only then gives its slot back, so slots never exceed the
  bound however many callers give up; past ``workers + queued`` a request is 503 at once;
* anything a route raises is a 500 problem, logged with the request id and the exception's type
  and place, not its message (which can quote what was sent);
* every 4xx and 5xx is a problem (vigil.api.problems); 401 carries ``WWW-Authenticate``, 429 and
  503 ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from vigil.api.exchange import EXCHANGE, KEPT_HEADERS, Exchange
from vigil.api.problems import Answer, problem
from vigil.api.transport import RETRY_AFTER_SECONDS, Limits, bearer_token
from vigil.logs import REQUEST_ID

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: ``route(method, path, query, token, body)``: the answer, computed on an executor thread.
Route = Callable[[str, str, str, "str | None", bytes], Answer]

#: Seconds a busy server asks a client to wait before trying again.
BUSY_RETRY_SECONDS = 1


class _TooLarge(Exception):
    pass


class Application:
    """The ASGI application around `route`, within `limits`; `redact(path)` is the path as logs
    may show it."""

    def __init__(self, route: Route, limits: Limits, *, redact: Callable[[str], str] = lambda path: path) -> None:
        self._route = route
        self._limits = limits
        self._redact = redact
        self._executor = concurrent.futures.ThreadPoolExecutor(limits.workers, thread_name_prefix="http")
        self._slots = threading.BoundedSemaphore(limits.workers + limits.queued)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request_id = uuid.uuid4().hex[:16]
        REQUEST_ID.set(request_id)
        started = time.monotonic()
        method, path = str(scope["method"]), str(scope["path"])
        close = False
        exchange = _exchange(scope)
        EXCHANGE.set(exchange)
        try:
            async with asyncio.timeout(self._limits.deadline_seconds):
                body = await self._body(scope, receive)
                answer = await self._run(method, path, scope, body)
        except _Gone:
            return  # the client left: no one to answer
        except _TooLarge:
            answer, close = problem(413, f"a body is at most {self._limits.max_request_bytes} bytes", "BodyTooLarge"), True
        except TimeoutError:
            answer, close = problem(
                503, f"the request was not answered within {self._limits.deadline_seconds:g} s; try again",
                "DeadlineExceeded",
            ), True  # fmt: skip
        except _Busy:
            answer = problem(503, "every worker is busy; try again", "Busy")
        except Exception as error:
            where = traceback.extract_tb(error.__traceback__)[-1]
            log.error(
                "HTTP %s %s [request %s] failed: %s at %s:%d", method, self._redact(path), request_id,
                type(error).__name__, where.filename.rsplit("/", 1)[-1], where.lineno,
            )  # fmt: skip
            answer = problem(500, f"internal error; the operator's log has request {request_id}", "InternalError")
        await _send(send, answer, request_id=request_id, close=close, extra=exchange.answer_headers)
        log.debug(
            "HTTP %s %s [request %s] %d in %.3fs", method, self._redact(path), request_id, answer[0],
            time.monotonic() - started,
        )  # fmt: skip

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        """The request's body, refused (_TooLarge) past the limit before it is all read."""
        limit = self._limits.max_request_bytes
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                raise _TooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _run(self, method: str, path: str, scope: Scope, body: bytes) -> Answer:
        """The route's answer, from an executor thread admitted within the deadline."""
        token = bearer_token(_header(scope, b"authorization"))
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        loop = asyncio.get_running_loop()
        if not self._slots.acquire(blocking=False):
            raise _Busy
        context = contextvars.copy_context()
        try:
            future = self._executor.submit(context.run, self._route, method, path, query, token, body)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _: self._slots.release())
        return await asyncio.wrap_future(future, loop=loop)

    def close(self) -> None:
        """Let running calls finish; drop those not started."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class _Busy(Exception):
    pass


class _Gone(Exception):
    pass


def _exchange(scope: Scope) -> Exchange:
    """The request's kept headers (vigil.api.exchange) and whether it came over TLS."""
    headers: dict[str, str] = {}
    for key, value in scope["headers"]:
        name = bytes(key).decode("latin-1").lower()
        if name in KEPT_HEADERS and name not in headers:
            headers[name] = bytes(value).decode("latin-1")
    return Exchange(headers=headers, tls=scope.get("scheme") == "https")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def _send(
    send: Send, answer: Answer, *, request_id: str, close: bool, extra: list[tuple[str, str]] | None = None
) -> None:
    status, kind, body = answer
    headers = [
        (b"Content-Type", kind.encode()),
        (b"Content-Length", str(len(body)).encode()),
        (b"X-Request-Id", request_id.encode()),
    ]
    headers.extend((name.encode("latin-1"), value.encode("latin-1")) for name, value in extra or ())
    if status == 401:
        headers.append((b"WWW-Authenticate", b'Bearer realm="vigil"'))
    if status == 429:
        headers.append((b"Retry-After", str(RETRY_AFTER_SECONDS).encode()))
    if status == 503:
        headers.append((b"Retry-After", str(BUSY_RETRY_SECONDS).encode()))
    if close:
        headers.append((b"Connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


