"""The execution routes: an Execution's spec and status with its rows in the history database.

    GET /namespaces/{ns}/executions/{id}   the execution in a namespace the caller may read
    GET /executions/{id}                   the same, by id alone

An execution needs ``get`` on ``executions.vigil.dev`` (that name) in its namespace, so whoever
may ``kubectl get execution`` may read its timeline, and no one else. The answer holds only that
namespace's object and history rows.

The caller is authorised before the history database is asked anything. In a namespace, that
namespace is the one authorised. By id alone, the namespaces tried are learnt without a store:
those holding an Execution of that id (the leader's watch-fed cache; a standby, which has none,
asks the API server for Executions with that id's label), then the namespace of the caller's
own ServiceAccount. The first of them where the caller may get it is read from the history; a
caller who may get executions in every namespace is served whatever the history holds. Anyone
else is 403 without the database being asked: so an execution that retention deleted (its
object gone, its rows kept) is read by id alone only from a ServiceAccount of its namespace or
with a cluster-wide grant; everyone else reads it at /namespaces/{ns}/executions/{id}, as
`kubectl vigil` does.

An id that exists nowhere the caller may read is 403, like one that exists elsewhere (the two
must look alike); 404 is for those who may get executions in every namespace, or who ask in a
namespace of their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vigil.api.guards import Guard, execution_access, forbidden
from vigil.api.problems import Answer, json_answer, problem
from vigil.core.access import User
from vigil.core.history import AttemptRecord
from vigil.core.ports import HistoryUnavailable
from vigil.core.tenancy import service_account_of

EXECUTION_ID = r"[a-z0-9][-a-z0-9]{0,62}"
NAMESPACE = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
EXECUTION_PATH = re.compile(rf"^/executions/({EXECUTION_ID})/?$")
NAMESPACED_EXECUTION_PATH = re.compile(rf"^/namespaces/({NAMESPACE})/executions/({EXECUTION_ID})/?$")


def record_to_json(record: AttemptRecord) -> dict[str, Any]:
    def t(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "executionId": record.execution_id,
        "attempt": record.attempt,
        "namespace": record.namespace,
        "job": record.job,
        "priority": record.priority,
        "state": str(record.state),
        "reason": record.reason,
        "scheduledFor": t(record.scheduled_for),
        "startedAt": t(record.started_at),
        "finishedAt": t(record.finished_at),
        "pod": record.pod,
        "error": record.error,
    }


class ExecutionRoutes:
    """Serves the two routes from ``find_execution(id)`` (the Execution named `id` in whichever
    namespace, or None), ``get_execution(namespace, id)`` (the one in `namespace`; None: found
    by id and checked), ``timeline(id)`` (its history rows) and ``execution_namespaces(id)`` (the
    namespaces holding an Execution of that id, read from memory or the API server, never a
    database; None: the one `find_execution` finds)."""

    def __init__(
        self,
        *,
        find_execution: Callable[[str], Mapping[str, Any] | None],
        get_execution: Callable[[str, str], Mapping[str, Any] | None] | None,
        timeline: Callable[[str], list[AttemptRecord]],
        execution_namespaces: Callable[[str], Sequence[str]] | None = None,
    ) -> None:
        self._find_execution = find_execution
        self._get_execution = get_execution
        self._timeline = timeline
        self._execution_namespaces = execution_namespaces

    def serves(self, path: str) -> bool:
        return bool(EXECUTION_PATH.match(path) or NAMESPACED_EXECUTION_PATH.match(path))

    def answer(self, guard: Guard, user: User, path: str) -> Answer:
        """The answer for `path` (one `serves`) to `user`."""
        namespaced = NAMESPACED_EXECUTION_PATH.match(path)
        if namespaced is not None:
            return self._execution_in(guard, user, namespaced.group(1), namespaced.group(3))
        match = EXECUTION_PATH.match(path)
        assert match is not None  # serves() said so
        return self._execution(guard, user, match.group(1))

    def _execution_in(self, guard: Guard, user: User, namespace: str, execution_id: str) -> Answer:
        """The execution asked for in `namespace`: authorised first, then looked up there only."""
        access = execution_access(namespace, execution_id)
        if not guard.authorizer.allowed(user, access):
            return forbidden(user, access)
        rows, error = self._rows(execution_id)
        return self._execution_answer(execution_id, namespace, self._object(namespace, execution_id), rows, error)

    def _execution(self, guard: Guard, user: User, execution_id: str) -> Answer:
        """The execution asked for by id alone (see the module docstring): each namespace it may
        be in authorised before the history is asked; nothing of another namespace is ever
        included, so a look-alike made in one namespace cannot show another's rows."""
        tried = list(dict.fromkeys(self._namespaces(execution_id)))
        account = service_account_of(user)
        if account is not None and account[0] not in tried:
            tried.append(account[0])
        history: tuple[list[AttemptRecord] | None, str | None] | None = None  # read once, when first allowed
        for namespace in tried:
            if not guard.authorizer.allowed(user, execution_access(namespace, execution_id)):
                continue
            history = history or self._rows(execution_id)
            found = self._execution_answer(execution_id, namespace, self._object(namespace, execution_id), *history)
            if found[0] != 404:
                return found
        if guard.authorizer.allowed(user, execution_access("")):
            rows, error = history or self._rows(execution_id)
            namespace = min((row.namespace for row in rows or []), default="")
            obj = self._object(namespace, execution_id) if namespace else None
            return self._execution_answer(execution_id, namespace, obj, rows, error)
        return problem(
            403,
            f"{user.name} may not get execution {execution_id}: it does not exist in any namespace where "
            "they may get executions (ask by /namespaces/NAMESPACE/executions/ID to tell the two apart)",
            "Forbidden",
        )

    def _namespaces(self, execution_id: str) -> Sequence[str]:
        """Where an Execution of this id exists, learnt without a database."""
        if self._execution_namespaces is not None:
            return self._execution_namespaces(execution_id)
        obj = _named(self._find_execution(execution_id), execution_id, None)
        return [str(obj["metadata"]["namespace"])] if obj is not None else []

    def _object(self, namespace: str, execution_id: str) -> Mapping[str, Any] | None:
        if self._get_execution is not None:
            return self._get_execution(namespace, execution_id)
        return _named(self._find_execution(execution_id), execution_id, namespace)

    def _rows(self, execution_id: str) -> tuple[list[AttemptRecord] | None, str | None]:
        try:
            return list(self._timeline(execution_id)), None
        except HistoryUnavailable as err:
            return None, f"history database unavailable: {err}"

    @staticmethod
    def _execution_answer(
        execution_id: str,
        namespace: str,
        obj: Mapping[str, Any] | None,
        rows: list[AttemptRecord] | None,
        history_error: str | None,
    ) -> Answer:
        mine = [r for r in rows or [] if r.namespace == namespace]
        if obj is None and not mine:
            return problem(404, f"execution {execution_id} not found", "NotFound")
        body: dict[str, Any] = {"executionId": execution_id, "namespace": namespace}
        if obj is not None:
            body["spec"] = obj.get("spec") or {}
            body["status"] = obj.get("status") or {}
        body["history"] = [record_to_json(r) for r in mine] if rows is not None else None
        if history_error is not None:
            body["historyError"] = history_error
        return json_answer(200, body)


def _named(obj: Mapping[str, Any] | None, execution_id: str, namespace: str | None) -> Mapping[str, Any] | None:
    """`obj` if it is the Execution named `execution_id` (in `namespace`, when given), else None."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    if meta.get("name") != execution_id or (namespace is not None and meta.get("namespace") != namespace):
        return None
    return obj
