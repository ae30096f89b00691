"""The API server as the CLI sees it: a connection, a default namespace, and lookups by name.

Only the verbs that need a cluster create a `Cluster` (`next -f` never does).
The namespace defaults to the kubeconfig context's, as kubectl's does. A name
that does not exist is the user's mistake, so lookups turn 404 into `BadInput`
naming the object and the namespace. `whoami` asks the API server who the
caller is (a SelfSubjectReview), so that what the CLI writes in someone's name
is exactly the name admission will check it against.

No request waits forever: every call the CLI makes carries a timeout
(`--request-timeout`, default 30 s, through the operator's own bounded client,
`vigil.kube.kits.apiclient`), so an API server that accepts a connection and never
answers — a wedged proxy, a dead NAT entry — ends the command with an error that
says so, instead of a terminal that hangs. 429s are waited out as the operator
does, never longer than the timeout.

Which cluster, and as whom, is kubectl's to say: the global `--kubeconfig`,
`--context`, `--as` and `--as-group` are set once per command
(`set_connection`) and every `Cluster` made after honours them, whatever the
verb. `--as-group` is one group: the client sends each default header once,
and a comma-joined value would name a single group with a comma in it.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from vigil.cli.errors import BadInput
from vigil.core.executions import Execution
from vigil.kube.kits.apiclient import RequestPolicy, build_client
from vigil.kube.stores.executions import ExecutionStore, execution_from_object
from vigil.model import GROUP, VERSION
from vigil.model.names import SCHEDULED_JOBS, WORKFLOWS

DEFAULT_NAMESPACE = "default"  # kubectl's, when the context names none
#: How long one API request may take before the command gives up: far above an answer's usual
#: milliseconds and a busy API server's few seconds, far below a user wondering if it hangs.
REQUEST_TIMEOUT_SECONDS = 30.0
#: The request timeout of the Clusters made from now on (`--request-timeout` sets it, once per command).
_request_timeout = REQUEST_TIMEOUT_SECONDS


def set_request_timeout(seconds: float) -> None:
    """Bound every API request of this command by `seconds` (`--request-timeout`)."""
    global _request_timeout
    if seconds <= 0:
        raise BadInput(f"--request-timeout: {seconds:g} is not a positive number of seconds")
    _request_timeout = seconds


def request_timeout() -> float:
    """The timeout every API request of this command carries, in seconds."""
    return _request_timeout


def parse_timeout(text: str) -> float:
    """`--request-timeout`'s value: seconds, as `30`, `30s`, `1.5s` or `2m`."""
    scale = {"s": 1.0, "m": 60.0}.get(text[-1:], 1.0)
    number = text[:-1] if text[-1:] in ("s", "m") else text
    try:
        seconds = float(number) * scale
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration (30, 30s or 2m)")
    return seconds


@dataclasses.dataclass(frozen=True)
class Connection:
    """Which kubeconfig and context to use, and whom to impersonate (kubectl's global flags)."""

    kubeconfig: str | None = None  # --kubeconfig; None: KUBECONFIG, else ~/.kube/config
    context: str | None = None  # --context; None: the kubeconfig's current-context
    impersonate: str | None = None  # --as: act as this user (needs RBAC's `impersonate`)
    impersonate_group: str | None = None  # --as-group: with --as, as a member of this group


#: The connection of the Clusters made from now on (the global flags set it, once per command).
_connection = Connection()


def set_connection(connection: Connection) -> None:
    """Make every Cluster of this command use `connection` (`--kubeconfig`, `--context`, `--as`)."""
    global _connection
    if connection.impersonate_group and not connection.impersonate:
        raise BadInput("--as-group needs --as (the user to impersonate)")
    _connection = connection


def connection() -> Connection:
    """The kubeconfig, context and impersonation of this command."""
    return _connection


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who the caller is, as the API server authenticated them."""

    username: str
    groups: tuple[str, ...] = ()


class Cluster:
    """A connection made from the kubeconfig (--kubeconfig, else KUBECONFIG or ~/.kube/config)."""

    def __init__(self) -> None:
        chosen = connection()
        configuration = client.Configuration()
        try:
            config.load_kube_config(
                config_file=chosen.kubeconfig, context=chosen.context, client_configuration=configuration
            )
            contexts, current = config.list_kube_config_contexts(config_file=chosen.kubeconfig)
        except (ConfigException, OSError) as err:
            raise BadInput(f"cannot use the kubeconfig: {err}") from None
        if chosen.context is not None:
            current = next((c for c in contexts if c.get("name") == chosen.context), current)
        context = (current or {}).get("context") or {}
        self._connect(configuration, context.get("namespace") or DEFAULT_NAMESPACE)
        if chosen.impersonate:
            self.api.set_default_header("Impersonate-User", chosen.impersonate)
        if chosen.impersonate_group:
            self.api.set_default_header("Impersonate-Group", chosen.impersonate_group)

    @classmethod
    def of(cls, configuration: client.Configuration, *, namespace: str = DEFAULT_NAMESPACE) -> Cluster:
        """A Cluster through `configuration` as given (no kubeconfig read): the console's
        writes use one holding the viewer's own token (vigil.cli.consolewrites)."""
        made = cls.__new__(cls)
        made._connect(configuration, namespace)
        return made

    def _connect(self, configuration: client.Configuration, namespace: str) -> None:
        timeout = request_timeout()
        self.api = build_client(configuration, RequestPolicy(timeout_seconds=timeout, retry_after_cap_seconds=timeout))
        self.default_namespace: str = namespace
        self.custom = client.CustomObjectsApi(self.api)
        self.executions = ExecutionStore(self.api)

    def namespace(self, given: str | None) -> str:
        """The namespace named with -n, else the context's."""
        return given or self.default_namespace

    def find_job(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, SCHEDULED_JOBS, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return obj

    def job(self, name: str, namespace: str) -> dict[str, Any]:
        obj = self.find_job(name, namespace)
        if obj is None:
            raise BadInput(f'scheduledjob "{name}" not found in namespace "{namespace}"')
        return obj

    def jobs_named(self, name: str) -> list[dict[str, Any]]:
        """The ScheduledJobs called `name` in every namespace."""
        result = self.custom.list_cluster_custom_object(
            GROUP, VERSION, SCHEDULED_JOBS, field_selector=f"metadata.name={name}"
        )
        return list(result["items"])

    def find_workflow(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, WORKFLOWS, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return obj

    def workflow(self, name: str, namespace: str) -> dict[str, Any]:
        obj = self.find_workflow(name, namespace)
        if obj is None:
            raise BadInput(f'workflow "{name}" not found in namespace "{namespace}"')
        return obj

    def whoami(self) -> Identity:
        """The caller's user name and groups, from a SelfSubjectReview (authentication.k8s.io/v1)."""
        review = client.AuthenticationV1Api(self.api).create_self_subject_review(
            client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
        )
        info = review.status.user_info if review.status is not None else None
        if info is None or not info.username:
            raise BadInput("the API server did not say who you are (its SelfSubjectReview names no user)")
        return Identity(username=info.username, groups=tuple(info.groups or ()))

    def execution(self, name: str, namespace: str) -> dict[str, Any]:
        obj = self.executions.get(namespace, name)
        if obj is None:
            raise BadInput(f'execution "{name}" not found in namespace "{namespace}"')
        return obj


def read_execution(obj: dict[str, Any]) -> Execution:
    """The core's record of an Execution object; BadInput naming it if its status is unreadable."""
    try:
        return execution_from_object(obj)
    except (KeyError, ValueError) as err:
        meta = obj.get("metadata") or {}
        raise BadInput(
            f'execution "{meta.get("name")}" in namespace "{meta.get("namespace")}" cannot be read: {err}'
        ) from None


def add_namespace_options(parser: argparse.ArgumentParser, *, listing: bool = False) -> None:
    """-n/--namespace, and for verbs that list, -A/--all-namespaces (the two exclude each other)."""
    group: argparse._ActionsContainer = parser.add_mutually_exclusive_group() if listing else parser
    group.add_argument("-n", "--namespace", help="the namespace (default: the kubeconfig context's)")
    if listing:
        group.add_argument(
            "-A", "--all-namespaces", action="store_true", help="list across every namespace"
        )
