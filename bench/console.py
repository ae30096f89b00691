"""The console's Jobs page with 1,000 jobs in a namespace: `python -m bench.console [--jobs N]`.

The console is served as the operator serves it (`ApiServer(...).serve`, uvicorn and the
application with its executor), from in-memory sources: the ScheduledJobs are shaped as the
operator's status writer leaves them (next run, last success, two conditions) and the reviews
answer at once, so the figures are the console's own cost, not the API server's. A browser's
request is made over HTTP (`Accept-Encoding: gzip`, the login cookie) and timed from send to
last byte: the first render, then the median of `ROUNDS` more. Bytes transferred are the
answer's body as sent (gzipped) and its headers; the page's two static files are counted once,
as a first visit fetches them. Targets (issue 39): first render at most 300 ms, at most 200 KiB.
Prints figures; never fails for being slow.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from collections.abc import Sequence
from typing import Any

from vigil.api import ApiServer, Guard
from vigil.api.console import ConsoleSources
from vigil.core.access import Access, User

DEFAULT_JOBS = 1000
ROUNDS = 20
NAMESPACE = "team-a"
TOKEN = "bench-token"
TARGET_MS, TARGET_KIB = 300, 200


class Everyone:
    """Reviews that accept the one token and allow everything: no API server in the figures."""

    def authenticate(self, token: str) -> User | None:
        return User("bench") if token == TOKEN else None

    def allowed(self, user: User, access: Access) -> bool:
        return True


def job(i: int) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NAMESPACE, "name": f"reconcile-{i:05d}", "uid": f"uid-{i}"},
        "spec": {"cron": f"{i % 60} 3 * * *", "timezone": "Europe/Paris"},
        "status": {
            "nextRun": "2026-12-07T02:00:00Z",
            "lastSuccessfulTime": "2026-12-06T02:00:07Z",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Scheduled"},
                {"type": "Overdue", "status": "False", "reason": "OnTime"},
            ],
        },
    }


class Jobs:
    def __init__(self, n: int) -> None:
        self._jobs = [job(i) for i in range(n)]

    def namespaces(self) -> Sequence[str]:
        return [NAMESPACE]

    def jobs(self, namespace: str) -> Sequence[dict[str, Any]]:
        return self._jobs

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def executions(self, namespace: str, job_uid: str) -> Sequence[dict[str, Any]]:
        return []

    def workflows(self, namespace: str) -> Sequence[dict[str, Any]]:
        return []

    def workflow(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def taskqueues(self, namespace: str) -> Sequence[dict[str, Any]]:
        return []


def fetch(base: str, path: str) -> tuple[float, int]:
    """(seconds from send to last byte, bytes of body and headers as sent)."""
    request = urllib.request.Request(
        base + path, headers={"Accept-Encoding": "gzip", "Cookie": f"vigil-console={TOKEN}"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as answer:
        body = answer.read()
        head = sum(len(k) + len(v) + 4 for k, v in answer.getheaders())
    return time.perf_counter() - started, len(body) + head


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=f"jobs in the namespace (default {DEFAULT_JOBS})")
    args = parser.parse_args(argv)
    reviews = Everyone()
    api = ApiServer(
        leader=lambda: None, find_execution=lambda _: None, timeline=lambda _: [],
        guard=Guard(authenticator=reviews, authorizer=reviews, leader_lease=Access(verb="get", group="", resource="x")),
        console=ConsoleSources(reads=Jobs(args.jobs), writes=None),
    )  # fmt: skip
    serving = api.serve(0)
    try:
        base = f"http://127.0.0.1:{serving.server_address[1]}"
        first, page_bytes = fetch(base, "/console/jobs")
        static = sum(fetch(base, f"/console/static/{name}")[1] for name in ("htmx.min.js", "console.css"))
        rest = [fetch(base, "/console/jobs")[0] for _ in range(ROUNDS)]
    finally:
        serving.shutdown()
        serving.server_close()
    print(f"## console: the Jobs page with {args.jobs} jobs in one namespace")
    print(f"  first render            {first * 1000:7.1f} ms   (target <= {TARGET_MS} ms)")
    print(f"  median of {ROUNDS} more       {statistics.median(rest) * 1000:7.1f} ms")
    print(f"  page transferred        {page_bytes / 1024:7.1f} KiB  (gzip)")
    print(f"  with its static files   {(page_bytes + static) / 1024:7.1f} KiB  (target <= {TARGET_KIB} KiB, a first visit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
