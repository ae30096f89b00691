"""The console fed hostile input while another tenant's job keeps firing on time (issue #39).

A real operator (the chart's identity) serves the console on the real API server, with its
SQLite history database and no queue store (the dead letters' and task queues' forms are refused
before the store is asked), its read timeout and request deadline shortened to 4 s and 8 s so
that each is met many times; a canary job fires every 2 s in a namespace of its own
(tests/integration/canary.py). A viewer (ServiceAccount `alice`, bound in a team namespace with
one job) logs in with the form, so the hostile input reaches the pages behind the login too.
For half a minute, a round every half second, raw sockets from 127.0.0.1 send the console what a
hostile client would (the table CASES), and every answer is checked:

* fields: query strings too long, with NUL, control characters or invalid UTF-8, an unknown,
  repeated or `<script>` field, more than FIELDS_MAX fields, namespaces and names outside their
  grammar in paths; forms with a reason past REASON_MAX or holding NUL, unknown or repeated
  fields, no CSRF field, a body that is not UTF-8, a retry of too many or malformed ids, a login token past TOKEN_MAX (and one past what a cookie
  keeps, one with spaces, one the API server does not know, one from another site);
* headers: a head past 16 KiB (431), a huge, forged or tampered login cookie, a garbage
  Authorization header, a couple of hundred headers, control bytes in a header, a request line
  that is not HTTP;
* bodies: a Content-Length past 64 KiB and a chunked body past it (413), a body shorter than its
  Content-Length and then a half-closed socket (closed, unanswered); held across the rounds, a few
  heads trickled a byte per round (slowloris: each closed, unanswered, within the read timeout)
  and a body short of its Content-Length on a socket kept open (answered 503 DeadlineExceeded, and
  closed, within the request deadline);
* connections: from 127.0.0.3, floods of idle connections past the 64 one peer may hold (those
  past it closed at once, the rest at the read timeout).

Every answer is the one the table says (the status, and text naming the field: 400s say
`<field>: ...`), never a 5xx but that documented deadline, and never echoes the hostile value.
Meanwhile, in every round, alice's Jobs page (from 127.0.0.2, another client) answers 200 with
her job within 3 s; at the end every canary occurrence fired on time, nothing hostile suspended
alice's job, and the operator is alive and still the leader. A summary line counts the hostile
requests by class.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.canary import Canary
from tests.integration.conftest import KubeCluster
from tests.integration.jobs import create_job, get_job, make_namespace
from tests.integration.operators import OperatorFleet, OperatorProcess
from tests.integration.viewers import free_port, rules, serving, viewer_token
from tests.waiting import wait_for
from vigil.api.console.fields import FIELDS_MAX, QUERY_MAX, REASON_MAX, TOKEN_MAX
from vigil.api.console.session import COOKIE, COOKIE_TOKEN_MAX
from vigil.api.transport import Limits

HOSTILE = "<script>alert('owned')</script>"
LIMITS = Limits()
#: The operator's own bounds on time, shortened so that each is met several times in the rounds.
READ_TIMEOUT_SECONDS = 4.0
REQUEST_TIMEOUT_SECONDS = 8.0
#: How long the hostile rounds last.
ROUNDS_SECONDS = 30.0
#: How long alice's Jobs page may take while the console is fed hostile input.
PROMPT_SECONDS = 3.0
#: Slack on a bound of time before a socket the server should have closed fails the test.
SLACK_SECONDS = 3.0
#: Requests sent at once: fewer than the operator's workers, so none is refused as Busy.
SENDERS = 4
#: How often a round of hostile requests starts (one after the other when a round takes longer).
ROUND_SECONDS = 0.5
#: Heads trickled a byte per round, open at any time.
LORIS = 3
#: Connections one flood opens past the cap on one peer's (each closed at once, unanswered).
FLOOD_EXTRA = 8
#: Three local addresses, three peers to the operator: the hostile requests come from the first,
#: alice from the second (another client, as she would be), the connection floods from the third.
HOSTILE_PEER, ALICE_PEER, FLOOD_PEER = "127.0.0.1", "127.0.0.2", "127.0.0.3"


@dataclass
class Viewer:
    """alice, logged in: where the console is, her login cookie, a CSRF field of hers, her job."""

    host: str
    port: int
    cookie: str
    csrf: str
    namespace: str
    job: str

    @property
    def job_path(self) -> str:
        return f"/console/namespaces/{self.namespace}/jobs/{self.job}"


@dataclass
class Reply:
    status: int  # 0: the server closed the connection without answering
    head: str
    body: bytes

    @property
    def text(self) -> str:
        return f"{self.head}\r\n\r\n{self.body.decode('utf-8', 'replace')}"


def connect(viewer: Viewer, peer: str = HOSTILE_PEER) -> socket.socket:
    """A connection to the console from the local address `peer`."""
    return socket.create_connection(
        (viewer.host, viewer.port), timeout=REQUEST_TIMEOUT_SECONDS + SLACK_SECONDS, source_address=(peer, 0)
    )


def talk(viewer: Viewer, raw: bytes, *, half_close: bool = False, peer: str = HOSTILE_PEER) -> Reply:
    """Send `raw` on a connection of its own and read the answer until the server closes it."""
    with connect(viewer, peer) as sock:
        sock.sendall(raw)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        return read_reply(sock)


def read_reply(sock: socket.socket) -> Reply:
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    data = b"".join(chunks)
    if not data:
        return Reply(0, "", b"")
    head, _, body = data.partition(b"\r\n\r\n")
    text = head.decode("latin-1")
    return Reply(int(text.split(" ", 2)[1]), text, body)


def request(
    method: str, target: str, *headers: str, body: bytes = b"", length: int | None = None, chunked: bool = False
) -> bytes:
    """A request's bytes as given: nothing normalised, Connection: close so the answer ends it."""
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    elif method == "POST":
        lines += ["Content-Type: application/x-www-form-urlencoded", f"Content-Length: {len(body) if length is None else length}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def form(**values: str) -> bytes:
    return urllib.parse.urlencode(values).encode()


def hostile_quoted() -> str:
    return urllib.parse.quote(HOSTILE, safe="")


@dataclass(frozen=True)
class Case:
    """One hostile request, as a function of the logged-in viewer, and what must answer it."""

    kind: str  # fields, headers or bodies
    what: str
    raw: Callable[[Viewer], bytes]
    status: int
    text: str  # in the answer (its head and body); a 400 from the console names the field
    echo: str = ""  # a value that must not come back
    half_close: bool = False


def get(target: str, *headers: str, cookie: bool = True) -> Callable[[Viewer], bytes]:
    return lambda v: request("GET", target.format(v=v), *(f"Cookie: {v.cookie}",) * cookie, *headers)


def post(
    target: str, body: Callable[[Viewer], bytes], *headers: str, cookie: bool = True, length: int | None = None
) -> Callable[[Viewer], bytes]:
    return lambda v: request("POST", target.format(v=v), *(f"Cookie: {v.cookie}",) * cookie, *headers, body=body(v), length=length)


def with_csrf(**values: str) -> Callable[[Viewer], bytes]:
    return lambda v: form(csrf=v.csrf, **values)


def suspend(
    body: Callable[[Viewer], bytes], *headers: str, cookie: bool = True, length: int | None = None
) -> Callable[[Viewer], bytes]:
    return post("{v.job_path}/suspend", body, *headers, cookie=cookie, length=length)


def login(body: bytes, *headers: str) -> Callable[[Viewer], bytes]:
    return post("/console/login", lambda v: body, *headers, cookie=False)


def head_of(size: int) -> Callable[[Viewer], bytes]:
    """A whole request head of exactly `size` bytes (a filler header makes up the size)."""

    def raw(v: Viewer) -> bytes:
        bare = len(request("GET", "/console/jobs", f"Cookie: {v.cookie}", "X-Filler: "))
        return request("GET", "/console/jobs", f"Cookie: {v.cookie}", "X-Filler: " + "f" * (size - bare))

    return raw


def chunked_past_the_limit(v: Viewer) -> bytes:
    """A chunked form one byte past the body limit, its last chunk never sent."""
    half = LIMITS.max_request_bytes // 2
    chunks = b"".join(f"{half:x}\r\n".encode() + b"a" * half + b"\r\n" for _ in range(2)) + b"1\r\na\r\n"
    return request("POST", f"{v.job_path}/suspend", f"Cookie: {v.cookie}", chunked=True) + chunks


#: The job's form, the login form and a page's query, each answered before any review or write.
LONG_Q = "q" * (QUERY_MAX + 1)
TOO_MANY = "&".join(f"q{i}=1" for i in range(FIELDS_MAX + 1))
BAD_UTF8 = b"reason=\xff\xfe"
FORGED = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImZvcmdlZCJ9.eyJzdWIiOiJzeXN0ZW06YWRtaW4ifQ.c2lnbmF0dXJl"
TO_LOGIN = "Location: /console/login"
NOT_HTTP = "not HTTP/1.1 this server reads"
CASES = [
    # --- fields: query strings ---
    Case("fields", "q past QUERY_MAX", get(f"/console/jobs?q={LONG_Q}"), 400, f"q: is longer than {QUERY_MAX} characters", LONG_Q),
    Case("fields", "q of 12 KiB", get("/console/jobs?q=" + "x" * 12288), 400, f"q: is longer than {QUERY_MAX} characters", "x" * 200),
    Case("fields", "q of 20 KiB, past the head's bound", get("/console/jobs?q=" + "x" * 20480), 431, "at most 16384 bytes"),
    Case("fields", "q holding NUL", get("/console/jobs?q=a%00b"), 400, "q: holds NUL"),
    Case("fields", "q holding a control character", get("/console/jobs?q=a%07b"), 400, "q: holds control characters"),
    Case("fields", "q of invalid UTF-8", get("/console/jobs?q=%ff%fe"), 400, "q: is not UTF-8 text"),
    Case("fields", "q a script (shown as text)", get(f"/console/jobs?q={hostile_quoted()}"), 200, "&lt;script&gt;", HOSTILE),
    Case("fields", "an unknown field", get("/console/jobs?colour=red"), 400, "colour: is not a field this page reads"),
    Case("fields", "an unknown field named with a script", get(f"/console/jobs?{hostile_quoted()}=1"), 400, "query: is not a field this page reads", HOSTILE),
    Case("fields", "a repeated field", get("/console/jobs?q=a&q=b"), 400, "q: is given more than once"),
    Case("fields", "more than FIELDS_MAX fields", get(f"/console/jobs?{TOO_MANY}"), 400, f"query: is not a form of at most {FIELDS_MAX}"),
    Case("fields", "a namespace outside its grammar", get("/console/jobs?namespace=Team_A"), 400, "namespace: is not a namespace name", "Team_A"),
    Case("fields", "a health that is a script", get(f"/console/jobs?health={hostile_quoted()}"), 400, "health: must be one of", HOSTILE),
    Case("fields", "a path namespace outside its grammar", get("/console/namespaces/Team_A/jobs/x"), 404, "no such page", "Team_A"),
    Case("fields", "a path name that is a script", get(f"/console/namespaces/{{v.namespace}}/jobs/{hostile_quoted()}"), 404, "no such page", HOSTILE),
    Case("fields", "a path climbing out", get("/console/namespaces/../../../etc/passwd"), 404, ""),
    Case("fields", "a job page's unknown field", get("{v.job_path}?tab=1"), 400, "tab: is not a field this page reads"),
    Case("fields", "the workflows' namespace outside its grammar", get(f"/console/workflows?namespace={hostile_quoted()}"), 400, "namespace: is not a namespace name", HOSTILE),
    Case("fields", "the watchdog's unknown field", get("/console/watchdog?since=1"), 400, "since: is not a field this page reads"),
    Case("fields", "the dead letters' repeated namespace", get("/console/dead-letters?namespace=a&namespace=b"), 400, "namespace: is given more than once"),
    # --- fields: forms ---
    Case("fields", "a reason past REASON_MAX", suspend(with_csrf(reason="r" * (REASON_MAX + 1))), 400, f"reason: is longer than {REASON_MAX} characters", "r" * (REASON_MAX + 1)),
    Case("fields", "a reason holding NUL", suspend(with_csrf(reason="a\x00b")), 400, "reason: holds NUL"),
    Case("fields", "a reason holding a control character", suspend(with_csrf(reason="a\x1bb")), 400, "reason: holds control characters"),
    Case("fields", "no reason to suspend", suspend(with_csrf()), 400, "reason: is required"),
    Case("fields", "an unknown form field", suspend(with_csrf(reason="x", until="never")), 400, "until: is not a field this page reads"),
    Case("fields", "a repeated reason", suspend(lambda v: form(csrf=v.csrf, reason="a") + b"&reason=b"), 400, "reason: is given more than once"),
    Case("fields", "no CSRF field", suspend(lambda v: form(reason=HOSTILE)), 403, "csrf: the form", HOSTILE),
    Case("fields", "a form that is not UTF-8", suspend(lambda v: BAD_UTF8), 400, "form: is not UTF-8"),
    Case("fields", "from another site", suspend(with_csrf(reason="x"), "Sec-Fetch-Site: cross-site"), 403, "another site is refused"),
    Case("fields", "an approval reason past REASON_MAX", post("/console/namespaces/{v.namespace}/workflows/wf/steps/gate/approve", with_csrf(reason="r" * (REASON_MAX + 1))), 400, f"reason: is longer than {REASON_MAX}"),
    Case("fields", "a retry of more than 100 dead letters", post("/console/namespaces/{v.namespace}/taskqueues/q/retry", lambda v: form(csrf=v.csrf) + b"&execution=a" * 101), 400, "execution: is given more than 100 times"),
    Case("fields", "a retry of a script", post("/console/namespaces/{v.namespace}/taskqueues/q/retry", lambda v: form(csrf=v.csrf, execution=HOSTILE)), 400, "execution: is not an execution id", HOSTILE),
    Case("fields", "a login token past TOKEN_MAX", login(form(token="t" * (TOKEN_MAX + 1))), 400, f"token: is longer than {TOKEN_MAX} characters", "t" * 500),
    Case("fields", "a login token past what a cookie keeps", login(form(token="t" * (COOKIE_TOKEN_MAX + 1))), 400, "token: is longer than a browser keeps in a cookie", "t" * 500),
    Case("fields", "a login token holding NUL", login(form(token="a\x00b")), 400, "token: holds NUL"),
    Case("fields", "a login token with spaces", login(form(token="a b")), 400, "token: holds spaces"),
    Case("fields", "a login form's unknown field", login(form(token="x", user="admin")), 400, "user: is not a field this page reads"),
    Case("fields", "a login token the API server does not know", login(form(token=FORGED)), 401, "the API server does not accept this token", FORGED),
    Case("fields", "a login from another site", login(form(token=FORGED), "Origin: http://evil.example"), 403, "a login from another site is refused"),
    # --- headers ---
    Case("headers", "a head one byte past 16 KiB", head_of(LIMITS.max_header_bytes + 1), 431, f"at most {LIMITS.max_header_bytes} bytes"),
    Case("headers", "a head of exactly 16 KiB (served)", head_of(LIMITS.max_header_bytes), 200, "Jobs"),
    Case("headers", "a huge login cookie", get("/console/jobs", f"Cookie: {COOKIE}=" + "c" * 12000, cookie=False), 303, TO_LOGIN),
    Case("headers", "a forged login cookie", get("/console/jobs", f"Cookie: {COOKIE}={FORGED}", cookie=False), 303, TO_LOGIN),
    Case("headers", "a tampered login cookie", lambda v: request("GET", "/console/jobs", f"Cookie: {v.cookie[:-4]}AAAA"), 303, TO_LOGIN),
    Case("headers", "a cookie that is a script", get("/console/jobs", f"Cookie: {COOKIE}={hostile_quoted()}", cookie=False), 303, TO_LOGIN, HOSTILE),
    Case("headers", "a garbage bearer token (it wins over the cookie)", get("/console/jobs", "Authorization: Bearer garbage"), 303, TO_LOGIN),
    Case("headers", "a bearer token of 10 KiB", get("/console/jobs", "Authorization: Bearer " + "b" * 10240), 303, TO_LOGIN),
    Case("headers", "another scheme's Authorization (the cookie serves)", get("/console/jobs", "Authorization: Basic Zm9vOmJhcg=="), 200, "Jobs"),
    Case("headers", "two hundred headers", get("/console/jobs", *(f"X-H{i}: {i}" for i in range(200))), 200, "Jobs"),
    Case("headers", "control bytes in a header", get("/console/jobs", "X-Evil: a\x00\x07b"), 400, NOT_HTTP),
    Case("headers", "a header without a name", get("/console/jobs", ": nameless"), 400, NOT_HTTP),
    Case("headers", "a request line that is not HTTP", lambda v: b"HELLO\r\n\r\n", 400, NOT_HTTP),
    Case("headers", "a POST without a login", suspend(with_csrf(reason="x"), cookie=False), 401, "log in first"),
    # --- bodies ---
    Case("bodies", "a Content-Length past 64 KiB", suspend(with_csrf(reason="x"), length=LIMITS.max_request_bytes + 1), 413, f"a body is at most {LIMITS.max_request_bytes} bytes"),
    Case("bodies", "a chunked body past 64 KiB", chunked_past_the_limit, 413, f"a body is at most {LIMITS.max_request_bytes} bytes"),
    Case("bodies", "a Content-Length that is not a number", suspend(with_csrf(reason="x"), length=-1), 400, NOT_HTTP),
    Case("bodies", "a body shorter than its Content-Length, then EOF", suspend(with_csrf(reason="x"), length=4096), 0, "", half_close=True),
]  # fmt: skip


@dataclass
class Held:
    """A socket kept open across rounds that the server must end within `within` seconds: closed
    unanswered (status 0), or answered `status` with `text`; `renew` opens its successor."""

    kind: str
    what: str
    sock: socket.socket
    status: int
    text: str
    within: float
    renew: Callable[[Viewer], Held] | None = None
    opened: float = field(default_factory=time.monotonic)
    trickle: bytes = b""  # what is still to send, a byte per round
    took: float = 0.0  # how long it was open, once the server ended it

    def age(self) -> float:
        return time.monotonic() - self.opened


def loris(viewer: Viewer) -> Held:
    """A head trickled a byte per round: the read timeout closes it, unanswered."""
    raw = request("GET", "/console/jobs", f"Cookie: {viewer.cookie}")
    held = Held("bodies", "a trickled head", connect(viewer), 0, "", READ_TIMEOUT_SECONDS, loris, trickle=raw[1:])
    held.sock.sendall(raw[:1])  # the read timeout runs from the first byte
    return held


def short_body(viewer: Viewer) -> Held:
    """A form promised 4 KiB long, 10 bytes of it sent, the socket kept open: the request's
    deadline ends it (the application's 503, DeadlineExceeded, and the connection closed)."""
    sock = connect(viewer)
    sock.sendall(request("POST", f"{viewer.job_path}/suspend", f"Cookie: {viewer.cookie}", body=b"reason=abc", length=4096))
    return Held("bodies", "a body short of its Content-Length", sock, 503, "DeadlineExceeded", REQUEST_TIMEOUT_SECONDS, short_body)


def flood(viewer: Viewer) -> list[Held]:
    """Idle connections from one peer, FLOOD_EXTRA past what it may hold: those past the cap are
    closed at once, the others after the read timeout; all unanswered."""
    count = LIMITS.connections_per_peer + FLOOD_EXTRA
    return [
        Held("connections", "an idle connection of a flood", connect(viewer, FLOOD_PEER), 0, "", READ_TIMEOUT_SECONDS)
        for _ in range(count)
    ]


def ended(held: Held) -> bool:
    """Whether the server ended `held` (checked as the Held says); else a byte more is trickled,
    and a socket kept past its bound fails the test."""
    readable, _, _ = select.select([held.sock], [], [], 0)
    if not readable:
        assert held.age() < held.within + SLACK_SECONDS, f"{held.what}: open {held.age():.1f}s, past {held.within}s"
        if held.trickle:
            with contextlib.suppress(OSError):
                held.sock.sendall(held.trickle[:1])
                held.trickle = held.trickle[1:]
        return False
    held.took = held.age()
    reply = read_reply(held.sock)
    held.sock.close()
    check(held.what, reply, held.status, held.text, "")
    return True


def sweep(held: list[Held]) -> list[Held]:
    """The held sockets the server ended since the last sweep, dropped from `held`."""
    gone = [one for one in held if ended(one)]
    for one in gone:
        held.remove(one)
    return gone


def check(what: str, reply: Reply, status: int, text: str, echo: str) -> None:
    """`reply` is `status` with `text` in it, never a 5xx but the request deadline's, and echoes
    neither the hostile script nor `echo`."""
    assert reply.status < 500 or (status, text) == (503, "DeadlineExceeded"), f"{what}: {reply.text[:600]}"
    assert reply.status == status, f"{what}: {reply.status}, not {status}: {reply.text[:600]}"
    assert text in reply.text, f"{what}: {text!r} not in the answer: {reply.text[:600]}"
    assert HOSTILE not in reply.text, f"{what}: the hostile value came back: {reply.text[:600]}"
    assert not echo or echo not in reply.text, f"{what}: the value came back"


def jobs_page(viewer: Viewer) -> float:
    """alice's Jobs page: 200 with her job, promptly; how long it took."""
    started = time.monotonic()
    reply = talk(viewer, request("GET", "/console/jobs", f"Cookie: {viewer.cookie}"), peer=ALICE_PEER)
    took = time.monotonic() - started
    check("alice's Jobs page", reply, 200, f">{viewer.job}<", "")
    assert took < PROMPT_SECONDS, f"alice's Jobs page took {took:.1f}s beside the hostile input"
    return took


@dataclass
class Console:
    cluster: KubeCluster
    fleet: OperatorFleet
    operator: OperatorProcess
    alice: Viewer


def log_in(host: str, port: int, token: str, namespace: str, job: str) -> Viewer:
    """alice's login through the form; her CSRF field from her job's page."""
    bare = Viewer(host, port, "", "", namespace, job)
    reply = talk(bare, request("POST", "/console/login", body=form(token=token)), peer=ALICE_PEER)
    assert reply.status == 303 and "Location: /console/jobs" in reply.head, reply.text
    cookie = re.search(rf"Set-Cookie: ({COOKIE}=[^;]+);", reply.head)
    assert cookie is not None, reply.head
    viewer = Viewer(host, port, cookie[1], "", namespace, job)
    page = talk(viewer, request("GET", viewer.job_path, f"Cookie: {viewer.cookie}"), peer=ALICE_PEER)
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.body.decode())
    assert page.status == 200 and csrf is not None, page.text[:600]
    viewer.csrf = csrf[1]
    return viewer


@pytest.fixture
def console(cluster: KubeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Console]:
    team = make_namespace(cluster, "con")
    fleet = OperatorFleet(cluster, tmp_path)
    port = free_port()
    operator = fleet.start(http={
        "apiPort": port, "readTimeoutSeconds": READ_TIMEOUT_SECONDS, "requestTimeoutSeconds": REQUEST_TIMEOUT_SECONDS,
    })  # fmt: skip
    try:
        wait_for(lambda: serving(f"http://127.0.0.1:{port}"), timeout=60, what="the operator serving the console")
        create_job(cluster, team, "nightly", cron="0 3 * * *")
        token = viewer_token(cluster, team, "alice", rules(approve=True))
        yield Console(cluster, fleet, operator, log_in("127.0.0.1", port, token, team, "nightly"))
    finally:
        fleet.finish(request)
        cluster.clear_namespace(team)


def test_another_tenants_job_fires_on_time_while_the_console_is_fed_hostile_input(console: Console) -> None:
    alice, sent, slowest = console.alice, Counter[str](), 0.0
    assert console.fleet.leader() is console.operator
    canary = Canary.start(console.cluster)
    held: list[Held] = []
    floods, at_once = 0, 0

    def hold(*opened: Held) -> None:
        held.extend(opened)
        sent.update(one.kind for one in opened)

    def settle(*, renewing: bool) -> bool:
        """Check the held sockets the server ended, renewing them while the rounds last; whether none is left."""
        nonlocal at_once
        for one in sweep(held):
            at_once += one.kind == "connections" and one.took < READ_TIMEOUT_SECONDS / 2
            if renewing and one.renew is not None:
                hold(one.renew(alice))
        return not held

    try:
        with ThreadPoolExecutor(SENDERS) as senders:
            hold(*(loris(alice) for _ in range(LORIS)), short_body(alice))
            rounds, due = 0, time.monotonic()
            until = due + ROUNDS_SECONDS
            while due < until:
                rounds, due = rounds + 1, due + ROUND_SECONDS
                if not any(one.kind == "connections" for one in held):
                    hold(*flood(alice))
                    floods += 1
                replies = senders.map(lambda case: (case, talk(alice, case.raw(alice), half_close=case.half_close)), CASES)
                for case, reply in replies:
                    check(case.what, reply, case.status, case.text, case.echo)
                    sent[case.kind] += 1
                slowest = max(slowest, jobs_page(alice))
                # the rest of the round is spent watching the held sockets for the server's end
                select.select([one.sock for one in held], [], [], max(0.0, due - time.monotonic()))
                settle(renewing=True)
        wait_for(lambda: settle(renewing=False), timeout=REQUEST_TIMEOUT_SECONDS + SLACK_SECONDS, what="the held sockets to end")
        assert at_once >= floods * FLOOD_EXTRA, f"{at_once} connections of {floods} floods closed at once"
        fired = canary.assert_fired_on_time()
        spec = get_job(console.cluster, alice.namespace, alice.job)["spec"]
        assert not spec.get("suspend"), f"a hostile form suspended alice's job: {spec}"
        assert console.operator.alive and console.fleet.leader() is console.operator
        print(
            f"hostile requests: {sum(sent.values())} in {rounds} rounds over {ROUNDS_SECONDS:g}s "
            f"({', '.join(f'{kind} {n}' for kind, n in sorted(sent.items()))}); alice's Jobs page at most "
            f"{slowest:.2f}s; {floods} floods of {LIMITS.connections_per_peer + FLOOD_EXTRA} connections; "
            f"the canary fired {len(fired)} occurrences on time"
        )
    finally:
        for one in held:
            one.sock.close()
        canary.remove()
