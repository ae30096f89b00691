"""The console's pages against in-memory sources: who sees what, bounded fields, escaping, CSRF.

The routes run as the API server dispatches them (`ApiServer.dispatch`) with an Exchange set
as the ASGI application sets it; the guard and the sources are fakes. The browser tests
(tests/console/) drive the same pages through Chromium against a real operator.
"""

from __future__ import annotations

import dataclasses
import gzip
import re
from collections.abc import Sequence
from typing import Any

import pytest

from vigil.api import ApiServer, Guard
from vigil.api.console import ConsoleSources, Refused, dag, views
from vigil.api.console.session import CONTENT_SECURITY_POLICY, csrf_token, csrf_valid
from vigil.api.exchange import EXCHANGE, Exchange
from vigil.core.access import Access, User
from vigil.core.history import ExecutionPage

LEASE = Access(verb="get", group="coordination.k8s.io", resource="leases", namespace="vigil", name="l")
HOSTILE = "<script>alert(1)</script>"


class Checks:
    """Tokens `alice` (may see namespace `team-a` only) and `root` (everything)."""

    def authenticate(self, token: str) -> User | None:
        return {"alice-token": User("alice"), "root-token": User("root")}.get(token)

    def allowed(self, user: User, access: Access) -> bool:
        return user.name == "root" or access.namespace == "team-a"


def job(namespace: str, name: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"},
        "spec": {"cron": "*/5 * * * *", "timezone": "Europe/Paris"},
        "status": status,
    }


WORKFLOW = {
    "metadata": {"namespace": "team-a", "name": "release", "uid": "uid-release"},
    "spec": {"steps": [{"id": "build", "type": "pod"}, {"id": "gate", "type": "approval", "dependsOn": ["build"],
                                                          "approval": {"approvers": ["alice"]}}]},
    "status": {"phase": "Running", "steps": {"build": {"phase": "Succeeded", "attempts": 1},
                                             "gate": {"phase": "Running", "attempts": 1}}},
}  # fmt: skip


@dataclasses.dataclass
class Reads:
    objects: dict[str, list[dict[str, Any]]]

    def namespaces(self) -> Sequence[str]:
        return sorted(self.objects)

    def jobs(self, namespace: str) -> Sequence[dict[str, Any]]:
        return self.objects.get(namespace, [])

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.jobs(namespace) if o["metadata"]["name"] == name), None)

    def executions(self, namespace: str, job_uid: str) -> Sequence[dict[str, Any]]:
        return []

    def workflows(self, namespace: str) -> Sequence[dict[str, Any]]:
        return []

    def workflow(self, namespace: str, name: str) -> dict[str, Any] | None:
        return WORKFLOW if (namespace, name) == ("team-a", "release") else None

    def taskqueues(self, namespace: str) -> Sequence[dict[str, Any]]:
        return []


@dataclasses.dataclass
class Writes:
    done: list[tuple[str, ...]] = dataclasses.field(default_factory=list)

    def run_now(self, token: str, namespace: str, job: str) -> str:
        self.done.append(("run", token, namespace, job))
        return "execution x created"

    def suspend(self, token: str, namespace: str, job: str, reason: str) -> str:
        raise Refused(f"already suspended: {reason}")

    def resume(self, token: str, namespace: str, job: str) -> str:
        return "resumed"

    def decide(self, token: str, namespace: str, workflow: str, step: str, action: str, reason: str) -> str:
        return "decided"


@pytest.fixture
def server() -> tuple[ApiServer, Writes]:
    overdue = {"type": "Overdue", "status": "True", "reason": "NotFired", "message": HOSTILE, "lastTransitionTime": "2026-01-02T00:00:00Z"}
    reads = Reads({"team-a": [job("team-a", "nightly", occurrences=[{"nominal": "2026-01-01T00:00:00Z", "outcome": "Missed", "reason": HOSTILE}],
                                  conditions=[overdue])],
                   "team-b": [job("team-b", "secret-job", conditions=[overdue])]})  # fmt: skip
    writes = Writes()
    sources = ConsoleSources(reads=reads, writes=writes, job_executions=lambda ns, j, limit, after: ExecutionPage([]))
    checks = Checks()
    api = ApiServer(
        leader=lambda: None, find_execution=lambda _: None, timeline=lambda _: [],
        guard=Guard(authenticator=checks, authorizer=checks, leader_lease=LEASE), console=sources,
    )  # fmt: skip
    return api, writes


def call(
    api: ApiServer, method: str, target: str, *, token: str | None = None, body: bytes = b"", **headers: str
) -> tuple[int, str, dict[str, str]]:
    exchange = Exchange(headers={"host": "console.test", **headers})
    EXCHANGE.set(exchange)
    path, _, query = target.partition("?")
    status, _, raw = api.dispatch(method, path, query, token, body)
    return status, raw.decode(), dict(exchange.answer_headers)


def follow(api: ApiServer, posted: tuple[int, str, dict[str, str]]) -> tuple[int, str, dict[str, str]]:
    """The page a POST redirected to, fetched with the notice cookie it set (as a browser does)."""
    status, _, headers = posted
    assert status == 303, posted[1]
    notice = headers["Set-Cookie"].split(";", 1)[0]
    return call(api, "GET", headers["Location"], token="alice-token", cookie=notice)


def test_without_a_token_a_page_sends_to_the_login_form(server: tuple[ApiServer, Writes]) -> None:
    status, _, headers = call(server[0], "GET", "/console/jobs")
    assert (status, headers["Location"]) == (303, "/console/login")
    assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_login_sets_a_strict_http_only_cookie_only_for_an_accepted_token(server: tuple[ApiServer, Writes]) -> None:
    status, page, _ = call(server[0], "POST", "/console/login", body=b"token=wrong")
    assert status == 401 and "does not accept" in page
    status, _, headers = call(server[0], "POST", "/console/login", body=b"token=alice-token")
    assert status == 303
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie  # plain HTTP here; over TLS it is Secure
    status, page, _ = call(server[0], "POST", "/console/login", body=b"token=" + b"x" * 4000)
    assert status == 400 and "token: is longer than a browser keeps in a cookie" in page


def test_a_viewer_sees_only_the_namespaces_they_may_list(server: tuple[ApiServer, Writes]) -> None:
    status, page, _ = call(server[0], "GET", "/console/jobs", cookie="vigil-console=alice-token")
    assert status == 200 and "nightly" in page and "secret-job" not in page and "team-b" not in page
    _, page, _ = call(server[0], "GET", "/console/jobs", token="root-token")
    assert "secret-job" in page


def test_fields_are_bounded_and_named(server: tuple[ApiServer, Writes]) -> None:
    for query, field in (
        ("q=" + "x" * 101, "q"), ("health=bad", "health"), ("namespace=NO", "namespace"), ("other=1", "other"),
        ("q=%ff%fe", "q"),  # not UTF-8: not read as U+FFFD: a malformed value is refused, not turned into another
    ):  # fmt: skip
        status, page, _ = call(server[0], "GET", f"/console/jobs?{query}", token="root-token")
        assert status == 400 and f"{field}:" in page, query


def test_tenant_strings_are_escaped(server: tuple[ApiServer, Writes]) -> None:
    status, page, _ = call(server[0], "GET", "/console/namespaces/team-a/jobs/nightly", token="alice-token")
    assert status == 200 and HOSTILE not in page and "&lt;script&gt;" in page


def test_another_namespace_s_job_is_forbidden(server: tuple[ApiServer, Writes]) -> None:
    status, _, _ = call(server[0], "GET", "/console/namespaces/team-b/jobs/secret-job", token="alice-token")
    assert status == 403


def test_a_post_needs_the_csrf_field_and_a_same_site_origin(server: tuple[ApiServer, Writes]) -> None:
    api, writes = server
    path = "/console/namespaces/team-a/jobs/nightly/run"
    assert call(api, "POST", path, token="alice-token")[0] == 403
    good = f"csrf={csrf_token('alice-token')}".encode()
    assert call(api, "POST", path, token="alice-token", body=good, origin="https://evil.example")[0] == 403
    assert call(api, "POST", path, token="alice-token", body=good, **{"sec-fetch-site": "cross-site"})[0] == 403
    assert writes.done == []
    status, page, _ = follow(api, call(api, "POST", path, token="alice-token", body=good, origin="http://console.test"))
    assert status == 200 and "execution x created" in page
    assert writes.done == [("run", "alice-token", "team-a", "nightly")]


def test_a_refused_write_shows_why_escaped(server: tuple[ApiServer, Writes]) -> None:
    body = f"csrf={csrf_token('alice-token')}&reason=%3Cscript%3Ealert(1)%3C%2Fscript%3E".encode()
    posted = call(server[0], "POST", "/console/namespaces/team-a/jobs/nightly/suspend", token="alice-token", body=body)
    assert (posted[0], posted[2]["Location"]) == (303, "/console/namespaces/team-a/jobs/nightly")  # Post/Redirect/Get
    status, page, headers = follow(server[0], posted)
    assert status == 200 and 'class="notice refused"' in page and "already suspended" in page and HOSTILE not in page
    assert headers["Set-Cookie"].startswith("vigil-console-notice=;")  # shown once: a reload repeats nothing
    assert "already suspended" not in call(server[0], "GET", "/console/namespaces/team-a/jobs/nightly", token="alice-token")[1]


def test_the_static_files_are_served_from_the_package(server: tuple[ApiServer, Writes]) -> None:
    status, page, _ = call(server[0], "GET", "/console/static/htmx.min.js")
    assert status == 200 and "htmx" in page
    assert call(server[0], "GET", "/console/static/../router.py")[0] == 404


def test_a_dag_puts_each_step_right_of_what_it_depends_on() -> None:
    steps = [
        views.StepRow(id=i, type="pod", phase="Pending", attempts="", depends_on=d, approvers=(), output="", detail="", waiting_approval=False)
        for i, d in (("a", ()), ("b", ("a",)), ("c", ("a",)), ("d", ("b", "c")))
    ]  # fmt: skip
    assert dag.depths(steps) == {"a": 0, "b": 1, "c": 1, "d": 2}
    layout = dag.layout(steps)
    assert len(layout.edges) == 4
    x = {box.id: box.x for box in layout.boxes}
    assert x["a"] < x["b"] == x["c"] < x["d"]


@pytest.mark.parametrize(
    ("conditions", "suspend", "health"),
    [
        pytest.param([("Ready", "True")], False, "healthy", id="ready"),
        pytest.param([("Ready", "True"), ("Overdue", "True")], False, "overdue", id="overdue"),
        pytest.param([("DeadLettered", "True")], False, "failing", id="dead-lettered"),
        pytest.param([("Invalid", "True")], True, "invalid", id="invalid-first"),
        pytest.param([], True, "suspended", id="suspended"),
        pytest.param([], False, "pending", id="not-judged-yet"),
    ],
)
def test_health(conditions: list[tuple[str, str]], suspend: bool, health: str) -> None:
    obj = {"spec": {"suspend": suspend}, "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}
    assert views.health(obj) == health


def test_the_watchdog_page_lists_what_holds_since_when_in_visible_namespaces(server: tuple[ApiServer, Writes]) -> None:
    status, page, _ = call(server[0], "GET", "/console/watchdog", token="alice-token")
    assert status == 200 and "nightly" in page and "2026-01-02T00:00:00Z" in page and "overdue" in page
    assert "secret-job" not in page and HOSTILE not in page


def test_a_retry_form_is_bounded(server: tuple[ApiServer, Writes]) -> None:
    path = "/console/namespaces/team-a/taskqueues/orders/retry"
    csrf = f"csrf={csrf_token('alice-token')}"
    for body, why in (
        (csrf, "execution: check at least one"),
        (csrf + "&execution=NOT_AN_ID", "execution: is not an execution id"),
        (csrf + "&execution=%ff", "execution: is not UTF-8"),
        (csrf + "".join(f"&execution=e{i}" for i in range(101)), "execution: is given more than 100 times"),
    ):
        status, page, _ = call(server[0], "POST", path, token="alice-token", body=body.encode())
        assert status == 400 and why in page, why


def test_pages_are_gzipped_when_accepted_and_the_csrf_field_differs_on_every_page(server: tuple[ApiServer, Writes]) -> None:
    exchange = Exchange(headers={"host": "console.test", "accept-encoding": "gzip, deflate, br"})
    EXCHANGE.set(exchange)
    status, _, raw = server[0].dispatch("GET", "/console/namespaces/team-a/jobs/nightly", "", "alice-token", b"")
    headers = dict(exchange.answer_headers)
    assert (status, headers["Content-Encoding"], headers["Cache-Control"]) == (200, "gzip", "no-store")
    page = gzip.decompress(raw).decode()
    fields = re.findall(r'name="csrf" value="([0-9a-f]+)"', page)
    _, again, _ = call(server[0], "GET", "/console/namespaces/team-a/jobs/nightly", token="alice-token")
    assert fields and set(fields).isdisjoint(re.findall(r'name="csrf" value="([0-9a-f]+)"', again))  # masked anew
    assert all(csrf_valid("alice-token", f) for f in fields) and not csrf_valid("root-token", fields[0])
    _, _, static = call(server[0], "GET", "/console/static/console.css")
    assert static["Cache-Control"].startswith("public")


def test_a_workflow_page_and_its_polled_dag_keep_their_links_under_the_console(server: tuple[ApiServer, Writes]) -> None:
    for path in ("/console/namespaces/team-a/workflows/release", "/console/namespaces/team-a/workflows/release/dag"):
        status, page, _ = call(server[0], "GET", path, token="alice-token")
        assert status == 200, path
        assert 'hx-get="/console/namespaces/team-a/workflows/release/dag"' in page, path  # the next poll's target
        assert 'data-step="gate" data-phase="Running"' in page
    _, page, _ = call(server[0], "GET", "/console/namespaces/team-a/workflows/release", token="alice-token")
    assert 'id="decide-gate"' in page  # a waiting approval offers the decision
