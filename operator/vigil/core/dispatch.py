"""Who starts next: priorities with reserved capacity, per-namespace caps, fair rotation.

Ordering alone does not protect urgent work — it only matters when a slot is
free, and during a backfill none are. So `choose` enforces three limits, not
one order:

* **reserved capacity**: normal and low executions together may occupy at most
  ``max_running - reserved_high`` slots; the rest is kept for high ones, which
  may use any free slot;
* **per-namespace caps**: no namespace runs more than ``per_namespace_max``;
* **fairness**: within a priority, the namespace with the fewest running
  executions goes next (ties: the one whose oldest ready work is oldest, then
  the name), and each namespace starts its own oldest ready work first.

The fairness rule is a round-robin that remembers nothing between calls: when
every namespace runs the same number it rotates A, B, A, B in the order of
their oldest work; when one namespace's 100,000-execution backfill already
holds every slot, each slot that frees goes to the namespace running fewer —
so newly ready work elsewhere is not queued behind the backfill. (A rotation
that always began at the namespace with the oldest work would, one freed slot
at a time, serve the backfill forever.)

Nothing here reads a clock. Queue health is alarmed on the *age* of the oldest
ready execution per priority (`oldest_ready_age`), never on the queue's depth:
two million four-second-old executions is a backfill going well; forty that are
nine minutes old is a broken promise.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum

from vigil.core.ids import ExecutionId


class Priority(StrEnum):
    """Dispatch priority: high has reserved capacity, not just a place in the queue."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


#: The order in which priorities are served; each gets what the previous left.
PRIORITY_ORDER = (Priority.HIGH, Priority.NORMAL, Priority.LOW)


@dataclasses.dataclass(frozen=True)
class Capacity:
    max_running: int  # executions running at once, all namespaces and priorities
    reserved_high: int  # of those, slots that only high executions may use
    per_namespace_max: int  # executions running at once in one namespace

    def __post_init__(self) -> None:
        if self.max_running < 0 or self.per_namespace_max < 0:
            raise ValueError(f"capacities must not be negative: {self}")
        if not 0 <= self.reserved_high <= self.max_running:
            raise ValueError(
                f"reserved_high ({self.reserved_high}) must be within 0..max_running ({self.max_running})"
            )

    @property
    def shared(self) -> int:
        """Slots normal and low executions may occupy together."""
        return self.max_running - self.reserved_high


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A Ready execution waiting for a slot."""

    execution_id: ExecutionId
    namespace: str
    priority: Priority
    ready_since: datetime


@dataclasses.dataclass(frozen=True)
class Running:
    """What occupies slots now: all running executions, the high ones, and per namespace."""

    total: int = 0
    high: int = 0
    by_namespace: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.high <= self.total:
            raise ValueError(f"running high ({self.high}) must be within 0..total ({self.total})")


def choose(ready: Sequence[Candidate], running: Running, capacity: Capacity) -> list[Candidate]:
    """The executions to start now, in start order; deterministic whatever the order of `ready`."""
    free = capacity.max_running - running.total
    shared_free = capacity.shared - (running.total - running.high)
    per_namespace = Counter(running.by_namespace)
    chosen: list[Candidate] = []
    for priority in PRIORITY_ORDER:
        room = free if priority is Priority.HIGH else min(free, shared_free)
        picked = _rotate(
            [c for c in ready if c.priority == priority],
            per_namespace,
            room=room,
            namespace_max=capacity.per_namespace_max,
        )
        chosen.extend(picked)
        free -= len(picked)
        if priority is not Priority.HIGH:
            shared_free -= len(picked)
    return chosen


def _rotate(
    candidates: Iterable[Candidate], per_namespace: Counter[str], *, room: int, namespace_max: int
) -> list[Candidate]:
    """Up to `room` candidates of one priority, fewest-running namespace first; updates `per_namespace`."""
    queues: dict[str, deque[Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: (c.ready_since, c.execution_id)):
        queues.setdefault(candidate.namespace, deque()).append(candidate)
    turns = [
        (per_namespace[ns], queue[0].ready_since, ns)
        for ns, queue in queues.items()
        if per_namespace[ns] < namespace_max
    ]
    heapq.heapify(turns)
    picked: list[Candidate] = []
    while turns and len(picked) < room:
        _, _, namespace = heapq.heappop(turns)
        queue = queues[namespace]
        picked.append(queue.popleft())
        per_namespace[namespace] += 1
        if queue and per_namespace[namespace] < namespace_max:
            heapq.heappush(turns, (per_namespace[namespace], queue[0].ready_since, namespace))
    return picked


def oldest_ready_age(ready: Iterable[Candidate], now: datetime) -> dict[str, float]:
    """Seconds the oldest ready execution of each priority has waited (0 when none): the alarm metric."""
    oldest: dict[str, datetime] = {}
    for candidate in ready:
        key = str(candidate.priority)
        if key not in oldest or candidate.ready_since < oldest[key]:
            oldest[key] = candidate.ready_since
    return {
        str(priority): max(0.0, (now - oldest[priority]).total_seconds())
        if priority in oldest
        else 0.0
        for priority in PRIORITY_ORDER
    }
