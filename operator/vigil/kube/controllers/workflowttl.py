"""Deleting finished Workflows past their `ttlAfterFinished`, never before their history is written.

Asked by the workflow engine (`vigil.kube.controllers.workflows`) after each pass on a finished
workflow: the engine hands `after_pass` the status it has just written, and
`vigil.core.workflowttl.decide` answers from that status alone. Delete: the
Workflow goes with a uid precondition (a new workflow of the same name is never
removed by mistake) and background propagation, so the garbage collector
removes its step pods, which its owner references make its dependents. Wait:
the engine looks again when the time to live passes. Await history: the
resync of the engine's Workflow cache queues every workflow whose history is not
all in the database, and the pass that writes it deletes it.

The wait is durable: both times it is computed from (`status.finishedAt` and
`spec.ttlAfterFinished`) are in the API server, and after a restart, which loses
the engine's timers, the resync queues every finished workflow whose time has
come (`due`): the cache keeps what this reads of each finished workflow.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.timeparse import parse_rfc3339
from vigil.core.workflowttl import Decision, Verdict, WorkflowEnd, decide, time_to_live
from vigil.model import GROUP, VERSION
from vigil.model.durations import parse_duration
from vigil.model.names import WORKFLOWS

log = logging.getLogger(__name__)


def setting_ttl(text: str) -> timedelta | None:
    """The operator's default time to live from its setting: None (kept forever) for empty or 0s."""
    return time_to_live(None, parse_duration(text) if text else None)


def workflow_end(status: Mapping[str, Any]) -> WorkflowEnd:
    """What the rule reads of a Workflow's status."""
    finished = status.get("finishedAt")
    checkpoint = status.get("checkpoint") or {}
    return WorkflowEnd(
        phase=status.get("phase"),
        finished_at=parse_rfc3339(finished) if finished else None,
        recorded=int(checkpoint.get("seq") or 0) + len(status.get("history") or []),
        mirrored=int(status.get("historyMirrored") or 0),
    )


class WorkflowTtl:
    """Decides for one workflow at a time, and deletes the ones whose time has come."""

    def __init__(self, custom: client.CustomObjectsApi, *, default: timedelta | None) -> None:
        self._custom = custom
        self._default = default

    def decide(self, obj: Mapping[str, Any], status: Mapping[str, Any], now: datetime) -> Decision:
        """The verdict on `obj` whose status is (now) `status`."""
        own = (obj.get("spec") or {}).get("ttlAfterFinished")
        try:
            ttl = time_to_live(parse_duration(own) if own else None, self._default)
        except ValueError:  # admission refuses it; an object from before the schema is kept
            return Decision(Verdict.KEEP)
        return decide(workflow_end(status), ttl=ttl, now=now)

    def due(self, obj: Mapping[str, Any], now: datetime) -> bool:
        """Whether the workflow may go now, as it stands: the resync queues it for a pass."""
        return self.decide(obj, obj.get("status") or {}, now).verdict is Verdict.DELETE

    def after_pass(self, obj: Mapping[str, Any], status: Mapping[str, Any], now: datetime) -> Decision:
        """After a pass wrote `status`: delete the workflow if its time has come; the verdict."""
        decision = self.decide(obj, status, now)
        if decision.verdict is Verdict.DELETE:
            self._delete(obj)
        return decision

    def _delete(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=meta["uid"]), propagation_policy="Background"
        )
        try:
            self._custom.delete_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], WORKFLOWS, meta["name"], body=options
            )
        except ApiException as err:
            if err.status not in (404, 409):  # gone already, or a new workflow of the same name
                raise
            return
        log.info("workflow %s/%s finished and past its ttlAfterFinished: deleted", meta["namespace"], meta["name"])
