"""`kubectl vigil executions JOB` and the history database: the operator's API as the CLI calls it.

Covered: the API's address (`--api-url`/VIGIL_API_URL) refused unless http(s) with a host, and
a missing one or a missing token reported as one line, not an error; the token taken from the
kubeconfig's client configuration (bearer only) or VIGIL_API_TOKEN first; the client against the
real HTTP API server (the reviews and the history stood in for, as in test_httpapi_job_history):
pages followed to the wanted number, live executions left out, 401/403/connection refused/not
JSON each one line; the table merging the history's rows in by scheduled time, marked in a last
FROM column that only appears with them; `--history` refusing what is not 0..10000.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.unit.test_cli_executions import DAY1, DAY2, NOW, as_object, fresh
from tests.unit.test_httpapi_job_history import History, api, reviewer
from vigil.api.transport import Serving
from vigil.cli.errors import BadInput
from vigil.cli.executions import execution_table, history_count, older_executions
from vigil.cli.main import parser
from vigil.cli.operatorapi import (
    API_TOKEN_ENV,
    API_URL_ENV,
    HistoryNotShown,
    OperatorApi,
    api_url,
    connect,
    kubeconfig_token,
)
from vigil.core.history import AttemptState, ExecutionSummary


@pytest.fixture
def served() -> Iterator[tuple[str, History]]:
    """The real HTTP API on a free port, over a history of 7 executions of ns/reconcile."""
    history = History(7)
    server: Serving = api(history, reviewer()).serve(0)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", history
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- where and as whom -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given", ["ftp://host", "localhost:8080", "http://", "http://host:port", "http://host/?x=1", "file:///etc/passwd"]
)
def test_an_api_url_that_cannot_be_used_is_bad_input_naming_its_sources(given: str) -> None:
    with pytest.raises(BadInput, match=f"--api-url or {API_URL_ENV}"):
        api_url(given)


def test_an_api_url_is_kept_without_its_trailing_slash() -> None:
    assert api_url("https://vigil.example:8443/api/") == "https://vigil.example:8443/api"
    assert api_url(None) is None and api_url("") is None


def test_no_address_or_no_token_is_one_line_saying_what_to_set() -> None:
    with pytest.raises(HistoryNotShown, match=API_URL_ENV):
        connect(None, environ={}, kube_token=lambda: "t")
    with pytest.raises(HistoryNotShown, match=API_TOKEN_ENV):
        connect("http://127.0.0.1:1", environ={}, kube_token=lambda: None)


def test_the_flag_wins_over_the_environment_and_the_token_variable_over_the_kubeconfig() -> None:
    env = {API_URL_ENV: "http://from-env:8080", API_TOKEN_ENV: "t-env"}
    assert connect("http://from-flag:8080", environ=env, kube_token=lambda: "t-kube") == OperatorApi(
        "http://from-flag:8080", "t-env"
    )
    assert connect(None, environ={API_URL_ENV: "http://x:1"}, kube_token=lambda: "t-kube").token == "t-kube"


def loaded(tmp_path: Path, user: dict[str, str]) -> client.Configuration:
    """A client configuration as the kubernetes client loads it from a kubeconfig with `user`."""
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))  # fmt: skip
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    return configuration


def test_only_a_bearer_token_of_the_kubeconfig_is_sent(tmp_path: Path) -> None:
    assert kubeconfig_token(loaded(tmp_path, {"token": "abc.def"})) == "abc.def"
    assert kubeconfig_token(loaded(tmp_path, {"username": "u", "password": "pw"})) is None
    assert kubeconfig_token(client.Configuration()) is None  # a client certificate, say


# -- the client against the real HTTP API ------------------------------------------------------


def test_pages_are_followed_until_enough_older_executions_are_found(served: tuple[str, History]) -> None:
    url, history = served
    live = {"ex-006", "ex-004"}

    older = older_executions(OperatorApi(url, "t-alice"), "ns", "reconcile", want=4, live=live)

    assert [s.execution_id for s in older] == ["ex-005", "ex-003", "ex-002", "ex-001"]
    assert older[0] == history.rows[1]  # every field read back as written
    assert [limit for _, _, limit, _ in history.asked] == [6]  # room for the live ones: one page


def test_more_than_a_page_is_asked_page_after_page() -> None:
    history = History(620)
    server = api(history, reviewer()).serve(0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        older = older_executions(OperatorApi(url, "t-alice"), "ns", "reconcile", want=600, live={"ex-619"})
    finally:
        server.shutdown()
        server.server_close()
    assert [s.execution_id for s in older] == [f"ex-{i:03d}" for i in range(618, 18, -1)]
    assert [(limit, after is not None) for _, _, limit, after in history.asked] == [(500, False), (102, True)]


def test_every_older_execution_when_fewer_than_wanted(served: tuple[str, History]) -> None:
    url, _ = served
    older = older_executions(OperatorApi(url, "t-alice"), "ns", "reconcile", want=20, live=set())
    assert len(older) == 7


@pytest.mark.parametrize(
    ("token", "words"),
    [
        pytest.param("forged", "did not accept your token (401); set VIGIL_API_TOKEN", id="unauthenticated"),
        pytest.param("t-bob", "answered 403: bob may not list executions.vigil.dev in namespace ns", id="forbidden"),
    ],
)
def test_a_refusal_is_one_line_with_the_apis_reason(served: tuple[str, History], token: str, words: str) -> None:
    url, _ = served
    with pytest.raises(HistoryNotShown, match=re.escape(words)) as caught:
        OperatorApi(url, token).job_executions("ns", "reconcile", limit=5)
    assert "\n" not in str(caught.value) and token not in str(caught.value)


def test_an_api_nobody_serves_is_one_line() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(HistoryNotShown, match=f"cannot reach the operator's API at {url}"):
        OperatorApi(url, "t-alice").job_executions("ns", "reconcile", limit=5)


def test_an_answer_that_is_not_the_apis_is_one_line(served: tuple[str, History]) -> None:
    url, _ = served  # "#" cuts the request path short: the health probe answers, in plain text
    with pytest.raises(HistoryNotShown, match="did not answer JSON"):
        OperatorApi(url + "/healthz#", "t-alice").job_executions("ns", "reconcile", limit=5)


# -- the table ---------------------------------------------------------------------------------


def summary(execution_id: str, scheduled_for: datetime, state: AttemptState = AttemptState.SUCCEEDED) -> ExecutionSummary:
    return ExecutionSummary(
        execution_id=execution_id, namespace="shop", job="nightly", job_uid="u", priority="normal",
        scheduled_for=scheduled_for, state=state, attempts=3 if state is AttemptState.DEAD else 1,
        reason="OOMKilled" if state is AttemptState.DEAD else "Completed",
    )  # fmt: skip


def test_older_executions_are_merged_in_by_scheduled_time_and_marked() -> None:
    live = [as_object(fresh(DAY2), nominal=DAY2), as_object(fresh(DAY1), nominal=DAY1)]
    between = DAY1 + timedelta(hours=12)
    history = [
        summary("ex-oldest", DAY1 - timedelta(days=1), AttemptState.DEAD),
        summary("ex-between", between),
        summary(live[0]["metadata"]["name"], DAY2),  # still an Execution: shown once, as that
    ]

    headers, rows = execution_table(live, now=NOW, history=history)

    assert headers == ["EXECUTION", "SCHEDULED", "PHASE", "ATTEMPT", "REASON", "AGE", "FROM"]
    assert [(row[0], row[-1]) for row in rows] == [
        (live[0]["metadata"]["name"], "cluster"),
        ("ex-between", "history"),
        (live[1]["metadata"]["name"], "cluster"),
        ("ex-oldest", "history"),
    ]
    assert rows[3][1:6] == ["2026-03-31T01:00:00Z", "Dead", 3, "OOMKilled", "10d"]
    headers, rows = execution_table(live, now=NOW, history=history, with_namespace=True)
    assert headers[0] == "NAMESPACE" and rows[1][:2] == ["shop", "ex-between"]


def test_without_older_executions_the_table_is_as_before() -> None:
    live: list[dict[str, Any]] = [as_object(fresh(DAY1), nominal=DAY1)]
    headers, _ = execution_table(live, now=NOW, history=[summary(live[0]["metadata"]["name"], DAY1)])
    assert headers == ["EXECUTION", "SCHEDULED", "PHASE", "ATTEMPT", "REASON", "AGE"]


@pytest.mark.parametrize("given", ["-1", "ten", "10001", "1.5", "", "²"])
def test_history_takes_a_count_from_0_to_10000(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["executions", "nightly", "--history", given])
    assert exit_.value.code == 2 and "--history: must be a whole number from 0 to 10000" in capsys.readouterr().err
    assert history_count("0") == 0 and history_count("10000") == 10_000


def test_history_defaults_to_twenty() -> None:
    assert parser().parse_args(["executions", "nightly"]).history == 20

