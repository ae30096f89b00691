"""The checker: reads a recorded history (tests/faults/history.py) and counts what went wrong.

Pure: a history in, a `Verdict` out; no clock, no I/O. Per scenario it counts

* **lost** occurrences: due, and neither Fired nor recorded Missed (or recorded Missed where the
  job's catch-up policy demands it fire): must be 0;
* occurrences **fired twice**: ended more than once (two Fired, or Fired and Missed): must be 0;
* occurrences **fired early**: a Fired seen before its nominal time (jitter only ever delays a
  fire), by a clock other than the firing replica's own (the API server's creation time of the
  Execution): must be 0;
* submissions **acknowledged then lost**: a submission answered ok, or an occurrence Fired, whose
  execution the store no longer holds at the end (checked only when the history has `Held`
  events): must be 0;
* executions **run more than once**: every lease of an execution after its first that is not a
  retry of a reported failure. Allowed, and counted as such, after a lease expiry or an ambiguous
  acknowledgement (its reply lost; with `strict_leases`, after an expiry only); a violation after
  an acknowledged success, while another lease of it is still open, or a second acknowledged
  success;
* the **time to recover**: from each fault's end to the first success after it (a Fired, a
  submission ok, an attempt acknowledged); the longest is reported, None when no fault ended.
  A fault after which work was still asked (an occurrence due, a submission invoked, a lease
  taken) and never followed by a success is a violation of its own (`unrecovered`); one after
  which nothing more was asked has nothing to recover.

`table` prints verdicts as the issue asks, one row per scenario, seed included for replay.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from tests.faults.history import (
    Attempt,
    AttemptPhase,
    Due,
    Event,
    Fault,
    FaultPhase,
    Fired,
    Held,
    History,
    Missed,
    Submission,
    Submitted,
)

Occurrence = tuple[str, datetime]


@dataclasses.dataclass(frozen=True)
class Verdict:
    scenario: str
    seed: int | None
    due: int
    lost: list[Occurrence]
    fired_twice: list[Occurrence]
    fired_early: list[Occurrence]
    acked_lost: list[str]
    reruns_allowed: int  # after a lease expiry or an ambiguous acknowledgement
    reruns_violating: list[str]  # execution ids run again with no such excuse
    recovery: timedelta | None  # the longest from a fault's end to the first success after it
    unrecovered: list[str]  # faults never followed by a success

    @property
    def ok(self) -> bool:
        return not (self.lost or self.fired_twice or self.fired_early or self.acked_lost or self.reruns_violating
                    or self.unrecovered)

    def problems(self) -> list[str]:
        said = []
        for name, found in (
            ("lost", self.lost), ("fired twice", self.fired_twice), ("fired early", self.fired_early),
            ("acknowledged then lost", self.acked_lost),
            ("run again without a lease expiry or an ambiguous acknowledgement", self.reruns_violating),
            ("never recovered from", self.unrecovered),
        ):  # fmt: skip
            if found:
                said.append(f"{len(found)} {name}: {sorted(map(str, found))[:5]}")
        return said


def check(
    history: History | Iterable[Event], *, scenario: str = "", seed: int | None = None, strict_leases: bool = False
) -> Verdict:
    """Judge `history` (see the module docstring). `strict_leases`: the history records each lease's
    expiry as its holder's deadline passed (a scenario that knows the deadlines), so only an expiry
    excuses a rerun; an ambiguous acknowledgement alone does not (the lease it left still held)."""
    events = sorted(history, key=lambda e: e.at)  # stable: events seen at one time keep their order
    if isinstance(history, History):
        scenario, seed = scenario or history.scenario, seed if seed is not None else history.seed
    lost, twice = _occurrences(events)
    allowed, violating = _reruns(events, strict=strict_leases)
    recovery, unrecovered = _recovery(events)
    return Verdict(
        scenario=scenario,
        seed=seed,
        due=len({(e.job, e.nominal) for e in events if isinstance(e, Due)}),
        lost=lost,
        fired_twice=twice,
        fired_early=sorted({(e.job, e.nominal) for e in events if isinstance(e, Fired) and e.at < e.nominal}),
        acked_lost=_acked_lost(events),
        reruns_allowed=allowed,
        reruns_violating=violating,
        recovery=recovery,
        unrecovered=unrecovered,
    )


def _occurrences(events: Sequence[Event]) -> tuple[list[Occurrence], list[Occurrence]]:
    may_miss: dict[Occurrence, bool] = {}
    endings: dict[Occurrence, list[Fired | Missed]] = defaultdict(list)
    for event in events:
        if isinstance(event, Due):
            may_miss[(event.job, event.nominal)] = may_miss.get((event.job, event.nominal), True) and event.may_miss
        elif isinstance(event, Fired | Missed):
            endings[(event.job, event.nominal)].append(event)
    lost = [
        occurrence for occurrence, missable in may_miss.items()
        if not any(isinstance(e, Fired) or (missable and isinstance(e, Missed)) for e in endings[occurrence])
    ]  # fmt: skip
    twice = [occurrence for occurrence, ended in endings.items() if len(ended) > 1]
    return sorted(lost), sorted(twice)


def _acked_lost(events: Sequence[Event]) -> list[str]:
    held = {e.execution_id for e in events if isinstance(e, Held)}
    if not held and not any(isinstance(e, Held) for e in events):
        return []  # no snapshot of the store's end state was recorded: nothing to compare
    taken = {e.execution_id for e in events if isinstance(e, Fired)}
    taken |= {e.execution_id for e in events if isinstance(e, Submitted) and e.phase is Submission.OK and e.execution_id}
    return sorted(taken - held)


def _reruns(events: Sequence[Event], *, strict: bool) -> tuple[int, list[str]]:
    """Per execution, in time order: each lease after the first, judged by how the run before it
    ended (see the module docstring); and no execution acknowledged as a success twice."""
    allowed, violating = 0, set()
    runs: dict[str, dict[int, set[AttemptPhase]]] = defaultdict(dict)  # execution → attempt → phases seen
    acknowledged: dict[str, int] = defaultdict(int)
    for event in events:
        if not isinstance(event, Attempt):
            continue
        seen = runs[event.execution_id]
        if event.phase is AttemptPhase.LEASED:
            if seen:
                before = seen[max(seen)]  # the latest run leased before this one
                if before & ({AttemptPhase.EXPIRED} if strict else {AttemptPhase.EXPIRED, AttemptPhase.ACK_UNKNOWN}):
                    allowed += 1
                elif before != {AttemptPhase.FAILED}:  # a reported failure's retry is no rerun
                    violating.add(event.execution_id)
            seen[event.attempt] = set()
            continue
        seen.setdefault(event.attempt, set()).add(event.phase)
        if event.phase is AttemptPhase.ACKNOWLEDGED:
            acknowledged[event.execution_id] += 1
            if acknowledged[event.execution_id] > 1:
                violating.add(event.execution_id)
    return allowed, sorted(violating)


def _recovery(events: Sequence[Event]) -> tuple[timedelta | None, list[str]]:
    ends = [e for e in events if isinstance(e, Fault) and e.phase is FaultPhase.END]
    successes = [
        e.at for e in events
        if isinstance(e, Fired)
        or (isinstance(e, Submitted) and e.phase is Submission.OK)
        or (isinstance(e, Attempt) and e.phase is AttemptPhase.ACKNOWLEDGED)
    ]  # fmt: skip
    longest: timedelta | None = None
    unrecovered = []
    asked = [
        e.at for e in events
        if isinstance(e, Due)
        or (isinstance(e, Submitted) and e.phase is Submission.INVOKE)
        or (isinstance(e, Attempt) and e.phase is AttemptPhase.LEASED)
    ]  # fmt: skip
    for end in ends:
        after = [at for at in successes if at >= end.at]
        if not after:
            if any(at >= end.at for at in asked):  # work asked after the fault, and nothing done
                unrecovered.append(f"{end.name} (ended {end.at.isoformat()})")
            continue
        took = min(after) - end.at
        longest = took if longest is None or took > longest else longest
    return longest, unrecovered


def table(verdicts: Iterable[Verdict]) -> str:
    """The checker's figures, one row per scenario."""
    head = ("scenario", "seed", "due", "lost", "fired 2x", "early", "acked+lost", "reruns ok", "reruns bad", "recover s", "ok")
    rows = [head]
    for v in verdicts:
        rows.append((
            v.scenario, "" if v.seed is None else str(v.seed), str(v.due), str(len(v.lost)), str(len(v.fired_twice)),
            str(len(v.fired_early)),
            str(len(v.acked_lost)), str(v.reruns_allowed), str(len(v.reruns_violating)),
            "-" if v.recovery is None else f"{v.recovery.total_seconds():.1f}", "yes" if v.ok else "NO",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)
