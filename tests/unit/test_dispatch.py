"""Dispatch: which ready executions start, under reserved high capacity, caps and fairness.

Covers named scenarios (free slots, reserved capacity, namespace caps, priority order, round-robin
within a priority, fewest-running-first, work conservation across priorities), the oldest-ready
age per priority, hypothesis properties (caps never exceeded, reserved slots never used by
normal/low work, high work starts whenever a slot it may use is free, nothing startable left
waiting, independence from input order, each namespace's oldest first), and two simulations:
a 1,000-execution backfill in one namespace must not delay another namespace's ten executions,
and a high execution waits for at most one slot to free (none with reserved capacity).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vigil.core.dispatch import (
    Candidate,
    Capacity,
    Priority,
    Running,
    choose,
    oldest_ready_age,
)
from vigil.core.ids import ExecutionId

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW


def cand(name: str, namespace: str, priority: Priority = NORMAL, *, at: int = 0) -> Candidate:
    """A candidate ready since T0 + `at` seconds."""
    return Candidate(
        execution_id=ExecutionId(name),
        namespace=namespace,
        priority=priority,
        ready_since=T0 + at * SECOND,
    )


def batch(
    namespace: str, count: int, priority: Priority = NORMAL, *, at: int = 0
) -> list[Candidate]:
    return [cand(f"{namespace}-{index:05d}", namespace, priority, at=at) for index in range(count)]


def ids(chosen: Sequence[Candidate]) -> list[str]:
    return [c.execution_id for c in chosen]


def occupied(started: Sequence[Candidate]) -> Running:
    by_namespace = Counter(c.namespace for c in started)
    high = sum(c.priority is HIGH for c in started)
    return Running(total=len(started), high=high, by_namespace=dict(by_namespace))


# --- named scenarios --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ready", "running", "capacity", "expected"),
    [
        pytest.param([], Running(), Capacity(10, 0, 10), [], id="nothing-ready"),
        pytest.param(
            batch("a", 5),
            Running(total=3, by_namespace={"b": 3}),
            Capacity(5, 0, 5),
            ["a-00000", "a-00001"],
            id="only-free-slots",
        ),
        pytest.param(
            batch("a", 3),
            Running(total=8, by_namespace={"b": 8}),
            Capacity(10, 2, 10),
            [],
            id="normal-never-takes-reserved-slots",
        ),
        pytest.param(
            [*batch("a", 3), cand("h1", "b", HIGH), cand("h2", "b", HIGH)],
            Running(total=8, by_namespace={"b": 8}),
            Capacity(10, 2, 10),
            ["h1", "h2"],
            id="high-takes-reserved-slots",
        ),
        pytest.param(
            batch("a", 12, HIGH),
            Running(),
            Capacity(10, 2, 10),
            [f"a-{index:05d}" for index in range(10)],
            id="high-may-use-every-slot",
        ),
        pytest.param(
            batch("a", 3, LOW),
            Running(total=5, high=5, by_namespace={"c": 5}),
            Capacity(10, 5, 10),
            ["a-00000", "a-00001", "a-00002"],
            id="running-high-work-leaves-the-shared-slots-alone",
        ),
        pytest.param(
            batch("a", 5),
            Running(total=2, by_namespace={"a": 2}),
            Capacity(10, 0, 3),
            ["a-00000"],
            id="namespace-cap",
        ),
        pytest.param(
            [
                cand("low", "a", LOW),
                cand("normal", "a", NORMAL, at=5),
                cand("high", "a", HIGH, at=9),
            ],
            Running(),
            Capacity(10, 0, 10),
            ["high", "normal", "low"],
            id="priority-order",
        ),
        pytest.param(
            [
                cand("low", "a", LOW),
                cand("normal", "a", NORMAL, at=5),
                cand("high", "a", HIGH, at=9),
            ],
            Running(total=8, by_namespace={"b": 8}),
            Capacity(10, 0, 10),
            ["high", "normal"],
            id="scarce-slots-go-to-the-higher-priority",
        ),
        pytest.param(
            [*batch("b", 3, at=1), *batch("a", 3, at=0), cand("c-1", "c", at=2)],
            Running(),
            Capacity(7, 0, 7),
            ["a-00000", "b-00000", "c-1", "a-00001", "b-00001", "a-00002", "b-00002"],
            id="round-robin-from-the-oldest-work",
        ),
        pytest.param(
            [*batch("a", 3, at=0), *batch("b", 3, at=60)],
            Running(total=4, by_namespace={"a": 4}),
            Capacity(6, 0, 6),
            ["b-00000", "b-00001"],
            id="fewest-running-namespace-first",
        ),
        pytest.param(
            [*batch("a", 3, HIGH), *batch("b", 2, LOW)],
            Running(total=2, high=2, by_namespace={"a": 2}),
            Capacity(10, 0, 2),
            ["b-00000", "b-00001"],
            id="capped-high-work-does-not-idle-the-slots",
        ),
    ],
)
def test_choose(
    ready: list[Candidate], running: Running, capacity: Capacity, expected: list[str]
) -> None:
    assert ids(choose(ready, running, capacity)) == expected


def test_each_namespace_starts_its_oldest_work_first() -> None:
    ready = [cand("late", "a", at=30), cand("early", "a", at=10), cand("middle", "a", at=20)]
    assert ids(choose(ready, Running(), Capacity(3, 0, 3))) == ["early", "middle", "late"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(lambda: Capacity(5, 6, 5), "reserved_high", id="reserved-above-max"),
        pytest.param(lambda: Capacity(-1, 0, 5), "negative", id="negative"),
        pytest.param(lambda: Running(total=1, high=2), "running high", id="more-high-than-total"),
    ],
)
def test_inconsistent_settings_are_refused(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_oldest_ready_age_per_priority() -> None:
    now = T0 + timedelta(minutes=10)
    ready = [
        *batch("a", 100_000, LOW, at=596),  # a big, young backfill
        cand("stale", "b", NORMAL, at=60),  # one old execution: nine minutes
        cand("future", "c", HIGH, at=900),  # clock skew: never a negative age
    ]
    assert oldest_ready_age(ready, now) == {"high": 0.0, "normal": 540.0, "low": 4.0}
    assert oldest_ready_age([], now) == {"high": 0.0, "normal": 0.0, "low": 0.0}


# --- properties -------------------------------------------------------------------------------

NAMESPACES = ("a", "b", "c", "d")


@st.composite
def situations(draw: st.DrawFn) -> tuple[list[Candidate], Running, Capacity]:
    max_running = draw(st.integers(0, 12))
    capacity = Capacity(
        max_running=max_running,
        reserved_high=draw(st.integers(0, max_running)),
        per_namespace_max=draw(st.integers(0, 8)),
    )
    running = draw(st.lists(st.tuples(st.sampled_from(NAMESPACES), st.booleans()), max_size=12))
    by_namespace = Counter(namespace for namespace, _ in running)
    state = Running(
        total=len(running), high=sum(high for _, high in running), by_namespace=dict(by_namespace)
    )
    raw = draw(
        st.lists(
            st.tuples(
                st.sampled_from(NAMESPACES), st.sampled_from(list(Priority)), st.integers(0, 5)
            ),
            max_size=30,
        )
    )
    ready = [
        cand(f"ex-{index}", ns, priority, at=at) for index, (ns, priority, at) in enumerate(raw)
    ]
    return ready, state, capacity


def after_start(running: Running, chosen: Sequence[Candidate]) -> tuple[Counter[str], int, int]:
    """(per-namespace, total, normal-and-low) counts once `chosen` has started."""
    per_namespace = Counter(running.by_namespace) + Counter(c.namespace for c in chosen)
    total = running.total + len(chosen)
    shared = running.total - running.high + sum(c.priority is not HIGH for c in chosen)
    return per_namespace, total, shared


def startable(
    candidate: Candidate, per_namespace: Counter[str], total: int, shared: int, capacity: Capacity
) -> bool:
    """Whether `candidate` could still start without breaking a limit."""
    if (
        total >= capacity.max_running
        or per_namespace[candidate.namespace] >= capacity.per_namespace_max
    ):
        return False
    return candidate.priority is HIGH or shared < capacity.shared


@settings(max_examples=400, deadline=None)
@given(situation=situations())
def test_caps_and_reserved_slots_are_never_exceeded(
    situation: tuple[list[Candidate], Running, Capacity],
) -> None:
    ready, running, capacity = situation
    chosen = choose(ready, running, capacity)
    per_namespace, total, shared = after_start(running, chosen)
    assert len(set(ids(chosen))) == len(chosen) and set(chosen) <= set(ready)
    assert not chosen or total <= capacity.max_running
    for namespace in {c.namespace for c in chosen}:
        assert per_namespace[namespace] <= capacity.per_namespace_max
    if any(c.priority is not HIGH for c in chosen):
        assert shared <= capacity.shared  # normal/low never sit in a reserved slot


@settings(max_examples=400, deadline=None)
@given(situation=situations())
def test_nothing_startable_is_left_waiting_and_high_goes_first(
    situation: tuple[list[Candidate], Running, Capacity],
) -> None:
    ready, running, capacity = situation
    chosen = choose(ready, running, capacity)
    per_namespace, total, shared = after_start(running, chosen)
    left = [c for c in ready if c not in chosen]
    assert not any(startable(c, per_namespace, total, shared, capacity) for c in left)
    ranks = [list(Priority).index(c.priority) for c in chosen]
    assert ranks == sorted(ranks)


@settings(max_examples=400, deadline=None)
@given(situation=situations())
def test_a_high_candidate_starts_whenever_a_slot_is_free(
    situation: tuple[list[Candidate], Running, Capacity],
) -> None:
    ready, running, capacity = situation
    slot_free = running.total < capacity.max_running
    room = [
        c
        for c in ready
        if c.priority is HIGH
        and running.by_namespace.get(c.namespace, 0) < capacity.per_namespace_max
    ]
    chosen = choose(ready, running, capacity)
    if slot_free and room:
        assert chosen and chosen[0].priority is HIGH


@settings(max_examples=200, deadline=None)
@given(situation=situations(), seed=st.integers(0, 2**32))
def test_choice_is_deterministic_and_oldest_first_within_a_namespace(
    situation: tuple[list[Candidate], Running, Capacity], seed: int
) -> None:
    ready, running, capacity = situation
    chosen = choose(ready, running, capacity)
    shuffled = list(ready)
    random.Random(seed).shuffle(shuffled)
    assert choose(shuffled, running, capacity) == chosen
    for namespace in NAMESPACES:
        for priority in Priority:
            mine = [c for c in chosen if (c.namespace, c.priority) == (namespace, priority)]
            pool = sorted(
                (c for c in ready if (c.namespace, c.priority) == (namespace, priority)),
                key=lambda c: (c.ready_since, c.execution_id),
            )
            assert mine == pool[: len(mine)]


# --- simulations ------------------------------------------------------------------------------


@dataclasses.dataclass
class Cluster:
    """Slots that free one at a time (the longest-running first) and get refilled by `choose`."""

    capacity: Capacity
    ready: list[Candidate] = dataclasses.field(default_factory=list)
    running: list[Candidate] = dataclasses.field(default_factory=list)
    started: list[Candidate] = dataclasses.field(default_factory=list)

    def fill(self) -> list[Candidate]:
        chosen = choose(self.ready, occupied(self.running), self.capacity)
        gone = set(chosen)
        self.ready = [c for c in self.ready if c not in gone]
        self.running.extend(chosen)
        self.started.extend(chosen)
        return chosen

    def finish_oldest(self) -> None:
        self.running.pop(0)

    def starts_of(self, namespace: str) -> list[int]:
        return [index for index, c in enumerate(self.started) if c.namespace == namespace]


BACKFILL_CAPACITY = Capacity(max_running=20, reserved_high=0, per_namespace_max=20)


def run_until_a_started(cluster: Cluster, count: int) -> None:
    while len(cluster.starts_of("a")) < count:
        cluster.finish_oldest()
        cluster.fill()


def test_a_backfill_does_not_delay_another_namespace_arriving_at_once() -> None:
    cluster = Cluster(BACKFILL_CAPACITY, ready=[*batch("a", 1_000), *batch("b", 10)])
    cluster.fill()
    run_until_a_started(cluster, 100)
    b_starts = cluster.starts_of("b")
    assert len(b_starts) == 10
    assert max(b_starts) < cluster.starts_of("a")[99]


def test_a_backfill_holding_every_slot_does_not_delay_work_arriving_later() -> None:
    cluster = Cluster(BACKFILL_CAPACITY, ready=batch("a", 1_000))
    cluster.fill()
    assert len(cluster.running) == 20
    cluster.ready.extend(batch("b", 10, at=60))
    run_until_a_started(cluster, 100)
    b_starts = cluster.starts_of("b")
    assert len(b_starts) == 10
    assert max(b_starts) < cluster.starts_of("a")[99]
    assert max(b_starts) < 20 + 10  # each of the next ten freed slots went to b


def test_high_work_waits_for_no_more_than_one_slot_to_free() -> None:
    cluster = Cluster(Capacity(max_running=20, reserved_high=0, per_namespace_max=20))
    cluster.ready = batch("a", 1_000)
    cluster.fill()
    urgent = cand("urgent", "b", HIGH, at=60)
    cluster.ready.append(urgent)
    assert cluster.fill() == []  # every slot busy with normal work
    cluster.finish_oldest()
    assert cluster.fill() == [urgent]


def test_high_work_starts_at_once_in_reserved_capacity() -> None:
    cluster = Cluster(Capacity(max_running=20, reserved_high=2, per_namespace_max=20))
    cluster.ready = batch("a", 1_000)
    cluster.fill()
    assert len(cluster.running) == 18  # the normal backlog leaves the reserved slots alone
    urgent = cand("urgent", "b", HIGH, at=60)
    cluster.ready.append(urgent)
    assert cluster.fill() == [urgent]
