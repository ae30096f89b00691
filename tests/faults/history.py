"""A recorded history of a fault scenario: what was asked of Vigil and what came of it, with times.

Jepsen's queue checkers read a history of operations (invoke, ok, fail, info) and count what a
system lost, duplicated and took to recover; this module is that history for Vigil's two tiers.
A scenario (or the recorder that reads the queue store after the fact, tests/faults/store.py)
appends events; `tests/faults/checker.py` reads them, purely, and says what went wrong.

Events, each with the time it was seen (the scenario's injected clock, never the host's):

* `Due`: an occurrence (job, nominal time) came due, and whether its job's catch-up policy lets
  it end Missed instead of firing (`may_miss`);
* `Fired` / `Missed`: how an occurrence ended (the execution id it fired as), and by whom;
* `Submitted`: a submission's invoke, then its ok / fail / unknown (the reply was lost: it may or
  may not have been taken), keyed by an operation id;
* `Attempt`: an attempt of an execution leased, acknowledged, refused (the store said the
  lease was no longer the worker's), failed (reported failed, to be retried), expired (its lease
  ran out) or ack_unknown (the acknowledgement was sent and its reply lost);
* `Held`: what the store holds at the end (each execution id still there, and its state);
* `Fault`: a fault's start and end, named, for the time to recover.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from enum import StrEnum


class Submission(StrEnum):
    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    UNKNOWN = "unknown"  # the reply was lost: taken or not, the submitter cannot tell


class AttemptPhase(StrEnum):
    LEASED = "leased"
    ACKNOWLEDGED = "acknowledged"
    REFUSED = "refused"  # the acknowledgement came after the lease was taken from the worker
    FAILED = "failed"  # the attempt failed and was reported so: a retry follows, no duplicate
    EXPIRED = "expired"  # the lease ran out while its holder may still run it
    ACK_UNKNOWN = "ack_unknown"  # the acknowledgement's reply was lost: it may have been taken


class FaultPhase(StrEnum):
    START = "start"
    END = "end"


@dataclasses.dataclass(frozen=True)
class Due:
    at: datetime
    job: str
    nominal: datetime
    may_miss: bool = False  # the job's catch-up policy allows this occurrence to end Missed


@dataclasses.dataclass(frozen=True)
class Fired:
    at: datetime
    job: str
    nominal: datetime
    execution_id: str
    by: str = ""


@dataclasses.dataclass(frozen=True)
class Missed:
    at: datetime
    job: str
    nominal: datetime
    by: str = ""
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class Submitted:
    at: datetime
    operation: str
    phase: Submission
    execution_id: str | None = None  # known at ok (and at invoke when the submitter brings it)


@dataclasses.dataclass(frozen=True)
class Attempt:
    at: datetime
    execution_id: str
    attempt: int
    phase: AttemptPhase
    worker: str = ""


@dataclasses.dataclass(frozen=True)
class Held:
    at: datetime
    execution_id: str
    state: str


@dataclasses.dataclass(frozen=True)
class Fault:
    at: datetime
    name: str
    phase: FaultPhase


Event = Due | Fired | Missed | Submitted | Attempt | Held | Fault


class History:
    """An append-only, thread-safe list of events, each stamped by the scenario's `clock`."""

    def __init__(self, clock: Callable[[], datetime], *, scenario: str, seed: int | None = None) -> None:
        self.clock = clock
        self.scenario = scenario
        self.seed = seed
        self._events: list[Event] = []
        self._lock = threading.Lock()

    def add(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def extend(self, events: Iterable[Event]) -> None:
        with self._lock:
            self._events.extend(events)

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    # -- stamped by the clock ---------------------------------------------------------------------

    def due(self, job: str, nominal: datetime, *, may_miss: bool = False) -> None:
        self.add(Due(self.clock(), job, nominal, may_miss))

    def fired(self, job: str, nominal: datetime, execution_id: str, *, by: str = "") -> None:
        self.add(Fired(self.clock(), job, nominal, execution_id, by))

    def missed(self, job: str, nominal: datetime, *, by: str = "", reason: str = "") -> None:
        self.add(Missed(self.clock(), job, nominal, by, reason))

    def submitted(self, operation: str, phase: Submission, execution_id: str | None = None) -> None:
        self.add(Submitted(self.clock(), operation, phase, execution_id))

    def attempt(self, execution_id: str, attempt: int, phase: AttemptPhase, *, worker: str = "") -> None:
        self.add(Attempt(self.clock(), execution_id, attempt, phase, worker))

    def held(self, execution_id: str, state: str) -> None:
        self.add(Held(self.clock(), execution_id, state))

    def fault(self, name: str, phase: FaultPhase) -> None:
        self.add(Fault(self.clock(), name, phase))
