"""The HTTP API's two figures (issue 37): an execution's timeline at 200 requests/s, and the operator's RSS serving it.

1. **timeline** (needs no cluster): `GET /executions/{id}` of executions whose attempts are in a
   PostgreSQL history database (Debian's server, PostgreSQL's default durability), sent at
   `rate` requests per second for `seconds` over `connections` keep-alive connections to the
   real server (ApiServer.serve: uvicorn and the ASGI application). Requests leave on a fixed
   schedule, and each one's latency runs from the time it was due to leave, so a slow answer
   delays the figure of the requests behind it instead of hiding them (no coordinated
   omission). The reference is the history query's own time: `SqlHistory.timeline` called
   directly for the same ids, one after another, in the same run. The requests come from a
   process of their own, so the load generator does not share the server's interpreter. The target is the p99
   beside it: at most 20 ms more. The caller's reviews are the operator's caches over a
   stand-in API server that allows (in steady state every review is a cache hit; the first
   of each TTL is an API server round trip, which this figure leaves out); the namespaces of
   each id come from memory, as the leader's Execution cache gives them.
2. **rss** (a local control plane): the `rss` section's load (ScheduledJobs, retained
   Executions, waiting Workflows; bench/rss.py) and the operator's VmRSS, first with the HTTP
   API off (as the `rss` section runs it: the reference), then with the API and the probes
   listening and a ServiceAccount reading the retained Executions' timelines by id at `rate`
   requests per second through the whole sampling. The target: at most 10 MiB more.

`python -m bench api` runs both; `python -m bench.api --help` takes the sizes, and a tiny
parameterisation (`--api-seconds 2 --api-rate 20 --api-executions 20 --no-rss`) is the smoke test.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import multiprocessing
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.reporting import Row, percentile, table
from tests.contract.postgres import DURABLE_SETTINGS, PostgresServer
from vigil.api.guards import Guard
from vigil.api.router import ApiServer
from vigil.core.access import Access, CachedAuthenticator, CachedAuthorizer, TtlCache, User
from vigil.core.history import AttemptRecord, AttemptState
from vigil.history.store import SqlHistory

DEFAULT_RATE = 200.0  # requests per second: the figure
DEFAULT_SECONDS = 30.0
DEFAULT_CONNECTIONS = 8
DEFAULT_EXECUTIONS = 1000
ATTEMPTS = 3  # history rows per execution: a retried one
TARGET_BEYOND_MS = 20.0
RSS_TARGET_MIB = 10.0
NAMESPACE = "bench-api"
TOKEN = "bench-reader"
FIRST = datetime(2026, 5, 1, tzinfo=UTC)


class Allow:
    """The API server's TokenReview and SubjectAccessReview, stood in for: one reader, allowed."""

    def authenticate(self, token: str) -> User | None:
        return User(f"system:serviceaccount:{NAMESPACE}:reader") if token == TOKEN else None

    def allowed(self, user: User, access: Access) -> bool:
        return True


@dataclasses.dataclass
class Latencies:
    ms: list[float]  # each answered request's, from when it was due to leave
    expected: int
    errors: int

    def p(self, q: float) -> float:
        return percentile(self.ms, q) if self.ms else float("nan")


def seed(history: SqlHistory, executions: int) -> list[str]:
    """`executions` executions with ATTEMPTS attempts each in the history; their ids."""
    ids = [f"bench-api-{i:06d}" for i in range(executions)]
    rows = [
        AttemptRecord(
            execution_id=eid, attempt=a + 1, namespace=NAMESPACE, job=f"job-{i % 100:03d}", job_uid=f"uid-{i % 100:03d}",
            priority="normal", state=AttemptState.SUCCEEDED if a == ATTEMPTS - 1 else AttemptState.FAILED,
            scheduled_for=FIRST + timedelta(minutes=i), started_at=FIRST + timedelta(minutes=i, seconds=a),
            finished_at=FIRST + timedelta(minutes=i, seconds=a + 1), pod=f"{eid}-{a + 1}",
            reason="" if a == ATTEMPTS - 1 else "PodFailed", error="" if a == ATTEMPTS - 1 else "exit code 1",
        )
        for i, eid in enumerate(ids)
        for a in range(ATTEMPTS)
    ]  # fmt: skip
    for start in range(0, len(rows), 500):
        history.write(rows[start : start + 500])
    return ids


def query_times(history: SqlHistory, ids: list[str], count: int) -> list[float]:
    """The history query's own time, ms, for `count` ids in turn."""
    times = []
    for i in range(count):
        began = time.perf_counter()
        history.timeline(ids[i % len(ids)])
        times.append((time.perf_counter() - began) * 1000)
    return times


def drive(port: int, paths: list[str], *, rate: float, seconds: float, connections: int, token: str = TOKEN) -> Latencies:
    """GET `paths` in turn at `rate` per second for `seconds`, over `connections` keep-alive
    connections, each on its own fixed schedule (see the module docstring)."""
    total = max(1, int(rate * seconds))
    interval = connections / rate
    start = time.perf_counter() + 0.2
    lock = threading.Lock()
    ms: list[float] = []
    errors = [0]

    def worker(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Authorization": f"Bearer {token}"}
        n = 0
        while (i := k + n * connections) < total:
            due = start + n * interval + k * interval / connections
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)  # a load generator's pacing, not synchronisation
            try:
                conn.request("GET", paths[i % len(paths)], headers=headers)
                answer = conn.getresponse()
                answer.read()
                ok = answer.status == 200
            except (OSError, http.client.HTTPException):
                conn.close()
                ok = False
            took = (time.perf_counter() - due) * 1000
            with lock:
                if ok:
                    ms.append(took)
                else:
                    errors[0] += 1
            n += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,), name=f"bench-api-{k}") for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Latencies(ms, total, errors[0])


def timeline(*, rate: float, seconds: float, connections: int, executions: int) -> list[Row]:
    """Section 1 (see the module docstring): its summary rows."""
    print(f"\n## api timeline: GET /executions/{{id}} at {rate:.0f} requests/s for {seconds:.0f}s over "
          f"{connections} keep-alive connections, {executions} executions x {ATTEMPTS} attempts in PostgreSQL")  # fmt: skip
    server = PostgresServer.create(settings=DURABLE_SETTINGS)
    history = SqlHistory(server.database_dsn(server.create_database().rsplit("/", 1)[1]), retention_days=3650)
    try:
        history.migrate()
        ids = seed(history, executions)
        objects: Mapping[str, dict[str, Any]] = {
            eid: {"metadata": {"namespace": NAMESPACE, "name": eid}, "spec": {"executionId": eid},
                  "status": {"phase": "Succeeded"}}
            for eid in ids
        }  # fmt: skip
        reviews = Allow()
        api = ApiServer(
            leader=lambda: None,
            find_execution=objects.get,
            get_execution=lambda namespace, eid: objects.get(eid),
            execution_namespaces=lambda eid: [NAMESPACE] if eid in objects else [],
            timeline=history.timeline,
            guard=Guard(
                authenticator=CachedAuthenticator(reviews, TtlCache(ttl_seconds=10, entries=4096, ticks=time.monotonic)),
                authorizer=CachedAuthorizer(reviews, TtlCache(ttl_seconds=10, entries=4096, ticks=time.monotonic)),
                leader_lease=Access("get", "coordination.k8s.io", "leases"),
            ),
        )
        query = query_times(history, ids, max(1, int(rate * seconds)))
        serving = api.serve(0)
        try:
            # the load from a process of its own: in this one it would share the server's GIL
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                got = pool.apply(drive, (serving.server_address[1], [f"/executions/{eid}" for eid in ids]),
                                 {"rate": rate, "seconds": seconds, "connections": connections})  # fmt: skip
        finally:
            serving.shutdown()
            serving.server_close()
    finally:
        history.close()
        server.drop()
    q99, h50, h99 = percentile(query, 0.99), got.p(0.5), got.p(0.99)
    print(f"  history query alone: p50 {percentile(query, 0.5):.2f} ms, p99 {q99:.2f} ms ({len(query)} queries)")
    print(f"  GET over HTTP: {len(got.ms)}/{got.expected} answered 200 ({got.errors} not), p50 {h50:.2f} ms, "
          f"p99 {h99:.2f} ms: {h99 - q99:+.2f} ms beside the query's p99")  # fmt: skip
    return [Row(
        f"api: GET timeline p99 at {rate:.0f}/s, keep-alive", f"{h99:.1f} ms", reference=f"{q99:.1f} ms (query p99)",
        ratio=f"{h99 - q99:+.1f} ms", target=f"<= +{TARGET_BEYOND_MS:.0f} ms",
    )]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.api", description=__doc__.split("\n\n")[0] if __doc__ else "")
    add_arguments(parser)
    parser.add_argument("--no-rss", action="store_true", help="the timeline figure only (needs no cluster)")
    args = parser.parse_args(argv)
    rows = timeline(rate=args.api_rate, seconds=args.api_seconds, connections=args.api_connections,
                    executions=args.api_executions)  # fmt: skip
    if not args.no_rss:
        from bench import apirss  # the cluster's modules only when a cluster is wanted

        rows += apirss.section(rate=args.api_rate, jobs=args.rss_jobs, executions=args.rss_executions,
                               workflows=args.rss_workflows, settle=args.rss_settle)  # fmt: skip
    for line in table(rows):
        print(line)
    return 0


def add_arguments(parser: argparse.ArgumentParser, *, rss: bool = True) -> None:
    """The section's flags (`python -m bench` shares the rss ones with its rss section)."""
    parser.add_argument("--api-rate", type=float, default=DEFAULT_RATE, help="requests per second (default 200)")
    parser.add_argument("--api-seconds", type=float, default=DEFAULT_SECONDS, help="how long the timeline load runs")
    parser.add_argument("--api-connections", type=int, default=DEFAULT_CONNECTIONS, help="keep-alive connections")
    parser.add_argument("--api-executions", type=int, default=DEFAULT_EXECUTIONS, help="executions in the history")
    if rss:
        parser.add_argument("--rss-jobs", type=int, default=10_000, help="ScheduledJobs of the rss figure")
        parser.add_argument("--rss-executions", type=int, default=10_000, help="retained Executions of the rss figure")
        parser.add_argument("--rss-workflows", type=int, default=1000, help="waiting Workflows of the rss figure")
        parser.add_argument("--rss-settle", type=float, default=60.0, help="seconds of RSS samples once the load is in")


if __name__ == "__main__":
    sys.exit(main())
