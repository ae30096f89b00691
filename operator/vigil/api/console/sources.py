"""What the console reads and writes, known by protocols: the runtime hands it the adapters.

The HTTP API imports no Kubernetes client and no store (the import contracts in pyproject.toml),
so the console knows its collaborators as the protocols below. Reads are the operator's: it
asks them only after a SubjectAccessReview said the viewer may (vigil.api.console.access).
Writes are the viewer's: every one is made with the viewer's own bearer token, so the API
server's RBAC and admission judge it exactly as they judge the same `kubectl vigil` verb (an
approval's `by` is checked against the token's user by admission, so the console cannot decide
in anyone else's name).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from vigil.api.histories import JobExecutions, LogTails
from vigil.core.history import AttemptRecord

#: A Kubernetes object as the API server serves it (metadata, spec, status).
Obj = Mapping[str, Any]


class Refused(Exception):
    """A write the API server, admission or the verb's own checks turned down; the message says
    why in words a person can act on (it is shown, escaped, on the page)."""


class ConsoleReads(Protocol):
    """The operator's reads, made for a viewer who was authorised first."""

    def namespaces(self) -> Sequence[str]:
        """The namespaces holding ScheduledJobs, Workflows or TaskQueues, sorted."""
        ...

    def jobs(self, namespace: str) -> Sequence[Obj]:
        """The ScheduledJobs in `namespace`."""
        ...

    def job(self, namespace: str, name: str) -> Obj | None:
        """The ScheduledJob `name` in `namespace`, or None."""
        ...

    def executions(self, namespace: str, job_uid: str) -> Sequence[Obj]:
        """The Execution objects the API server still holds for the job with `job_uid`."""
        ...

    def workflows(self, namespace: str) -> Sequence[Obj]:
        """The Workflows in `namespace`."""
        ...

    def workflow(self, namespace: str, name: str) -> Obj | None:
        """The Workflow `name` in `namespace`, or None."""
        ...

    def taskqueues(self, namespace: str) -> Sequence[Obj]:
        """The TaskQueues in `namespace`."""
        ...


class ConsoleWrites(Protocol):
    """The steering verbs, made as the viewer (their token); each returns what happened in words
    or raises Refused."""

    def run_now(self, token: str, namespace: str, job: str) -> str: ...

    def suspend(self, token: str, namespace: str, job: str, reason: str) -> str: ...

    def resume(self, token: str, namespace: str, job: str) -> str: ...

    def decide(
        self, token: str, namespace: str, workflow: str, step: str, action: str, reason: str
    ) -> str:
        """`action` is "approve" or "reject"."""
        ...


@dataclasses.dataclass(frozen=True)
class ConsoleSources:
    """Everything the console's pages read from and write through."""

    reads: ConsoleReads
    writes: ConsoleWrites | None
    job_executions: JobExecutions | None = None
    log_tail: LogTails | None = None
    timeline: Callable[[str], list[AttemptRecord]] | None = None
