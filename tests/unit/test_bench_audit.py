"""Counting API requests from an audit log (bench/audit.py): by user, verb and resource.

The writes-per-execution figure is only as good as this count: every request once (a watch
logs when its response starts and again when it ends), nothing from before the window, a
line the API server is still writing left for the next read, a subresource kept apart from
its resource, and one client's requests told from another's.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.audit import AuditLog, Tally, short_user

OPERATOR = "system:serviceaccount:bench-op:bench-op-vigil"


def event(audit_id: str, verb: str, resource: str, *, user: str = OPERATOR, subresource: str = "",
          stage: str = "ResponseComplete", namespace: str = "jobs", code: int = 200) -> str:  # fmt: skip
    ref = {"resource": resource, "namespace": namespace, **({"subresource": subresource} if subresource else {})}
    return json.dumps({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": audit_id,
        "stage": stage, "verb": verb, "user": {"username": user}, "objectRef": ref,
        "responseStatus": {"code": code},
    }) + "\n"  # fmt: skip


def test_each_request_counts_once_and_only_after_the_mark(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text(event("before", "create", "pods"))
    log = AuditLog(path)
    cursor = log.follow(log.mark())
    with path.open("a") as out:
        out.write(event("w1", "watch", "executions", stage="ResponseStarted"))
        out.write(event("c1", "create", "executions", code=201))
        out.write(event("s1", "patch", "executions", subresource="status"))
        out.write(event("w1", "watch", "executions"))  # the same watch, ending
        out.write(event("r1", "get", "scheduledjobs", user="vigil-admin"))

    tally = Tally()
    tally.add(cursor.take())

    assert tally.writes(OPERATOR) == 2
    assert tally.reads(OPERATOR) == 1
    assert tally.reads() == 2
    assert tally.breakdown(per=1, user=OPERATOR) == ["  1.00  create executions", "  1.00  patch executions/status"]


def test_a_line_still_being_written_is_read_next_time(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("")
    cursor = AuditLog(path).follow(0)
    whole = event("c1", "create", "pods")
    path.write_text(whole[:40])

    assert cursor.take() == []
    path.write_text(whole)
    assert [r.verb for r in cursor.take()] == ["create"]
    assert cursor.take() == []


def test_a_keep_function_selects_the_window_and_the_clients(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text(
        event("a", "create", "pods", user="vigil-admin", namespace="floor")
        + event("b", "update", "leases", user="system:kube-scheduler", namespace="kube-system")
        + event("c", "create", "pods", subresource="binding", user="vigil-admin", namespace="floor")
    )
    tally = Tally()

    added = tally.add(AuditLog(path).follow(0).take(), lambda r: r.namespace == "floor")

    assert added == 2
    assert tally.writes() == 2
    assert sorted(tally.breakdown(per=2)) == ["  0.50  create pods", "  0.50  create pods/binding"]


def test_writes_split_by_resource_count_each_write_once(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text(
        event("a", "create", "executions")
        + event("b", "patch", "executions", subresource="status")
        + event("c", "patch", "scheduledjobs", subresource="status")
        + event("d", "get", "executions")
        + event("e", "create", "executions", user="system:kube-scheduler")
    )
    tally = Tally()
    tally.add(AuditLog(path).follow(0).take())

    own = tally.writes(OPERATOR, resources=frozenset({"executions", "executions/status"}))
    job = tally.writes(OPERATOR, resources=frozenset({"scheduledjobs/status"}))
    assert (own, job, tally.writes(OPERATOR)) == (2, 1, 3)  # the get is a read; the scheduler's is not ours
    assert tally.writes(resources=frozenset({"executions"})) == 2


def test_users_print_short() -> None:
    assert short_user(OPERATOR) == "sa bench-op:bench-op-vigil"
    assert short_user("system:kube-scheduler") == "kube-scheduler"
