"""A seeded fault layer for the Kubernetes client, at its narrowest seam: the urllib3 pool manager
under the kubernetes client's REST layer (`api.rest_client.pool_manager`).

Everything of Vigil's own above it runs as in the operator: `vigil.kube.kits.apiclient.build_client`'s
client (its REST layer's timeouts, the plain-JSON bodies), the kubernetes client's
deserialisation and ApiException mapping, its watch parser, and the adapters on top (the
informers of vigil.kube.kits.informer, retry_on_conflict of vigil.kube.kits.conflicts). Beneath the seam
sits `FakeApiServer`, a small in-memory API server for one collection of custom objects: paged
LIST (answered whole), WATCH from a resourceVersion (events since it, or `410 Gone` once that
version is compacted away), GET of one object, and PUT with a resourceVersion precondition
(`409 Conflict` when stale). It changes between requests by a script (`pending`), so the world
moves while the client is failing.

`KubeFaults` decides, from its seed, per request: a read timeout (urllib3's ReadTimeoutError, as
a silent server gives after the request's timeout), `500`/`503`, `429` (what the caller sees
once ThrottleRetry has waited out its retries: this seam is below that retry, so it is not
exercised here), `409` on a write, `410 Gone` on a watch (an ERROR event, as the API server sends
it) and a watch whose connection breaks; and for writes a timeout *after* the server applied the
write (the reply lost). The seed is printed when the plan is made; `injected` lists what was done.

What this cannot show without a real API server: the API server's own behaviour under a restart
(its watch cache, bookmarks, the real compaction of etcd), and ThrottleRetry's waits. Those are
issue #40's part 3, on the local control plane.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import random
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qs, urlparse

import urllib3
from urllib3.exceptions import ProtocolError, ReadTimeoutError


class KubeFault(StrEnum):
    TIMEOUT = "timeout"
    ERROR_500 = "500"
    UNAVAILABLE_503 = "503"
    THROTTLED_429 = "429"
    CONFLICT_409 = "409"  # writes only
    GONE_410 = "410"  # watches only: an ERROR event with code 410
    CUT = "cut"  # watches only: the connection breaks before any event
    REPLY_LOST = "reply_lost"  # writes only: applied, then the read times out


READS = (KubeFault.TIMEOUT, KubeFault.ERROR_500, KubeFault.UNAVAILABLE_503, KubeFault.THROTTLED_429)
WATCHES = (*READS, KubeFault.GONE_410, KubeFault.CUT)
WRITES = (*READS, KubeFault.CONFLICT_409, KubeFault.REPLY_LOST)


@dataclasses.dataclass
class KubeFaults:
    """The plan: each request gets a fault with probability `rate` (one fitting its kind: a read,
    a watch or a write), at most `budget` in all."""

    seed: int
    rate: float = 0.3
    budget: int = 20
    allowed: frozenset[KubeFault] = frozenset(KubeFault)
    injected: list[tuple[str, KubeFault]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        print(f"KubeFaults seed={self.seed} rate={self.rate} budget={self.budget}")

    def decide(self, kind: str, choices: tuple[KubeFault, ...]) -> KubeFault | None:
        fitting = [f for f in choices if f in self.allowed]
        if not fitting or len(self.injected) >= self.budget or self._random.random() >= self.rate:
            return None
        fault = self._random.choice(fitting)
        self.injected.append((kind, fault))
        return fault


def response(status: int, body: bytes | Iterator[bytes], reason: str = "") -> urllib3.HTTPResponse:
    chunks = iter([body]) if isinstance(body, bytes) else body
    return urllib3.HTTPResponse(
        body=_Chunks(chunks), status=status, reason=reason, preload_content=False,
        headers={"Content-Type": "application/json"},
    )  # fmt: skip


class _Chunks(io.RawIOBase):
    """A response body read from an iterator of chunks (an exception from it breaks the read),
    closed at its end as a socket's is (urllib3's `stream` reads until the body is closed)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            self._left = next(self._chunks, b"")
            if not self._left:
                self.close()
                return 0
        size = min(len(buffer), len(self._left))
        buffer[:size], self._left = self._left[:size], self._left[size:]
        return size


def status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                       "reason": reason, "message": message}).encode()  # fmt: skip


@dataclasses.dataclass
class FakeApiServer:
    """One collection of namespaced custom objects, in memory (see the module docstring)."""

    objects: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    events: list[tuple[int, str, dict[str, Any]]] = dataclasses.field(default_factory=list)
    version: int = 1
    compacted: int = 0  # watches from a version below this get 410 Gone
    pending: list[Callable[[FakeApiServer], None]] = dataclasses.field(default_factory=list)
    requests: int = 0
    on_idle: Callable[[], None] | None = None  # called when a watch is up to date and the script done
    _told_all: int = -1  # the version a watch last brought its watcher up to, with the script done

    # -- the world changing ----------------------------------------------------------------------

    def put(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj = {"apiVersion": "vigil.dev/v1alpha1", "kind": "ScheduledJob",
               "metadata": {"namespace": namespace, "name": name, "resourceVersion": str(self.version)},
               "spec": spec, **({"status": self.objects[(namespace, name)].get("status", {})}
                                if (namespace, name) in self.objects else {})}  # fmt: skip
        kind = "MODIFIED" if (namespace, name) in self.objects else "ADDED"
        self.objects[(namespace, name)] = obj
        self.events.append((self.version, kind, copy.deepcopy(obj)))
        return obj

    def delete(self, namespace: str, name: str) -> None:
        obj = self.objects.pop((namespace, name), None)
        if obj is not None:
            self.version += 1
            gone = copy.deepcopy(obj)
            gone["metadata"]["resourceVersion"] = str(self.version)
            self.events.append((self.version, "DELETED", gone))

    def compact(self) -> None:
        """Forget every event so far: a watch from any version before now gets 410."""
        self.compacted = self.version
        self.events.clear()

    # -- answering -------------------------------------------------------------------------------

    def answer(self, method: str, url: str, body: Any) -> urllib3.HTTPResponse:
        self.requests += 1
        if self.pending:
            self.pending.pop(0)(self)
        parsed = urlparse(url)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        parts = parsed.path.strip("/").split("/")
        if method == "GET" and query.get("watch") == "true":
            return self._watch(int(query.get("resourceVersion") or 0))
        if method == "GET" and parts[-1] == "scheduledjobs":
            items = [copy.deepcopy(o) for _, o in sorted(self.objects.items())]
            meta = {"resourceVersion": str(self.version)}
            return response(200, json.dumps({"kind": "List", "metadata": meta, "items": items}).encode())
        namespace, name = parts[parts.index("namespaces") + 1], parts[parts.index("scheduledjobs") + 1]
        current = self.objects.get((namespace, name))
        if current is None:
            return response(404, status_body(404, "NotFound", f"{name} not found"), "Not Found")
        if method == "GET":
            return response(200, json.dumps(current).encode())
        return self._replace(current, json.loads(body) if isinstance(body, str | bytes) else body)

    def _replace(self, current: dict[str, Any], new: dict[str, Any]) -> urllib3.HTTPResponse:
        wanted = (new.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            return response(409, status_body(409, "Conflict", "the object has been modified"), "Conflict")
        meta = current["metadata"]
        self.version += 1
        updated = {**current, "status": copy.deepcopy(new.get("status") or {}),
                   "metadata": {**meta, "resourceVersion": str(self.version)}}  # fmt: skip
        self.objects[(meta["namespace"], meta["name"])] = updated
        self.events.append((self.version, "MODIFIED", copy.deepcopy(updated)))
        return response(200, json.dumps(updated).encode())

    def _watch(self, since: int) -> urllib3.HTTPResponse:
        if since < self.compacted:
            line = {"type": "ERROR", "object": status_body_dict(410, "Expired", f"too old resource version: {since}")}
            return response(200, (json.dumps(line) + "\n").encode())
        lines = [json.dumps({"type": kind, "object": obj}) + "\n" for at, kind, obj in self.events if at > since]
        if not self.pending and self.on_idle is not None:
            if self._told_all == self.version:  # the last watch brought the watcher up to date
                self.on_idle()  # nothing more will happen: the test stops the watcher
                raise ProtocolError("the fake API server is done")
            self._told_all = self.version
        return response(200, "".join(lines).encode())


def status_body_dict(code: int, reason: str, message: str) -> dict[str, Any]:
    return dict(json.loads(status_body(code, reason, message)))


class FaultyPool:
    """A urllib3 PoolManager stand-in: each request goes through `plan`, then to `server`."""

    def __init__(self, server: FakeApiServer, plan: KubeFaults) -> None:
        self.server = server
        self.plan = plan

    def request(self, method: str, url: str, body: Any = None, **_: Any) -> urllib3.HTTPResponse:
        watching = "watch=true" in url
        kind = f"{method} {'watch' if watching else urlparse(url).path.rsplit('/', 1)[-1]}"
        fault = self.plan.decide(kind, WATCHES if watching else WRITES if method in ("PUT", "PATCH") else READS)
        if fault is KubeFault.TIMEOUT:
            raise ReadTimeoutError(None, url, "injected: read timed out")  # type: ignore[arg-type]  # urllib3 types the pool, which a fake request has not
        if fault in (KubeFault.ERROR_500, KubeFault.UNAVAILABLE_503, KubeFault.THROTTLED_429, KubeFault.CONFLICT_409):
            code = int(fault)
            return response(code, status_body(code, "Injected", f"injected {code}"), f"Injected {code}")
        if fault is KubeFault.GONE_410:
            line = {"type": "ERROR", "object": status_body_dict(410, "Expired", "injected: too old resource version")}
            return response(200, (json.dumps(line) + "\n").encode())
        if fault is KubeFault.CUT:
            return response(200, _cut())
        answer = self.server.answer(method, url, body)
        if fault is KubeFault.REPLY_LOST:
            raise ReadTimeoutError(None, url, "injected: read timed out after the write was applied")  # type: ignore[arg-type]  # as above: no pool
        return answer

    def clear(self) -> None:
        pass


def _cut() -> Iterator[bytes]:
    """A watch whose connection breaks before its first event."""
    yield from ()
    raise ProtocolError("injected: connection broken mid-watch")
