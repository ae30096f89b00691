"""`kubectl vigil queue …`: a TaskQueue's state, jobs and dead letters, and retrying them.

    kubectl vigil queue stats [NAME]               each TaskQueue's status (the API server), and
                                                   per priority and tenant (the operator's API)
    kubectl vigil queue jobs NAME                  its jobs, newest first, a page at a time
    kubectl vigil queue dead-letters NAME          its dead executions, the longest dead first
    kubectl vigil queue retry NAME ID... | --all-dead
                                                   run dead (or cancelled) executions again

What the TaskQueue's status holds comes from the API server, as `kubectl get tq` shows it. The
rest lives in the queue store, which only the operator reaches: it is asked through the
operator's HTTP API (vigil.api.queue) with `vigil.client`, at the address and as the caller
that `kubectl vigil executions` uses (cli/operatorapi.py: ``--api-url``/``VIGIL_API_URL``, the
kubeconfig's bearer token or ``VIGIL_API_TOKEN``). The operator checks the caller's verb on
the TaskQueue's executions (the RBAC subresource ``taskqueues/executions``): ``get`` to read,
``update`` to retry.

`stats` shows the statuses even when the operator's API cannot be asked (and says why on
stderr); the other verbs need it, and end with one line saying why it failed: no address,
the volume tier off on that operator, a refusal, or no answer. `retry` retries each execution
on its own, prints what it retried and what was refused and why, and exits 1 if anything was.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from vigil.cli.cluster import Cluster, add_namespace_options
from vigil.cli.errors import EXIT_API_FAILURE, BadInput, Refused
from vigil.cli.operatorapi import MESSAGE_MAX, HistoryNotShown, add_tls_options, operator_api
from vigil.cli.output import add_output_option, emit
from vigil.cli.tables import age, human_duration, render_table
from vigil.client import ApiError, Breakdown, Client, DeadLetter, QueueJob
from vigil.core.conditions import ConditionType
from vigil.core.queue import QUEUE_PAGE_DEFAULT, QUEUE_PAGE_MAX
from vigil.model import GROUP, VERSION
from vigil.model.names import TASK_QUEUES

Table = tuple[list[str], list[list[object]]]
STATS_COLUMNS = ["NAME", "READY", "LEASED", "DEAD", "OLDEST", "OBJECTIVE", "BEHIND", "OK/MIN", "DEAD/MIN", "AGE"]
BREAKDOWN_COLUMNS = ["PRIORITY", "TENANT", "READY", "LEASED", "DEAD", "OLDEST"]
JOB_COLUMNS = ["JOB", "TASK", "PRIORITY", "TENANT", "ENABLED", "LAST", "AGE"]
DEAD_COLUMNS = ["EXECUTION", "TASK", "TENANT", "PRIORITY", "ATTEMPT", "DEAD FOR", "ERROR"]
VOLUME_TIER_OFF = "VolumeTierOff"
#: A TaskQueue's name (a DNS subdomain, as every object's) and a namespace's (a DNS label).
QUEUE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class Session:
    """The cluster and the operator's API as one command needs them, each made when first asked
    (a verb given `-n` and ``VIGIL_API_TOKEN`` never reads the kubeconfig)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._cluster: Cluster | None = None
        self._client: Client | None = None

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster()
        return self._cluster

    @property
    def namespace(self) -> str:
        given: str | None = self._args.namespace
        namespace = given or self.cluster.namespace(None)
        if not NAMESPACE_NAME.fullmatch(namespace):
            raise BadInput(f"{namespace!r} is not a namespace name (a DNS label)")
        return namespace

    def client(self) -> Client:
        """The operator's API as the caller; HistoryNotShown when there is no address or token."""
        if self._client is None:
            api = operator_api(self._args, lambda: self.cluster.api, environ=os.environ)
            self._client = Client(api.url, token=api.token, timeout=api.timeout_seconds)
        return self._client


def refusal(error: ApiError, url: str) -> str:
    """One line saying why the operator's API did not answer what was asked."""
    message = " ".join(error.message.split())[:MESSAGE_MAX] or "(no message)"
    if error.status == 0:
        return f"cannot reach the operator's API at {url}: {message}"
    if error.status == 401:
        return f"the operator's API at {url} did not accept your token (401); set VIGIL_API_TOKEN"
    if error.status == 404 and error.reason == VOLUME_TIER_OFF:
        return f"the volume tier is off on the operator at {url} (its queue.dsn is empty): it has no queue store"
    if error.status == 404 and error.reason != "NotFound":
        return f"the operator's API at {url} does not serve the queue listings (an operator older than this plugin?)"
    return f"the operator's API at {url} answered {error.status}: {message}"


def _client(session: Session) -> Client:
    """The operator's API; BadInput (exit 2) when no address or token is given."""
    try:
        return session.client()
    except HistoryNotShown as why:
        raise BadInput(str(why)) from None


def _asked(session: Session, call: Callable[[Client], Any]) -> Any:
    """`call` on the operator's API; its failure as one line (Refused: exit 1)."""
    client = _client(session)
    try:
        return call(client)
    except ApiError as error:
        raise Refused(refusal(error, client.base_url)) from None


# -- stats ---------------------------------------------------------------------------------------


def _condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def stats_table(objs: Sequence[Mapping[str, Any]], *, now: datetime) -> Table:
    """The TaskQueues' statuses, by name; a queue the operator has not counted yet shows "-"."""
    rows: list[list[object]] = []
    for obj in sorted(objs, key=lambda o: str(o["metadata"]["name"])):
        status = obj.get("status") or {}
        counted = "ready" in status
        behind = _condition(obj, ConditionType.BEHIND)
        created = obj["metadata"].get("creationTimestamp")
        rows.append([
            obj["metadata"]["name"],
            status.get("ready") if counted else None,
            status.get("leased") if counted else None,
            status.get("dead") if counted else None,
            status.get("oldestReadyAge"),
            ((obj.get("spec") or {}).get("objective") or {}).get("oldestReadyAge"),
            behind.get("status") if behind else None,
            status.get("succeededPerMinute") if counted else None,
            status.get("deadPerMinute") if counted else None,
            age(datetime.fromisoformat(created.replace("Z", "+00:00")) if created else None, now),
        ])  # fmt: skip
    return list(STATS_COLUMNS), rows


def breakdown_table(rows: Sequence[Breakdown]) -> Table:
    return list(BREAKDOWN_COLUMNS), [
        [
            b.priority, b.tenant or '""', b.ready, b.leased, b.dead,
            None if b.oldest_ready_seconds is None else human_duration(timedelta(seconds=b.oldest_ready_seconds)),
        ]
        for b in rows
    ]  # fmt: skip


def _task_queues(session: Session, name: str | None) -> list[dict[str, Any]]:
    custom = session.cluster.custom
    namespace = session.namespace
    if name is None:
        found = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, TASK_QUEUES)
        return list(found["items"])
    try:
        return [custom.get_namespaced_custom_object(GROUP, VERSION, namespace, TASK_QUEUES, name)]
    except ApiException as err:
        if err.status == 404:
            raise BadInput(f'taskqueue "{name}" not found in namespace "{namespace}"') from None
        raise


def _breakdowns(session: Session, names: Sequence[str]) -> tuple[dict[str, tuple[Breakdown, ...]], str | None]:
    """Each queue's breakdown from the operator's API, and why none could be asked (or None)."""
    found: dict[str, tuple[Breakdown, ...]] = {}
    try:
        client = session.client()
        for name in names:
            found[name] = client.queue_stats(session.namespace, name)
    except HistoryNotShown as why:
        return found, str(why)
    except ApiError as error:
        return found, refusal(error, session.client().base_url)
    return found, None


def cmd_stats(args: argparse.Namespace) -> int:
    session = Session(args)
    objs = _task_queues(session, args.name)
    names = [str(obj["metadata"]["name"]) for obj in objs]
    breakdowns, why_not = _breakdowns(session, names) if names else ({}, None)
    if why_not is not None:
        print(f"kubectl vigil: the breakdown per priority and tenant is not shown: {why_not}", file=sys.stderr)
    if args.output != "table":
        queues = [
            {
                "namespace": obj["metadata"]["namespace"], "name": obj["metadata"]["name"],
                "status": obj.get("status") or {},
                "breakdown": _plain(breakdowns[name]) if name in breakdowns else None,
            }
            for obj, name in zip(objs, names, strict=True)
        ]  # fmt: skip
        return emit(args, {"queues": queues}, "")
    if not objs:
        print(f'No taskqueues in namespace "{session.namespace}".', file=sys.stderr)
        return 0
    print(render_table(*stats_table(objs, now=datetime.now(UTC))))
    for name in names:
        if breakdowns.get(name):
            print(f"\n{name}: by priority and tenant")
            print(render_table(*breakdown_table(breakdowns[name])))
    return 0


# -- jobs and dead letters -------------------------------------------------------------------------


def jobs_table(jobs: Sequence[QueueJob], *, now: datetime) -> Table:
    return list(JOB_COLUMNS), [
        [j.job_id, j.task, j.priority, j.tenant or '""', str(j.enabled).lower(), j.last_state, age(j.created_at, now)]
        for j in jobs
    ]


def dead_letters_table(dead: Sequence[DeadLetter]) -> Table:
    return list(DEAD_COLUMNS), [
        [
            d.execution_id, d.task, d.tenant or '""', d.priority, f"{d.attempt}/{d.max_attempts}",
            human_duration(timedelta(seconds=d.age_seconds)), d.error,
        ]
        for d in dead
    ]  # fmt: skip


def _listed(args: argparse.Namespace, key: str, items: Sequence[Any], token: str | None, table: Table) -> int:
    """A page as a table (or JSON under `key`), and the token of the next one on stderr."""
    if args.output != "table":
        return emit(args, {key: _plain(items), "continue": token}, "")
    if not items:
        noun = {"jobs": "jobs", "deadLetters": "dead executions"}[key]
        print(f'No {noun} in taskqueue "{args.name}" (this page).', file=sys.stderr)
    else:
        print(render_table(*table))
    if token:
        print(f"kubectl vigil: more: add --continue {token}", file=sys.stderr)
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    session = Session(args)
    page = _asked(session, lambda c: c.queue_jobs(session.namespace, args.name, limit=args.limit, cont=args.cont))
    return _listed(args, "jobs", page.jobs, page.continue_token, jobs_table(page.jobs, now=datetime.now(UTC)))


def cmd_dead_letters(args: argparse.Namespace) -> int:
    session = Session(args)
    page = _asked(session, lambda c: c.dead_letters(session.namespace, args.name, limit=args.limit, cont=args.cont))
    dead = page.dead_letters
    return _listed(args, "deadLetters", dead, page.continue_token, dead_letters_table(dead))


# -- retry -----------------------------------------------------------------------------------------


def _all_dead(client: Client, namespace: str, name: str) -> list[str]:
    """Every dead execution of the queue, the longest dead first, read page after page."""
    found: list[str] = []
    token: str | None = None
    while True:
        page = client.dead_letters(namespace, name, limit=QUEUE_PAGE_MAX, cont=token)
        found += [d.execution_id for d in page.dead_letters]
        token = page.continue_token
        if not token:
            return found


def _fatal(error: ApiError) -> bool:
    """A failure that every other retry would meet too: no answer, no token, no queue store."""
    return error.status in (0, 401) or error.reason == VOLUME_TIER_OFF


def retry_one(client: Client, namespace: str, name: str, execution_id: str) -> str | None:
    """Retry one execution of the queue; None when done, else why not. Asked within the queue,
    so the operator authorises the caller on it before reading anything, and an execution of
    another queue is not found there (and not retried)."""
    try:
        client.retry(execution_id, queue=(namespace, name))
    except ValueError as error:
        return str(error)
    except ApiError as error:
        if _fatal(error):
            raise Refused(refusal(error, client.base_url)) from None
        if error.status == 404 and error.reason == "NotFound":
            return f"it is not in taskqueue {namespace}/{name}"
        return " ".join(error.message.split())[:MESSAGE_MAX]
    return None


def cmd_retry(args: argparse.Namespace) -> int:
    if bool(args.executions) == bool(args.all_dead):
        raise BadInput("queue retry: give EXECUTION ids or --all-dead (not both)")
    session = Session(args)
    namespace = session.namespace
    if args.all_dead:
        ids = _asked(session, lambda c: _all_dead(c, namespace, args.name))
        if not ids:
            print(f'No dead executions in taskqueue "{args.name}" in namespace "{namespace}".', file=sys.stderr)
            return 0
    else:
        ids = list(dict.fromkeys(args.executions))
    client = _client(session)
    results = []
    for execution_id in ids:
        why = retry_one(client, namespace, args.name, execution_id)
        results.append({"executionId": execution_id, "retried": why is None, "reason": why})
    lines = [f"retried {r['executionId']}" if r["retried"] else f"refused {r['executionId']}: {r['reason']}" for r in results]
    emit(args, {"results": results}, "\n".join(lines))
    refused = sum(not r["retried"] for r in results)
    print(f"{len(ids) - refused} retried, {refused} refused", file=sys.stderr)
    return EXIT_API_FAILURE if refused else 0


# -- the parsers -----------------------------------------------------------------------------------


def queue_name(text: str) -> str:
    """NAME: a TaskQueue's name."""
    if not QUEUE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a TaskQueue name (lowercase letters, digits, '-' and '.')")
    return text


def page_limit(text: str) -> int:
    """`--limit`: a page's rows, 1 to QUEUE_PAGE_MAX."""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= QUEUE_PAGE_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {QUEUE_PAGE_MAX}, not {text!r}")
    return int(text)


def _plain(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Dataclasses as JSON-ready dicts (times as RFC 3339)."""
    return [
        {key: value.isoformat() if isinstance(value, datetime) else value for key, value in dataclasses.asdict(item).items()}
        for item in items
    ]


def _common(parser: argparse.ArgumentParser, *, output: bool = True) -> None:
    parser.add_argument(
        "--api-url", help="the operator's HTTP API, e.g. https://127.0.0.1:8080 after kubectl port-forward "
        "(default: $VIGIL_API_URL)",
    )  # fmt: skip
    add_tls_options(parser)
    if output:
        add_output_option(parser)
    add_namespace_options(parser)


def add_parsers(sub: Any) -> None:
    """Register `queue` and its verbs on the CLI's subparsers."""
    queue = sub.add_parser("queue", help="a TaskQueue's state, jobs and dead letters (the volume tier)")
    verbs = queue.add_subparsers(dest="queue_command", required=True)

    st = verbs.add_parser("stats", help="each TaskQueue's status, and per priority and tenant from the operator")
    st.add_argument("name", nargs="?", type=queue_name, help="one TaskQueue (default: every one of the namespace)")
    _common(st)
    st.set_defaults(func=cmd_stats)

    for verb, func, text in (
        ("jobs", cmd_jobs, "the queue's jobs, newest first"),
        ("dead-letters", cmd_dead_letters, "the queue's dead executions, the longest dead first"),
    ):
        listing = verbs.add_parser(verb, help=text)
        listing.add_argument("name", type=queue_name, help="a TaskQueue")
        listing.add_argument(
            "--limit", type=page_limit, default=QUEUE_PAGE_DEFAULT, metavar="N",
            help=f"rows in the page (1 to {QUEUE_PAGE_MAX}; default {QUEUE_PAGE_DEFAULT})",
        )  # fmt: skip
        listing.add_argument("--continue", dest="cont", metavar="TOKEN", help="the next page (printed after a page)")
        _common(listing)
        listing.set_defaults(func=func)

    rt = verbs.add_parser("retry", help="run dead (or cancelled) executions of the queue again, same ids")
    rt.add_argument("name", type=queue_name, help="a TaskQueue")
    rt.add_argument("executions", nargs="*", metavar="EXECUTION", help="execution ids")
    rt.add_argument("--all-dead", action="store_true", help="every dead execution of the queue")
    _common(rt)
    rt.set_defaults(func=cmd_retry)
