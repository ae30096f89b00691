"""What a pod's status says about its attempt: still going, succeeded, or failed and why.

The execution state machine needs one verdict per observation, with a reason a
user can act on — ``OOMKilled`` asks for more memory, ``ExitCode3`` points at
the job's own code, ``StuckPending`` at the image or the cluster's capacity.
Pods are read as the plain dicts the Kubernetes API returns (camelCase keys),
so this stays free of any client library; `now` is passed in.

Rules, first match wins:

* phase Succeeded → Succeeded (``Completed``);
* phase Failed → ``Evicted`` / ``DeadlineExceeded`` (the per-execution
  timeout, enforced through ``activeDeadlineSeconds``) / ``NodeLost`` from the
  pod's reason; else ``OOMKilled`` if a container was; else ``PodDeleted`` if
  it ended because it was deleted; else any other pod reason as written
  (``Shutdown``, ``UnexpectedAdmissionError``, …); else ``NodeLost`` for a
  container whose state is unknown; else ``ExitCode<n>``; else ``PodFailed``;
* not finished, but its node is lost (phase Unknown, reason NodeLost, a
  condition whose status is Unknown) → Failed ``NodeLost``;
* not finished, but being deleted → Failed ``PodDeleted``;
* Pending because its image is one the node will never run — not on the node
  with ``imagePullPolicy: Never`` (``ErrImageNeverPull``), or a name that does
  not parse (``InvalidImageName``) → Failed at once with that reason: a
  configuration error no wait can cure, which the kubelet would retry for ever;
* Pending for longer than `image_pull_limit` (from its creation) because its
  image cannot be pulled (``ErrImagePull``, ``ImagePullBackOff``) → Failed
  ``ImagePullBackOff``: almost always a wrong name, tag or pull secret, so it
  gets a short limit (a minute by default), not the kubelet's back-off for ever;
* Pending for longer than `pending_limit` (from its creation) because its
  config is missing or it cannot be scheduled → Failed ``StuckPending``, the
  underlying reason first in the message;
* otherwise Pending or Running.

A verdict on a pod that failed while still Pending says ``stop_pod``: the pod
will never end by itself, so the caller deletes it.

Every failure is retryable: whether to stop (cancellation) is the caller's
decision, never the pod's. The main container is the first one in the pod's
spec (the API lists statuses by name, not in spec order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from vigil.core.executions import MESSAGE_MAX_CHARS, AttemptOutcome, AttemptResult
from vigil.core.timeparse import parse_rfc3339, require_aware

#: How long a pod may stay Pending for one of STUCK_WAITING_REASONS or Unschedulable.
DEFAULT_PENDING_LIMIT = timedelta(minutes=5)
#: How long a pod may stay Pending because its image cannot be pulled (IMAGE_PULL_REASONS).
DEFAULT_IMAGE_PULL_LIMIT = timedelta(minutes=1)
EXIT_CODE_PREFIX = "ExitCode"
#: Container waiting reasons of an image the kubelet cannot pull (it backs off and tries for ever).
IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull"})
#: Container waiting reasons that keep a pod Pending until someone fixes something.
STUCK_WAITING_REASONS = IMAGE_PULL_REASONS | {"CreateContainerConfigError"}
#: Container waiting reasons no wait cures: the attempt fails at once, with the reason as written.
UNRUNNABLE_WAITING_REASONS = frozenset({"ErrImageNeverPull", "InvalidImageName"})
UNSCHEDULABLE = "Unschedulable"
#: The terminated reason a kubelet writes for a container it can no longer find.
CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"
_ELLIPSIS = "…"


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class PodReason(StrEnum):
    COMPLETED = "Completed"
    OOM_KILLED = "OOMKilled"
    EVICTED = "Evicted"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    POD_DELETED = "PodDeleted"
    NODE_LOST = "NodeLost"
    STUCK_PENDING = "StuckPending"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"  # the image could not be pulled within the limit
    POD_FAILED = "PodFailed"  # Failed, and nothing more specific is known


#: Pod-level reasons that name the failure better than any exit code.
_POD_LEVEL_REASONS = (PodReason.EVICTED, PodReason.DEADLINE_EXCEEDED, PodReason.NODE_LOST)
_DEFAULT_MESSAGES = {
    PodReason.EVICTED: "the pod was evicted from its node",
    PodReason.DEADLINE_EXCEEDED: "the attempt ran longer than the job's timeout",
    PodReason.NODE_LOST: "the pod's node stopped reporting; the pod may still be running there",
    PodReason.POD_DELETED: "the pod was deleted before it finished",
}


@dataclasses.dataclass(frozen=True)
class PodVerdict:
    phase: PodPhase
    reason: str
    message: str = ""
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    retryable: bool = False  # True for every failure; False while the pod runs or after success
    output: str | None = None  # the main container's termination message
    stop_pod: bool = False  # failed while Pending: the pod will never end by itself, delete it
    fails_at: datetime | None = None  # Pending for a cause with a limit: when that limit runs out

    @property
    def finished(self) -> bool:
        return self.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)


@dataclasses.dataclass(frozen=True)
class _Container:
    """One container's status, flattened."""

    name: str
    waiting: Mapping[str, Any]
    running: Mapping[str, Any]
    terminated: Mapping[str, Any]

    @property
    def exit_code(self) -> int | None:
        code = self.terminated.get("exitCode")
        return code if isinstance(code, int) else None


@dataclasses.dataclass(frozen=True)
class _Facts:
    """What the rules look at, read once from the pod."""

    phase: str
    reason: str
    message: str
    main: _Container | None
    containers: tuple[_Container, ...]  # main first, then the others, then init containers
    conditions: tuple[Mapping[str, Any], ...]
    created_at: datetime | None
    deletion_requested_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    output: str | None


def classify_pod(
    pod: Mapping[str, Any],
    *,
    now: datetime,
    pending_limit: timedelta = DEFAULT_PENDING_LIMIT,
    image_pull_limit: timedelta = DEFAULT_IMAGE_PULL_LIMIT,
) -> PodVerdict:
    """The verdict on one pod at `now`."""
    now = require_aware(now, name="now")
    facts = _read(pod)
    if facts.phase == PodPhase.SUCCEEDED:
        return _verdict(facts, PodPhase.SUCCEEDED, PodReason.COMPLETED, "")
    if facts.phase == PodPhase.FAILED:
        return _failed(facts)
    if _node_lost(facts):
        return _failure(
            facts, PodReason.NODE_LOST, facts.message or _DEFAULT_MESSAGES[PodReason.NODE_LOST]
        )
    if facts.deletion_requested_at is not None:
        return _failure(facts, PodReason.POD_DELETED, _DEFAULT_MESSAGES[PodReason.POD_DELETED])
    if facts.phase == PodPhase.RUNNING:
        return _verdict(facts, PodPhase.RUNNING, "", "")
    return _pending(facts, now=now, limit=pending_limit, image_pull_limit=image_pull_limit)


def deleted_verdict() -> PodVerdict:
    """The verdict on a pod that vanished (a DELETED event) before it was seen to finish."""
    return PodVerdict(
        phase=PodPhase.FAILED,
        reason=PodReason.POD_DELETED,
        message=_DEFAULT_MESSAGES[PodReason.POD_DELETED],
        retryable=True,
    )


def attempt_result(verdict: PodVerdict, *, attempt: int) -> AttemptResult:
    """The finished verdict as the execution state machine records it."""
    if not verdict.finished:
        raise ValueError(f"attempt {attempt}: the pod has not finished (phase {verdict.phase})")
    succeeded = verdict.phase is PodPhase.SUCCEEDED
    return AttemptResult(
        attempt=attempt,
        outcome=AttemptOutcome.SUCCEEDED if succeeded else AttemptOutcome.FAILED,
        reason=verdict.reason,
        message=verdict.message,
        exit_code=verdict.exit_code,
        started_at=verdict.started_at,
        finished_at=verdict.finished_at,
    )


# --- rules ------------------------------------------------------------------------------------


def _failed(facts: _Facts) -> PodVerdict:
    if facts.reason in _POD_LEVEL_REASONS:
        return _failure(
            facts, facts.reason, facts.message or _DEFAULT_MESSAGES[PodReason(facts.reason)]
        )
    oom = next(
        (c for c in facts.containers if c.terminated.get("reason") == PodReason.OOM_KILLED), None
    )
    if oom is not None:
        message = f"container {oom.name!r} was killed for exceeding its memory limit"
        return _failure(facts, PodReason.OOM_KILLED, message, exit_code=oom.exit_code)
    if _ended_by_deletion(facts):
        return _failure(facts, PodReason.POD_DELETED, _DEFAULT_MESSAGES[PodReason.POD_DELETED])
    if facts.reason:
        return _failure(facts, facts.reason, facts.message)
    if any(c.terminated.get("reason") == CONTAINER_STATUS_UNKNOWN for c in facts.containers):
        return _failure(facts, PodReason.NODE_LOST, _DEFAULT_MESSAGES[PodReason.NODE_LOST])
    crashed = next((c for c in facts.containers if c.exit_code), None)
    if crashed is not None:
        message = f"container {crashed.name!r} exited with code {crashed.exit_code}"
        return _failure(
            facts, f"{EXIT_CODE_PREFIX}{crashed.exit_code}", message, exit_code=crashed.exit_code
        )
    return _failure(facts, PodReason.POD_FAILED, facts.message)


def _ended_by_deletion(facts: _Facts) -> bool:
    """Whether a finished pod ended because it was deleted (it finished after the request)."""
    if facts.deletion_requested_at is None:
        return False
    return facts.finished_at is None or facts.finished_at >= facts.deletion_requested_at


def _node_lost(facts: _Facts) -> bool:
    return (
        facts.phase == "Unknown"
        or facts.reason == PodReason.NODE_LOST
        or any(condition.get("status") == "Unknown" for condition in facts.conditions)
        or any(c.terminated.get("reason") == CONTAINER_STATUS_UNKNOWN for c in facts.containers)
    )


def _pending(facts: _Facts, *, now: datetime, limit: timedelta, image_pull_limit: timedelta) -> PodVerdict:
    unrunnable = next((c for c in facts.containers if c.waiting.get("reason") in UNRUNNABLE_WAITING_REASONS), None)
    if unrunnable is not None:
        reason = str(unrunnable.waiting["reason"])
        detail = str(unrunnable.waiting.get("message") or "")
        message = f"container {unrunnable.name!r}: {detail}" if detail else f"container {unrunnable.name!r}"
        return dataclasses.replace(_failure(facts, reason, message), stop_pod=True)
    cause = _pending_cause(facts)
    if cause is None:
        waiting = facts.main.waiting.get("reason", "") if facts.main else ""
        return _verdict(facts, PodPhase.PENDING, str(waiting), "")
    reason, detail = cause
    pulling = reason in IMAGE_PULL_REASONS
    if pulling:
        limit = image_pull_limit
    if facts.created_at is None:
        return _verdict(facts, PodPhase.PENDING, reason, detail)
    pending_for = now - facts.created_at
    if pending_for <= limit:
        waiting = _verdict(facts, PodPhase.PENDING, reason, detail)
        return dataclasses.replace(waiting, fails_at=facts.created_at + limit)
    message = f"{reason}: {detail} (pending for {_seconds(pending_for)}, limit {_seconds(limit)})"
    failed_as = PodReason.IMAGE_PULL_BACK_OFF if pulling else PodReason.STUCK_PENDING
    return dataclasses.replace(_failure(facts, failed_as, message), stop_pod=True)


def _pending_cause(facts: _Facts) -> tuple[str, str] | None:
    """(reason, message) of what keeps the pod Pending, if it is one that needs a human."""
    for container in facts.containers:
        reason = container.waiting.get("reason")
        if reason in STUCK_WAITING_REASONS:
            return str(reason), str(container.waiting.get("message", ""))
    for condition in facts.conditions:
        if (condition.get("type"), condition.get("status"), condition.get("reason")) == (
            "PodScheduled",
            "False",
            UNSCHEDULABLE,
        ):
            return UNSCHEDULABLE, str(condition.get("message", ""))
    return None


# --- building verdicts ------------------------------------------------------------------------


def _verdict(facts: _Facts, phase: PodPhase, reason: str, message: str) -> PodVerdict:
    return PodVerdict(
        phase=phase,
        reason=reason,
        message=_bounded(message),
        exit_code=facts.main.exit_code if facts.main else None,
        started_at=facts.started_at,
        finished_at=facts.finished_at,
        output=facts.output,
    )


def _failure(
    facts: _Facts, reason: str, message: str, *, exit_code: int | None = None
) -> PodVerdict:
    verdict = _verdict(facts, PodPhase.FAILED, reason, message)
    if exit_code is not None:
        verdict = dataclasses.replace(verdict, exit_code=exit_code)
    return dataclasses.replace(verdict, retryable=True)


def _bounded(message: str) -> str:
    if len(message) <= MESSAGE_MAX_CHARS:
        return message
    return message[: MESSAGE_MAX_CHARS - len(_ELLIPSIS)] + _ELLIPSIS


def _seconds(span: timedelta) -> str:
    return f"{int(span.total_seconds())}s"


# --- reading the pod --------------------------------------------------------------------------


def _read(pod: Mapping[str, Any]) -> _Facts:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    containers = _containers(pod, status)
    main = containers[0] if containers and containers[0].name == _main_name(pod) else None
    if main is None and status.get("containerStatuses"):
        main = containers[0]
    state_times = (main.terminated or main.running) if main else {}
    return _Facts(
        phase=str(status.get("phase") or PodPhase.PENDING),
        reason=str(status.get("reason") or ""),
        message=str(status.get("message") or ""),
        main=main,
        containers=containers,
        conditions=tuple(status.get("conditions") or ()),
        created_at=_time(meta.get("creationTimestamp")),
        deletion_requested_at=_deletion_requested_at(meta),
        started_at=_time(state_times.get("startedAt")) or _time(status.get("startTime")),
        finished_at=_time(main.terminated.get("finishedAt")) if main else None,
        output=main.terminated.get("message") if main else None,
    )


def _main_name(pod: Mapping[str, Any]) -> str | None:
    specs: Sequence[Mapping[str, Any]] = (pod.get("spec") or {}).get("containers") or ()
    return specs[0].get("name") if specs else None


def _containers(pod: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[_Container, ...]:
    """Every container status, the main container's first, init containers last."""
    regular = [_container(item) for item in status.get("containerStatuses") or ()]
    main_name = _main_name(pod)
    regular.sort(key=lambda c: c.name != main_name)  # stable: the rest keep the API's order
    init = [_container(item) for item in status.get("initContainerStatuses") or ()]
    return (*regular, *init)


def _container(item: Mapping[str, Any]) -> _Container:
    state = item.get("state") or {}
    return _Container(
        name=str(item.get("name", "")),
        waiting=state.get("waiting") or {},
        running=state.get("running") or {},
        terminated=state.get("terminated") or {},
    )


def _deletion_requested_at(meta: Mapping[str, Any]) -> datetime | None:
    """When deletion was asked for: deletionTimestamp is that instant plus the grace period."""
    deadline = _time(meta.get("deletionTimestamp"))
    if deadline is None:
        return None
    return deadline - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))


def _time(value: object) -> datetime | None:
    return parse_rfc3339(value) if isinstance(value, str) and value else None
