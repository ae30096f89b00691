"""`kubectl vigil queue jobs|dead-letters|retry|stats` against the real HTTP API on a real
PostgreSQL queue store: each verb's table and JSON, its pages, and its errors as one line.

The plugin's `main` runs in-process against `ApiServer.serve` on a free port (VIGIL_API_URL,
VIGIL_API_TOKEN, `-n`: no kubeconfig is read); the reviews are stood in for as in test_api.py
(`t-alice` may do everything on TaskQueue shop/orders, `t-bob` only what a test grants).
Executions die through a worker's settlements (test_listings.kill). `stats`' table of
TaskQueue statuses is checked from the objects the API server would answer; its breakdown
comes through the served API.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.queue.test_api import ALL_VERBS, T0, Clock, api, get, grants, post, submit
from tests.queue.test_listings import kill
from tests.unit.reviews import Reviews
from vigil.api.router import ApiServer
from vigil.cli.errors import EXIT_API_FAILURE, EXIT_BAD_INPUT
from vigil.cli.main import main, parser
from vigil.cli.queues import breakdown_table, stats_table
from vigil.cli.tables import render_table
from vigil.client import Client
from vigil.queue.store import QueueStore, Submission

pytestmark = pytest.mark.postgres


class Served:
    def __init__(self, server: ApiServer, url: str, clock: Clock) -> None:
        self.api = server
        self.url = url
        self.clock = clock


@contextlib.contextmanager
def serve(
    server: ApiServer, monkeypatch: pytest.MonkeyPatch, token: str = "t-alice", clock: Clock | None = None
) -> Iterator[Served]:
    running = server.serve(0)
    url = f"http://127.0.0.1:{running.server_address[1]}"
    monkeypatch.setenv("VIGIL_API_URL", url)
    monkeypatch.setenv("VIGIL_API_TOKEN", token)
    try:
        yield Served(server, url, clock or Clock())
    finally:
        running.shutdown()
        running.server_close()


@pytest.fixture
def served(store: QueueStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    clock = Clock()
    with serve(api(store, clock=clock), monkeypatch, clock=clock) as served:
        yield served


def plugin(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["queue", *args, "-n", "shop"])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def dead_letters(served: Served, dsn: str, count: int) -> list[str]:
    ids = [submit(served.api, maxAttempts=1, idempotencyKey=f"k{i}")[1]["executionId"] for i in range(count)]
    kill(dsn, count, error="Traceback ...\nKeyError: 'sku'")  # at T0, T0 + 1s, ...
    served.clock.at = T0 + timedelta(minutes=5)
    return ids


# jobs ----------------------------------------------------------------------------------------------


def test_jobs_is_a_table_newest_first(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    first = submit(served.api, priority="high", tenant="acme", idempotencyKey="a")[1]
    second = submit(served.api, idempotencyKey="b")[1]
    newest, oldest = sorted([first, second], key=lambda made: made["jobId"], reverse=True)

    code, out, err = plugin(capsys, "jobs", "orders")

    assert (code, err) == (0, "")
    table = rows(out)
    assert table[0] == ["JOB", "TASK", "PRIORITY", "TENANT", "ENABLED", "LAST", "AGE"]
    assert [row[0] for row in table[1:]] == [newest["jobId"], oldest["jobId"]]
    assert table[1 + [newest, oldest].index(first)][1:6] == ["record", "-10", "acme", "true", "ready"]


def test_jobs_a_page_at_a_time_with_the_next_pages_token_on_stderr(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    made = sorted((submit(served.api, idempotencyKey=f"k{i}")[1]["jobId"] for i in range(3)), reverse=True)

    code, out, err = plugin(capsys, "jobs", "orders", "--limit", "2")
    assert code == 0 and [row[0] for row in rows(out)[1:]] == made[:2]
    token = err.split("--continue ")[1].strip()

    code, out, err = plugin(capsys, "jobs", "orders", "--limit", "2", "--continue", token)
    assert (code, err) == (0, "") and [row[0] for row in rows(out)[1:]] == made[2:]


def test_jobs_as_json(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    made = submit(served.api, tenant="acme")[1]
    code, out, _ = plugin(capsys, "jobs", "orders", "-o", "json")
    answer = json.loads(out)
    assert code == 0 and answer["continue"] is None
    [job] = answer["jobs"]
    assert (job["job_id"], job["tenant"], job["last_state"]) == (made["jobId"], "acme", "ready")
    assert datetime.fromisoformat(job["created_at"]) == T0


def test_no_jobs_is_said_on_stderr(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert plugin(capsys, "jobs", "orders") == (0, "", 'No jobs in taskqueue "orders" (this page).\n')


@pytest.mark.parametrize("given", ["0", "501", "ten"])
def test_a_limit_outside_1_to_500_is_refused_by_the_plugin(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["queue", "jobs", "orders", "--limit", given])
    assert exit_.value.code == 2 and "--limit: must be a whole number from 1 to 500" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["stats", "jobs", "dead-letters", "retry"])
@pytest.mark.parametrize("name", ["Orders", "a/b", "-x", "orders_"])
def test_a_queue_name_that_is_none_is_refused_by_the_plugin(
    verb: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["queue", verb, "--", name])
    assert exit_.value.code == 2 and "is not a TaskQueue name" in capsys.readouterr().err


def test_a_namespace_that_is_none_is_bad_input(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["queue", "jobs", "orders", "-n", "Shop"])
    assert (code, capsys.readouterr().err) == (EXIT_BAD_INPUT, "kubectl vigil: 'Shop' is not a namespace name (a DNS label)\n")


def test_a_token_the_api_did_not_write_is_its_422_in_one_line(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plugin(capsys, "dead-letters", "orders", "--continue", "bogus")
    assert (code, out) == (EXIT_API_FAILURE, "")
    assert err == (
        f"kubectl vigil: the operator's API at {served.url} answered 422: continue: is not a token from an "
        "earlier page of this queue's dead-letters\n"
    )


# dead-letters ----------------------------------------------------------------------------------------


def test_dead_letters_is_a_table_the_longest_dead_first(
    served: Served, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dead_letters(served, dsn, 2)
    listed = [d["executionId"] for d in get(served.api, "/v1/namespaces/shop/taskqueues/orders/dead-letters")[1]["deadLetters"]]

    code, out, err = plugin(capsys, "dead-letters", "orders")

    assert (code, err) == (0, "")
    table = rows(out)
    assert table[0] == ["EXECUTION", "TASK", "TENANT", "PRIORITY", "ATTEMPT", "DEAD", "FOR", "ERROR"]
    assert [row[0] for row in table[1:]] == listed
    assert table[1][1:] == ["record", "shop", "0", "1/1", "5m", "KeyError:", "'sku'"]
    assert table[2][5] == "4m59s"


def test_dead_letters_as_json(served: Served, dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    [eid] = dead_letters(served, dsn, 1)
    code, out, _ = plugin(capsys, "dead-letters", "orders", "-o", "json")
    [dead] = json.loads(out)["deadLetters"]
    assert code == 0
    assert (dead["execution_id"], dead["error"], dead["age_seconds"], dead["attempt"]) == (eid, "KeyError: 'sku'", 300, 1)


# retry -------------------------------------------------------------------------------------------------


def test_retry_all_dead_retries_every_dead_execution_across_pages(
    served: Served, dsn: str, store: QueueStore, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("vigil.cli.queues.QUEUE_PAGE_MAX", 2)  # three pages of dead letters
    ids = dead_letters(served, dsn, 5)

    code, out, err = plugin(capsys, "retry", "orders", "--all-dead")

    assert code == 0 and err == "5 retried, 0 refused\n"
    assert sorted(out.split()) == sorted(["retried"] * 5 + ids)
    assert store.counts("shop/orders")["dead"] == 0 and store.counts("shop/orders")["ready"] == 5
    assert {get(served.api, f"/v1/executions/{eid}")[1]["attempt"] for eid in ids} == {2}


def test_retry_says_what_it_retried_and_what_was_refused_and_why(
    served: Served, dsn: str, store: QueueStore, capsys: pytest.CaptureFixture[str]
) -> None:
    [dead] = dead_letters(served, dsn, 1)
    ready = submit(served.api, idempotencyKey="ready")[1]["executionId"]
    [elsewhere] = store.submit("shop/payments", [Submission(task="record")], now=T0)

    code, out, err = plugin(capsys, "retry", "orders", dead, ready, elsewhere, "ex-nothing", "Not_An_Id")

    assert code == EXIT_API_FAILURE and err == "1 retried, 4 refused\n"
    assert out.splitlines() == [
        f"retried {dead}",
        f"refused {ready}: execution {ready} cannot be retried: it is ready: only dead or cancelled executions "
        "can be retried",
        f"refused {elsewhere}: it is not in taskqueue shop/orders",
        "refused ex-nothing: it is not in taskqueue shop/orders",
        "refused Not_An_Id: 'Not_An_Id' is not a job or execution id",
    ]
    assert store.counts("shop/orders")["dead"] == 0


def test_retry_refuses_another_queues_execution_without_retrying_it(
    store: QueueStore, dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    everywhere = Reviews(lambda user, access: user.name == "alice" and access.resource == "taskqueues")
    [elsewhere] = store.submit("shop/payments", [Submission(task="record")], now=T0)
    store.cancel(elsewhere, now=T0, by="carol")  # retryable, in its own queue
    with serve(api(store, everywhere), monkeypatch):
        code, out, _ = plugin(capsys, "retry", "orders", elsewhere)
        assert (code, out) == (EXIT_API_FAILURE, f"refused {elsewhere}: it is not in taskqueue shop/orders\n")
    assert store.counts("shop/payments")["cancelled"] == 1


def test_retry_all_dead_of_a_queue_without_any_says_so(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert plugin(capsys, "retry", "orders", "--all-dead") == (
        0, "", 'No dead executions in taskqueue "orders" in namespace "shop".\n'
    )


@pytest.mark.parametrize("args", [["orders"], ["orders", "ex-1", "--all-dead"]], ids=["neither", "both"])
def test_retry_takes_ids_or_all_dead(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plugin(capsys, "retry", *args)
    assert code == EXIT_BAD_INPUT and "give EXECUTION ids or --all-dead (not both)" in err


def test_retry_without_update_is_refused_for_each(
    store: QueueStore, dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = api(store, Reviews(grants({"alice": ALL_VERBS, "bob": {"get"}})))
    with serve(server, monkeypatch, token="t-bob") as served:
        [eid] = dead_letters(served, dsn, 1)
        code, out, _ = plugin(capsys, "retry", "orders", "--all-dead")
        assert code == EXIT_API_FAILURE
        assert out == f"refused {eid}: bob may not update taskqueues/executions.vigil.dev orders in namespace shop\n"
    assert store.counts("shop/orders")["dead"] == 1


# errors: one line each ---------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("verb", [["jobs", "orders"], ["dead-letters", "orders"], ["retry", "orders", "--all-dead"]])
def test_the_volume_tier_off_is_one_line(
    verb: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve(api(None), monkeypatch) as served:
        code, out, err = plugin(capsys, *verb)
        assert (code, out) == (EXIT_API_FAILURE, "")
        assert err == f"kubectl vigil: the volume tier is off on the operator at {served.url} (its queue.dsn is " \
            "empty): it has no queue store\n"


def test_forbidden_is_one_line_naming_the_verb(
    store: QueueStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve(api(store), monkeypatch, token="t-bob") as served:
        code, _, err = plugin(capsys, "jobs", "orders")
        assert code == EXIT_API_FAILURE
        assert err == f"kubectl vigil: the operator's API at {served.url} answered 403: bob may not get " \
            "taskqueues/executions.vigil.dev orders in namespace shop\n"


def test_a_token_the_api_server_refuses_is_one_line(
    store: QueueStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve(api(store), monkeypatch, token="forged"):
        code, _, err = plugin(capsys, "dead-letters", "orders")
        assert code == EXIT_API_FAILURE and "did not accept your token (401); set VIGIL_API_TOKEN" in err
        assert "forged" not in err


def test_an_operator_nobody_serves_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("VIGIL_API_URL", url)
    monkeypatch.setenv("VIGIL_API_TOKEN", "t-alice")
    code, _, err = plugin(capsys, "retry", "orders", "ex-1")
    assert code == EXIT_API_FAILURE and err.startswith(f"kubectl vigil: cannot reach the operator's API at {url}: ")
    assert err.count("\n") == 1


def test_no_address_for_the_operator_is_bad_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("VIGIL_API_URL", raising=False)
    monkeypatch.setenv("VIGIL_API_TOKEN", "t-alice")
    code, _, err = plugin(capsys, "jobs", "orders")
    assert code == EXIT_BAD_INPUT and "set VIGIL_API_URL or --api-url" in err


# stats --------------------------------------------------------------------------------------------------


def task_queue(name: str, status: dict[str, Any] | None, *, objective: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "vigil.dev/v1alpha1", "kind": "TaskQueue",
        "metadata": {"name": name, "namespace": "shop", "creationTimestamp": "2026-12-01T12:00:00Z"},
        "spec": {"objective": {"oldestReadyAge": objective}} if objective else {},
        **({"status": status} if status is not None else {}),
    }  # fmt: skip


def test_the_stats_table_shows_each_taskqueues_status_by_name() -> None:
    behind = {"type": "Behind", "status": "True", "reason": "OldestReadyTooOld"}
    objs = [
        task_queue("orders", {
            "ready": 1200, "leased": 40, "dead": 3, "oldestReadyAge": "2m5s", "oldestReadySeconds": 125,
            "succeededPerMinute": 600, "deadPerMinute": 1, "conditions": [behind],
        }, objective="1m"),
        task_queue("billing", None),  # not counted yet
    ]  # fmt: skip

    headers, table = stats_table(objs, now=datetime(2026, 12, 4, 12, tzinfo=UTC))

    assert render_table(headers, table).splitlines() == [
        "NAME      READY   LEASED   DEAD   OLDEST   OBJECTIVE   BEHIND   OK/MIN   DEAD/MIN   AGE",
        "billing   -       -        -      -        -           -        -        -          3d",
        "orders    1200    40       3      2m5s     1m          True     600      1          3d",
    ]


def test_the_breakdown_comes_from_the_operator_per_priority_and_tenant(
    served: Served, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dead_letters(served, dsn, 1)
    submit(served.api, priority="high", tenant="acme", idempotencyKey="a")
    submit(served.api, idempotencyKey="b")

    breakdown = Client(served.url, token="t-alice").queue_stats("shop", "orders")

    assert render_table(*breakdown_table(breakdown)).splitlines() == [
        "PRIORITY   TENANT   READY   LEASED   DEAD   OLDEST",
        "-10        acme     1       0        0      0s",
        "0          shop     1       0        1      0s",
    ]
    assert post(served.api, "/v1/namespaces/shop/taskqueues/orders/stats")[0] == 405
