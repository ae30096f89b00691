"""Status conditions, built the way Kubernetes API conventions ask.

A condition's `lastTransitionTime` moves only when its status changes, and a
caller compares the new list with the old and writes only on a difference —
so a reconcile that changes nothing writes nothing. Reasons are CamelCase
constants, listed here so users can search for them.
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


class ConditionReason(StrEnum):
    SCHEDULED = "Scheduled"
    COMPLETED = "Completed"
    INVALID_SPEC = "InvalidSpec"
    VALID = "Valid"
    SUSPENDED = "SuspendedByUser"
    ACTIVE = "Active"
    NO_FUTURE_OCCURRENCE = "NoFutureOccurrence"
    LAUNCH_REFUSED = "LaunchRefused"
    LAUNCHED = "Launched"


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
