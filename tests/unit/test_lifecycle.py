"""The operator's lifecycle (vigil.kube.lifecycle), on stepped clocks and stand-in threads.

Covers the handover: the acting threads share one deadline (a thread that outlasts it leaves
the others none, and the Lease is released anyway), caches are not waited for, the dispatcher is
woken before any join, the job statuses are flushed with at least a second after the passes end,
and the Lease is released last; a standby told to stop gives back its senders, shards and
campaign; the leader's main thread hands over once stopped, even when waiting raised; a store's
migration tried again with a doubling delay up to its cap, and given up once the process stops.

No test sleeps: the threads are stand-ins whose `join` moves a fake monotonic clock, and the
migration's wait is a recorder.
"""

from __future__ import annotations

import contextlib
import threading

import pytest

from vigil.kube import lifecycle
from vigil.kube.lifecycle import (
    HANDOVER_JOIN_SECONDS,
    MIGRATE_RETRY_MAX_SECONDS,
    MIGRATE_RETRY_SECONDS,
    hand_over,
    lead_until_stopped,
    retry_until_ready,
    stand_down,
    wait_until_leader,
)


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class StandInThread:
    """A thread that ends `runs_for` seconds after the handover began (never: None); joining it
    moves the clock to when it ends, or to the join's timeout."""

    def __init__(self, name: str, clock: Clock, log: list[str], *, runs_for: float | None = 0.0) -> None:
        self.name = name
        self._clock = clock
        self._ends_at = None if runs_for is None else clock.now + runs_for
        self._log = log
        self.timeouts: list[float | None] = []

    def join(self, timeout: float | None = None) -> None:
        self._log.append(f"join {self.name}")
        self.timeouts.append(timeout)
        assert timeout is not None
        ends = self._clock.now + timeout if self._ends_at is None else min(self._ends_at, self._clock.now + timeout)
        self._clock.now = max(self._clock.now, ends)

    def is_alive(self) -> bool:
        return self._ends_at is None or self._clock.now < self._ends_at


class Released:
    def __init__(self, log: list[str], what: str = "lease") -> None:
        self._log = log
        self._what = what

    def release(self) -> None:
        self._log.append(f"release {self._what}")


def test_the_acting_threads_share_one_deadline_and_the_lease_is_released_last() -> None:
    clock, log = Clock(), []
    slow = StandInThread("trigger", clock, log, runs_for=2.0)
    stuck = StandInThread("dispatcher", clock, log, runs_for=None)
    after = StandInThread("history", clock, log, runs_for=0.0)
    flushed: list[float] = []
    stop = threading.Event()
    began = clock.now

    hand_over(
        stop, [slow, stuck, after], Released(log), flush=lambda deadline: (flushed.append(deadline), log.append("flush")),
        wake=lambda: log.append("wake"), monotonic=clock,
    )  # fmt: skip

    assert stop.is_set()
    assert log == ["wake", "join trigger", "join dispatcher", "join history", "flush", "release lease"]
    assert slow.timeouts == [HANDOVER_JOIN_SECONDS]
    assert stuck.timeouts == [HANDOVER_JOIN_SECONDS - 2.0]
    assert after.timeouts == [0.0]  # the stuck one took what was left
    assert flushed == [began + HANDOVER_JOIN_SECONDS + 1.0]  # at least a second after the passes ended


def test_caches_are_not_waited_for() -> None:
    clock, log = Clock(), []
    cache = StandInThread("pods-cache", clock, log, runs_for=None)
    trigger = StandInThread("trigger", clock, log, runs_for=0.5)
    flushed: list[float] = []

    hand_over(threading.Event(), [cache, trigger], Released(log), flush=flushed.append, monotonic=clock)

    assert cache.timeouts == []
    assert log == ["join trigger", "release lease"]
    assert flushed == [100.0 + HANDOVER_JOIN_SECONDS]  # the deadline: later than a second after 100.5


def test_a_standby_told_to_stop_gives_back_its_senders_shards_and_campaign() -> None:
    log: list[str] = []
    senders = threading.Event()

    stand_down(Released(log), senders=senders, shards=Released(log, "shards"))

    assert senders.is_set()
    assert log == ["release shards", "release lease"]


def test_a_standby_without_shards_releases_its_campaign() -> None:
    log: list[str] = []
    stand_down(Released(log), senders=threading.Event(), shards=None)
    assert log == ["release lease"]


class Elector:
    def __init__(self, leads_after: int) -> None:
        self.polls = 0
        self._leads_after = leads_after

    def wait_until_leader(self, timeout: float | None = None) -> bool:
        assert timeout == lifecycle.STOP_POLL_SECONDS
        self.polls += 1
        return self.polls > self._leads_after

    def release(self) -> None:
        raise AssertionError("not released while waiting")


def test_a_standby_waits_poll_by_poll_until_it_leads() -> None:
    elector = Elector(leads_after=3)
    assert wait_until_leader(elector, threading.Event())
    assert elector.polls == 4


def test_a_standby_already_told_to_stop_does_not_wait() -> None:
    stopping = threading.Event()
    stopping.set()
    elector = Elector(leads_after=0)
    assert not wait_until_leader(elector, stopping)
    assert elector.polls == 0


class Stopping(threading.Event):
    """Set already; `wait` may raise instead (a signal's handler raising in the main thread)."""

    def __init__(self, *, raises: bool = False) -> None:
        super().__init__()
        self.set()
        self._raises = raises

    def wait(self, timeout: float | None = None) -> bool:
        if self._raises:
            raise KeyboardInterrupt
        return True


@pytest.mark.parametrize("raises", [False, True], ids=["stopped", "waiting-raised"])
def test_the_leader_hands_over_once_stopped(raises: bool) -> None:
    clock, log = Clock(), []
    senders, stop = threading.Event(), threading.Event()
    thread = StandInThread("trigger", clock, log)
    # A stop signal raised while the leader waits (KeyboardInterrupt) still hands over, then propagates.
    with pytest.raises(KeyboardInterrupt) if raises else contextlib.nullcontext():
        lead_until_stopped(
            Stopping(raises=raises), me="me", stop=stop, threads=[thread], elector=Released(log), senders=senders,
            shards=Released(log, "shards"), flush=lambda deadline: log.append("flush"), wake=lambda: log.append("wake"),
        )  # fmt: skip

    assert senders.is_set() and stop.is_set()
    assert log == ["release shards", "wake", "join trigger", "flush", "release lease"]


class Store:
    """A store that refuses `refusals` migrations, then migrates."""

    def __init__(self, refusals: int) -> None:
        self.tries = 0
        self._refusals = refusals

    def migrate(self) -> None:
        self.tries += 1
        if self.tries <= self._refusals:
            raise ConnectionError("connection refused")


def test_a_migration_is_tried_again_with_a_doubling_delay_up_to_its_cap() -> None:
    store, waits = Store(refusals=7), []

    migrated = retry_until_ready(store.migrate, stopped=lambda: False, wait=waits.append, what="store", meanwhile="-")

    assert migrated
    assert store.tries == 8
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert waits[0] == MIGRATE_RETRY_SECONDS and max(waits) == MIGRATE_RETRY_MAX_SECONDS


def test_a_migration_that_succeeds_at_once_does_not_wait() -> None:
    store, waits = Store(refusals=0), []
    assert retry_until_ready(store.migrate, stopped=lambda: False, wait=waits.append, what="store", meanwhile="-")
    assert (store.tries, waits) == (1, [])


def test_a_stop_ends_the_migrations_retries() -> None:
    store, waits = Store(refusals=100), []
    stopped = threading.Event()

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            stopped.set()  # the process is stopping while the store is still down

    migrated = retry_until_ready(store.migrate, stopped=stopped.is_set, wait=wait, what="store", meanwhile="-")

    assert not migrated
    assert store.tries == 2


def test_a_stop_before_the_first_try_tries_nothing() -> None:
    store = Store(refusals=0)
    assert not retry_until_ready(store.migrate, stopped=lambda: True, wait=lambda s: None, what="store", meanwhile="-")
    assert store.tries == 0
