"""Status conditions, built the way Kubernetes API conventions ask.

A condition's `lastTransitionTime` moves only when its status changes, and a
caller compares the new list with the old and writes only on a difference —
so a reconcile that changes nothing writes nothing. Reasons are CamelCase
constants, listed here so users can search for them (the reasons of an
occurrence's outcome, `vigil.core.chain.Reason`, and of the watchdog's findings,
`vigil.core.watchdog.WatchdogReason`, live beside the rules that choose them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from vigil.core.timeparse import format_rfc3339


class ConditionType(StrEnum):
    READY = "Ready"
    INVALID = "Invalid"
    SUSPENDED = "Suspended"
    OVERDUE = "Overdue"
    DEAD_LETTERED = "DeadLettered"
    # set by the watchdog (vigil.core.watchdog)
    SCHEDULE_CHAIN_BROKEN = "ScheduleChainBroken"
    OUTPUT_STALE = "OutputStale"
    SUSPENDED_TOO_LONG = "SuspendedTooLong"
    LAUNCH_FAILING = "LaunchFailing"  # its last occurrence was refused by the cluster (settled Failed)
    # on a Workflow
    STUCK = "Stuck"  # a step runs past its expectedDuration
    # on a TaskQueue
    BEHIND = "Behind"  # its oldest ready execution is older than its objective
    JOBS_OVERDUE = "JobsOverdue"  # recurring jobs of the queue are overdue (the volume watchdog)
    CHAIN_BROKEN = "ChainBroken"  # recurring jobs of the queue have no next occurrence (its audit)


class ConditionReason(StrEnum):
    SCHEDULED = "Scheduled"
    INVALID_SPEC = "InvalidSpec"  # also the Warning Event's reason
    VALID = "Valid"
    SUSPENDED = "SuspendedByUser"
    ACTIVE = "Active"
    LAUNCH_REFUSED = "LaunchRefused"
    LAUNCHED = "Launched"
    # a ScheduledJob's DeadLettered condition
    DEAD_LETTERED = "DeadLettered"  # also the Warning Event's reason
    # a Workflow's Stuck condition
    PAST_EXPECTED_DURATION = "PastExpectedDuration"
    ON_TIME = "OnTime"
    # a TaskQueue's Ready and Behind conditions
    PUBLISHED = "Published"  # its declaration is in the queue store, where workers read it
    STORE_UNAVAILABLE = "QueueStoreUnavailable"
    OLDEST_READY_TOO_OLD = "OldestReadyTooOld"
    WITHIN_OBJECTIVE = "WithinObjective"
    # a TaskQueue's JobsOverdue and ChainBroken conditions (vigil.core.queuewatch.watch_conditions)
    OVERDUE_JOBS = "OverdueJobs"
    NO_OVERDUE_JOBS = "NoOverdueJobs"
    BROKEN_CHAINS = "BrokenChains"
    CHAINS_INTACT = "ChainsIntact"


class EventReason(StrEnum):
    """Reasons of the Events that report an action rather than a condition."""

    FIRED = "Fired"  # an occurrence became an execution
    RESUMED = "Resumed"  # a suspended job was resumed; the catch-up policy decides the gap
    RETRYING = "Retrying"  # an attempt failed; the next waits for its backoff
    CANCELLED = "Cancelled"
    STEP_STUCK = "StepStuck"  # a workflow step runs past its expectedDuration
    CHAIN_REPAIRED = "ChainRepaired"  # the watchdog re-entered a broken schedule chain's head
    RECOVERED = "Recovered"  # a watchdog finding cleared


def set_condition(
    conditions: Iterable[Mapping[str, Any]],
    *,
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> list[dict[str, Any]]:
    """The condition list with one condition set; others are kept as they are."""
    out: list[dict[str, Any]] = []
    previous: Mapping[str, Any] | None = None
    for condition in conditions:
        if condition.get("type") == type_:
            previous = condition
        else:
            out.append(dict(condition))
    value = "True" if status else "False"
    since = format_rfc3339(now)
    if previous is not None and previous.get("status") == value and previous.get("lastTransitionTime"):
        since = str(previous["lastTransitionTime"])
    out.append(
        {
            "type": type_,
            "status": value,
            "reason": reason,
            "message": message[:32768],
            "observedGeneration": generation,
            "lastTransitionTime": since,
        }
    )
    return sorted(out, key=lambda c: str(c.get("type")))


def condition_status(conditions: Iterable[Mapping[str, Any]], type_: str) -> str | None:
    for condition in conditions:
        if condition.get("type") == type_:
            return str(condition.get("status"))
    return None
