"""API requests counted from the API server's own audit log: by client, verb and resource.

`apiserver_request_total` has verb and resource but no user, so it cannot tell Vigil's writes
from the scheduler's or the node's. The audit log has all of them for every request: the
bench's clusters start with one (`localcluster.up(audit=True)`, Metadata level, one event per
request), and each operator runs under its own ServiceAccount token, so its requests carry
their own user.

A measurement marks the log's end (`AuditLog.mark`) when its window opens and reads what is
appended from there on (`AuditLog.follow`); the events become a `Tally`: request counts keyed by
(user, verb, resource[/subresource]), which prints as writes and reads per unit of work and as
a breakdown that shows *which* writes remain.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
READ_VERBS = frozenset({"get", "list", "watch"})


@dataclasses.dataclass(frozen=True)
class Request:
    """One API request as the audit log saw it."""

    user: str
    verb: str
    resource: str  # "pods", "pods/status", "executions", ...; "" for a non-resource URL
    namespace: str
    code: int  # the response's status code (0 while a watch is still open)

    @property
    def write(self) -> bool:
        return self.verb in WRITE_VERBS

    @property
    def read(self) -> bool:
        return self.verb in READ_VERBS


def parse(line: str) -> tuple[str, Request] | None:
    """(audit id, request) from one audit event; None for a line that is not a request event."""
    try:
        event = json.loads(line)
    except ValueError:
        return None  # the API server's last line, still being written
    if event.get("kind") != "Event" or event.get("stage") not in ("ResponseComplete", "ResponseStarted", "Panic"):
        return None
    ref: dict[str, Any] = event.get("objectRef") or {}
    resource = ref.get("resource") or ""
    if ref.get("subresource"):
        resource = f"{resource}/{ref['subresource']}"
    status = event.get("responseStatus") or {}
    return str(event.get("auditID")), Request(
        user=str((event.get("user") or {}).get("username") or ""),
        verb=str(event.get("verb") or ""),
        resource=resource,
        namespace=str(ref.get("namespace") or ""),
        code=int(status.get("code") or 0),
    )


class AuditLog:
    """The audit log file of one API server, read from an offset."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """Where the log ends now: the start of a measurement window."""
        return self.path.stat().st_size if self.path.exists() else 0

    def follow(self, offset: int) -> Cursor:
        return Cursor(self.path, offset)


class Cursor:
    """Reads an audit log onward from an offset, a complete line at a time, each request once
    (a watch logs when its response starts and again when it ends)."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path = path
        self.offset = offset
        self._seen: set[str] = set()

    def take(self) -> list[Request]:
        """The requests logged since the last call."""
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self.offset += end
        out = []
        for raw in data[:end].splitlines():
            parsed = parse(raw.decode("utf-8", errors="replace"))
            if parsed is not None and parsed[0] not in self._seen:
                self._seen.add(parsed[0])
                out.append(parsed[1])
        return out


@dataclasses.dataclass
class Tally:
    """Request counts by (user, verb, resource)."""

    counts: collections.Counter[tuple[str, str, str]] = dataclasses.field(default_factory=collections.Counter)

    def add(self, requests: Iterable[Request], keep: Callable[[Request], bool] = lambda r: True) -> int:
        """Count the requests `keep` selects; how many it did."""
        added = 0
        for r in requests:
            if keep(r):
                self.counts[(r.user, r.verb, r.resource)] += 1
                added += 1
        return added

    def total(self, *, verbs: frozenset[str], user: str | None = None, resources: frozenset[str] | None = None) -> int:
        """Requests with one of `verbs` (by `user`, to one of `resources`, when given)."""
        return sum(n for (u, verb, resource), n in self.counts.items()
                   if verb in verbs and (user is None or u == user) and (resources is None or resource in resources))  # fmt: skip

    def writes(self, user: str | None = None, *, resources: frozenset[str] | None = None) -> int:
        return self.total(verbs=WRITE_VERBS, user=user, resources=resources)

    def reads(self, user: str | None = None) -> int:
        return self.total(verbs=READ_VERBS, user=user)

    def users(self) -> list[str]:
        return sorted({u for u, _, _ in self.counts})

    def breakdown(self, *, per: int, user: str | None = None, verbs: frozenset[str] = WRITE_VERBS) -> list[str]:
        """Lines `  1.00  create executions` per unit of work, most frequent first."""
        rows: collections.Counter[tuple[str, str]] = collections.Counter()
        for (u, verb, resource), n in self.counts.items():
            if verb in verbs and (user is None or u == user):
                rows[(verb, resource or "(non-resource)")] += n
        return [f"{n / max(per, 1):6.2f}  {verb} {resource}" for (verb, resource), n in rows.most_common()]


def short_user(user: str) -> str:
    """`system:serviceaccount:ns:vigil` -> `sa ns:vigil`; `system:kube-scheduler` -> `kube-scheduler`."""
    if user.startswith("system:serviceaccount:"):
        return "sa " + user.removeprefix("system:serviceaccount:")
    return user.removeprefix("system:")
