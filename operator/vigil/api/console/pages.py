"""The console's routes: which page a request asks for, the viewer checked, the page rendered.

    GET  /console                                   -> the Jobs page
    GET  /console/static/{htmx.min.js,console.css}  the vendored script and the style (open)
    GET  /console/login, POST /console/login        the login form; a token the API server
                                                    accepts becomes the login cookie
    POST /console/logout                            forget it
    GET  /console/jobs?namespace=&health=&q=        Jobs, filtered
    GET  /console/namespaces/{ns}/jobs/{job}        a job: ledger, executions, attempts, logs
    POST /console/namespaces/{ns}/jobs/{job}/{run,suspend,resume}
    GET  /console/workflows                         Workflows in the namespaces the viewer may list
    GET  /console/namespaces/{ns}/workflows/{wf}    a workflow: its DAG (SVG) and steps
    GET  /console/namespaces/{ns}/workflows/{wf}/dag     the DAG alone (htmx polls it)
    POST /console/namespaces/{ns}/workflows/{wf}/steps/{step}/{approve,reject}
    GET  /console/dead-letters, /console/taskqueues, /console/watchdog   (vigil.api.console.volume)
    POST /console/namespaces/{ns}/taskqueues/{q}/retry

Every page but login and the static files needs a viewer (vigil.api.console.session): without
one a GET is sent to the login form, a POST is 401. Each page asks its SubjectAccessReviews
(vigil.api.console.access) before it reads. A POST needs the CSRF field and a same-site
origin; its write is the viewer's own (vigil.api.console.sources).
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import re
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import jinja2

from vigil.api import exchange as exchanges
from vigil.api.console import dag, fields, session, views
from vigil.api.console.access import Viewer, list_jobs_access
from vigil.api.console.sources import ConsoleSources, Refused
from vigil.api.console.volume import RETRY_MAX, VolumePages, retry_form
from vigil.api.guards import Guard
from vigil.api.problems import Answer
from vigil.api.queue import QueueApi
from vigil.core.access import ReviewUnavailable
from vigil.core.ids import step_execution_id
from vigil.core.ports import HistoryUnavailable
from vigil.core.steps import spec_named
from vigil.core.timeparse import format_rfc3339

log = logging.getLogger(__name__)

PREFIX = "/console"
HTML = "text/html; charset=utf-8"
_NS = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_NAME = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
_STEP = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
JOB_PATH = re.compile(
    rf"^/console/namespaces/(?P<ns>{_NS})/jobs/(?P<name>{_NAME})(?:/(?P<verb>run|suspend|resume))?$"
)
WORKFLOW_PATH = re.compile(
    rf"^/console/namespaces/(?P<ns>{_NS})/workflows/(?P<name>{_NAME})"
    rf"(?:/(?P<dag>dag)|/steps/(?P<step>{_STEP})/(?P<verb>approve|reject))?$"
)
QUEUE_RETRY_PATH = re.compile(
    rf"^/console/namespaces/(?P<ns>{_NS})/taskqueues/(?P<name>{_NAME})/retry$"
)
STATIC = {"htmx.min.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
VOLUME_PAGES = (PREFIX + "/dead-letters", PREFIX + "/taskqueues", PREFIX + "/watchdog")
#: Jobs listed on one Jobs page at most (the first by namespace and name); the page says how
#: many matched, and the filters narrow it.
JOB_ROWS = 1000
#: Executions shown from the history database on a job's page (the newest).
HISTORY_ROWS = 20
#: Stored log tails shown on a job's page (of the newest executions that have one).
LOG_ROWS = 5


class _Templates(jinja2.Environment):
    """Strict about the templates' own names (a name a route forgot to pass fails the render,
    and the unit tests render every page), lenient about the fields of the objects shown: those
    are tenant-shaped mappings, and a field an object lacks renders empty."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        found = super().getattr(obj, attribute)
        if isinstance(found, jinja2.Undefined) and isinstance(
            obj, Mapping | jinja2.ChainableUndefined
        ):
            return jinja2.ChainableUndefined(obj=obj, name=attribute)
        return found


@functools.cache
def _templates() -> jinja2.Environment:
    made = _Templates(
        loader=jinja2.PackageLoader("vigil.api.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    made.filters["when"] = _when
    return made


def _when(value: Any) -> str:
    """A time as the rest of Vigil writes it (RFC 3339, UTC, `Z`); "" for none."""
    return format_rfc3339(value) if isinstance(value, datetime) else str(value or "")


def _render(template: str, **context: Any) -> bytes:
    """`template` rendered with `context` and the console's PREFIX (every template's links and
    htmx targets start with it: a partial rendered without it polled /namespaces/... and 404)."""
    return _templates().get_template(template).render(prefix=PREFIX, **context).encode()


@functools.cache
def _static(name: str) -> bytes:
    return (importlib.resources.files("vigil.api.console") / "static" / name).read_bytes()


class Console:
    """The console's pages, from `sources`, for viewers the `guard` accepts."""

    def __init__(
        self, sources: ConsoleSources, guard: Guard | None, queue_api: QueueApi | None = None
    ) -> None:
        self._sources = sources
        self._guard = guard
        self._volume_pages = VolumePages(sources.reads, queue_api)

    @staticmethod
    def serves(path: str) -> bool:
        return path == PREFIX or path.startswith(PREFIX + "/")

    def answer(self, method: str, path: str, query: str, token: str | None, body: bytes) -> Answer:
        exchange = exchanges.current()
        static = method in ("GET", "HEAD") and path.startswith(PREFIX + "/static/")
        session.secure(exchange, cached=static)
        if static:
            return self._static_file(path.removeprefix(PREFIX + "/static/"))
        if method not in ("GET", "HEAD", "POST"):
            return self._page(
                405, "error.html", title="Not allowed", message=f"{method} is not served here"
            )
        try:
            status, kind, page = self._route(
                method, path, query, session.token_of(exchange, token), body
            )
            return status, kind, session.compressed(exchange, page) if kind == HTML else page
        except fields.BadField as error:
            return self._page(400, "error.html", title="Bad request", message=str(error))
        except (ReviewUnavailable, HistoryUnavailable) as error:
            log.warning("console: %s", error)
            return self._page(
                503,
                "error.html",
                title="Try again",
                message="a store or the API server did not answer; try again",
            )

    def _route(self, method: str, path: str, query: str, token: str | None, body: bytes) -> Answer:
        if path in (PREFIX, PREFIX + "/"):
            return _redirect(PREFIX + "/jobs")
        if path == PREFIX + "/login":
            return self._login(method, body)
        viewer = self._viewer(token)
        if viewer is None:
            if method == "POST":
                return self._page(
                    401,
                    "error.html",
                    title="Log in",
                    message="log in first: your token is missing or not accepted",
                )
            return _redirect(PREFIX + "/login")
        if method == "POST":
            refused = _post_refusal(viewer, body)
            if refused is not None:
                return self._page(
                    403, "error.html", title="Refused", message=refused, viewer=viewer
                )
        if path == PREFIX + "/logout" and method == "POST":
            exchanges.current().answer_headers.append(
                ("Set-Cookie", session.logout_cookie(tls=exchanges.current().tls))
            )
            return _redirect(PREFIX + "/login")
        if path == PREFIX + "/jobs" and method != "POST":
            return self._jobs(viewer, query)
        if path == PREFIX + "/workflows" and method != "POST":
            return self._workflows(viewer, query)
        if method != "POST" and path in VOLUME_PAGES:
            return self._volume(viewer, path, query)
        match = QUEUE_RETRY_PATH.match(path)
        if match is not None and method == "POST":
            return self._retry(viewer, match["ns"], match["name"], body)
        match = JOB_PATH.match(path)
        if match is not None and (match["verb"] is None) == (method != "POST"):
            return self._job(
                viewer, match["ns"], match["name"], verb=match["verb"], body=body, query=query
            )
        match = WORKFLOW_PATH.match(path)
        if match is not None and (match["verb"] is None) == (method != "POST"):
            return self._workflow(viewer, match, body=body, query=query)
        return self._not_found("no such page", viewer)

    # --- login ------------------------------------------------------------------------------

    def _viewer(self, token: str | None) -> Viewer | None:
        if self._guard is None or not token:
            return None
        user = self._guard.authenticator.authenticate(token)
        return None if user is None else Viewer(self._guard, user, token)

    def _login(self, method: str, body: bytes) -> Answer:
        if method != "POST":
            return self._page(200, "login.html", title="Log in", message="")
        exchange = exchanges.current()
        if session.cross_site(exchange):
            return self._page(
                403, "login.html", title="Log in", message="a login from another site is refused"
            )
        form = fields.parse(_form_text(body), frozenset({"token"}), where="form")
        token = fields.text(form, "token", limit=fields.TOKEN_MAX, required=True)
        if any(ch.isspace() for ch in token):
            raise fields.BadField("token", "holds spaces: paste the token alone")
        if len(urllib.parse.quote(token, safe="")) > session.COOKIE_TOKEN_MAX:
            raise fields.BadField(
                "token",
                f"is longer than a browser keeps in a cookie ({session.COOKIE_TOKEN_MAX}): use an auth proxy",
            )
        if self._viewer(token) is None:
            return self._page(
                401,
                "login.html",
                title="Log in",
                message="the API server does not accept this token",
            )
        exchange.answer_headers.append(
            ("Set-Cookie", session.login_cookie(token, tls=exchange.tls))
        )
        return _redirect(PREFIX + "/jobs")

    # --- jobs -------------------------------------------------------------------------------

    def _jobs(self, viewer: Viewer, query: str) -> Answer:
        chosen = fields.job_filter(query)
        namespaces = viewer.namespaces(self._sources.reads.namespaces())
        shown = [chosen.namespace] if chosen.namespace else namespaces
        if chosen.namespace and chosen.namespace not in namespaces:
            shown = [chosen.namespace] if viewer.may(list_jobs_access(chosen.namespace)) else []
        rows = [views.job_row(obj) for ns in shown for obj in self._sources.reads.jobs(ns)]
        rows = [
            r
            for r in views.sorted_rows(rows)
            if views.matches(r, health_word=chosen.health, text=chosen.text)
        ]
        return self._page(
            200, "jobs.html", title="Jobs", viewer=viewer, rows=rows[:JOB_ROWS], matched=len(rows),
            namespaces=namespaces, chosen=chosen, healths=fields.HEALTHS,
        )  # fmt: skip

    def _job(
        self,
        viewer: Viewer,
        namespace: str,
        name: str,
        *,
        verb: str | None,
        body: bytes,
        query: str,
    ) -> Answer:
        fields.parse(query, frozenset())
        if not viewer.may_get_job(namespace, name):
            return self._forbidden(viewer, f"get scheduledjob {name} in namespace {namespace}")
        here = f"{PREFIX}/namespaces/{namespace}/jobs/{name}"
        if verb is not None:
            return _after_post(here, *self._steer_job(viewer, namespace, name, verb, body))
        notice, refused = session.take_notice(exchanges.current())
        obj = self._sources.reads.job(namespace, name)
        if obj is None:
            return self._not_found(f"no scheduledjob {name} in namespace {namespace}", viewer)
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        live = (
            [views.execution_row(e) for e in self._sources.reads.executions(namespace, uid)]
            if viewer.may_list_executions(namespace)
            else None
        )
        history, attempts, logs = self._job_history(viewer, namespace, name)
        return self._page(
            200, "job.html", title=name, viewer=viewer, row=views.job_row(obj), spec=obj.get("spec") or {},
            occurrences=views.occurrences(obj), live=live, history=history, attempts=attempts, logs=logs, notice=notice,
            refused=refused,
            csrf=session.csrf_token(viewer.token), reason_max=fields.REASON_MAX,
        )  # fmt: skip

    def _job_history(
        self, viewer: Viewer, namespace: str, name: str
    ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """The job's executions in the history database (None: not allowed or not kept), each one's
        attempts, and the stored log tails of the newest ones (when the viewer may read logs)."""
        if self._sources.job_executions is None or not viewer.may_list_executions(namespace):
            return None, {}, {}
        page = self._sources.job_executions(namespace, name, HISTORY_ROWS, None)
        attempts = {e.execution_id: self._attempts(e.execution_id) for e in page.executions}
        logs: dict[str, Any] = {}
        if self._sources.log_tail is not None and viewer.may_read_logs(namespace):
            for summary in page.executions[:LOG_ROWS]:
                tail = self._sources.log_tail(namespace, summary.execution_id, None)
                if tail is not None:
                    logs[summary.execution_id] = tail
        return page.executions, attempts, logs

    def _attempts(self, execution_id: str) -> list[Any]:
        timeline = self._sources.timeline
        return [] if timeline is None else list(timeline(execution_id))

    def _steer_job(
        self, viewer: Viewer, namespace: str, name: str, verb: str, body: bytes
    ) -> tuple[str, int]:
        form = fields.parse(
            _form_text(body), frozenset({session.CSRF_FIELD, "reason"}), where="form"
        )
        reason = fields.text(form, "reason", limit=fields.REASON_MAX, required=verb == "suspend")
        writes = self._sources.writes
        if writes is None:
            return "this console cannot write (no writer was wired)", 503
        actions: dict[str, Callable[[], str]] = {
            "run": lambda: writes.run_now(viewer.token, namespace, name),
            "suspend": lambda: writes.suspend(viewer.token, namespace, name, reason),
            "resume": lambda: writes.resume(viewer.token, namespace, name),
        }
        return _steered(actions[verb])

    # --- workflows --------------------------------------------------------------------------

    def _workflows(self, viewer: Viewer, query: str) -> Answer:
        chosen = fields.parse(query, frozenset({"namespace"}))
        only = fields.namespace(chosen)
        namespaces = viewer.namespaces(self._sources.reads.namespaces(), workflows=True)
        shown = [ns for ns in namespaces if not only or ns == only]
        rows = [
            {"namespace": ns, "name": str(obj["metadata"]["name"]), "phase": str((obj.get("status") or {}).get("phase") or "Pending"),
             "progress": str((obj.get("status") or {}).get("progress") or "")}
            for ns in shown for obj in self._sources.reads.workflows(ns)
        ]  # fmt: skip
        return self._page(
            200,
            "workflows.html",
            title="Workflows",
            viewer=viewer,
            rows=rows,
            namespaces=namespaces,
            only=only,
        )

    def _workflow(self, viewer: Viewer, match: re.Match[str], *, body: bytes, query: str) -> Answer:
        fields.parse(query, frozenset())
        namespace, name = match["ns"], match["name"]
        if not viewer.may_get_workflow(namespace, name):
            return self._forbidden(viewer, f"get workflow {name} in namespace {namespace}")
        if match["verb"] is not None:
            here = f"{PREFIX}/namespaces/{namespace}/workflows/{name}"
            return _after_post(
                here, *self._decide(viewer, namespace, name, match["step"], match["verb"], body)
            )
        notice, refused = (
            session.take_notice(exchanges.current()) if not match["dag"] else ("", False)
        )
        obj = self._sources.reads.workflow(namespace, name)
        if obj is None:
            return self._not_found(f"no workflow {name} in namespace {namespace}", viewer)
        steps = views.step_rows(obj, values=not match["dag"])
        context: dict[str, Any] = {
            "namespace": namespace, "name": name, "layout": dag.layout(steps), "box_width": dag.BOX_WIDTH,
            "box_height": dag.BOX_HEIGHT, "phase": str((obj.get("status") or {}).get("phase") or "Pending"),
        }  # fmt: skip
        if match["dag"]:
            return 200, HTML, _render("dag.html", **context)
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        return self._page(
            200, "workflow.html", title=name, viewer=viewer, steps=steps, notice=notice, refused=refused,
            csrf=session.csrf_token(viewer.token), reason_max=fields.REASON_MAX,
            logs=self._step_logs(viewer, namespace, uid, steps), attempts=views.step_events(obj),
            **context,
        )  # fmt: skip

    def _step_logs(
        self, viewer: Viewer, namespace: str, uid: str, steps: list[views.StepRow]
    ) -> dict[str, Any]:
        """The stored log tail of the latest attempt of each step that runs pods that has one (a step's attempts
        share its execution id), for a viewer who may read logs."""
        log_tail = self._sources.log_tail
        if log_tail is None or not viewer.may_read_logs(namespace):
            return {}
        tails = {}
        for step in steps:
            spec = spec_named(step.type)
            if spec is not None and spec.has_pod_logs and step.attempts:
                tail = log_tail(namespace, step_execution_id(uid, step.id), None)
                if tail is not None:
                    tails[step.id] = tail
        return tails

    def _decide(
        self, viewer: Viewer, namespace: str, name: str, step: str, verb: str, body: bytes
    ) -> tuple[str, int]:
        form = fields.parse(
            _form_text(body), frozenset({session.CSRF_FIELD, "reason"}), where="form"
        )
        reason = fields.text(form, "reason", limit=fields.REASON_MAX, required=True)
        writes = self._sources.writes
        if writes is None:
            return "this console cannot write (no writer was wired)", 503
        return _steered(lambda: writes.decide(viewer.token, namespace, name, step, verb, reason))

    # --- the volume tier and the watchdog ---------------------------------------------------

    def _volume(self, viewer: Viewer, path: str, query: str) -> Answer:
        only = fields.namespace(fields.parse(query, frozenset({"namespace"})))
        pages = self._volume_pages
        if path == PREFIX + "/dead-letters":
            notice, refused = session.take_notice(exchanges.current())
            return self._page(
                200, "deadletters.html", title="Dead letters", viewer=viewer, queues=pages.dead_letters(viewer, only),
                notice=notice, refused=refused, retry_max=RETRY_MAX,
            )  # fmt: skip
        if path == PREFIX + "/taskqueues":
            return self._page(
                200,
                "taskqueues.html",
                title="Task queues",
                viewer=viewer,
                queues=pages.taskqueues(viewer, only),
            )
        return self._page(
            200,
            "watchdog.html",
            title="Watchdog",
            viewer=viewer,
            alarms=pages.watchdog(viewer, only),
        )

    def _retry(self, viewer: Viewer, namespace: str, queue: str, body: bytes) -> Answer:
        ids, _ = retry_form(_form_text(body))
        lines = self._volume_pages.retry(viewer, namespace, queue, ids)
        refused = any(": retried" not in line for line in lines)
        return _after_post(PREFIX + "/dead-letters", "; ".join(lines), 409 if refused else 200)

    # --- answers ----------------------------------------------------------------------------

    def _forbidden(self, viewer: Viewer, what: str) -> Answer:
        return self._page(
            403,
            "error.html",
            title="Forbidden",
            message=f"{viewer.user.name} may not {what}",
            viewer=viewer,
        )

    def _not_found(self, message: str, viewer: Viewer) -> Answer:
        return self._page(404, "error.html", title="Not found", message=message, viewer=viewer)

    def _page(
        self,
        status: int,
        template: str,
        *,
        title: str,
        viewer: Viewer | None = None,
        **context: Any,
    ) -> Answer:
        context.setdefault("csrf", session.csrf_token(viewer.token) if viewer else "")
        return status, HTML, _render(template, title=title, viewer=viewer, **context)

    def _static_file(self, name: str) -> Answer:
        if name not in STATIC:
            return self._page(404, "error.html", title="Not found", message="no such file")
        return 200, STATIC[name], session.compressed(exchanges.current(), _static(name))


def _after_post(page: str, notice: str, status: int) -> Answer:
    """See `page` (Post/Redirect/Get), which shows `notice` once; a status other than 200 marks it
    a refusal. Reloading that page repeats nothing."""
    exchange = exchanges.current()
    exchange.answer_headers.append(
        ("Set-Cookie", session.notice_cookie(notice, refused=status != 200, tls=exchange.tls))
    )
    return _redirect(page)


def _steered(action: Callable[[], str]) -> tuple[str, int]:
    try:
        return action(), 200
    except Refused as refusal:
        return f"refused: {refusal}", 409


def _post_refusal(viewer: Viewer, body: bytes) -> str | None:
    """Why a POST is refused before its form is read for anything else, or None."""
    if session.cross_site(exchanges.current()):
        return "a request from another site is refused"
    if not session.csrf_valid(viewer.token, fields.csrf_of(_form_text(body))):
        return "csrf: the form's CSRF field is missing or wrong; reload the page and try again"
    return None


def _form_text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise fields.BadField("form", "is not UTF-8") from None


def _redirect(location: str) -> Answer:
    exchanges.current().answer_headers.append(("Location", location))
    return 303, HTML, b""
