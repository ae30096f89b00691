"""The operator process's life: campaign, lead, hand over; and a store's migration, waited for.

The composition root (`vigil.runtime`) builds the parts and names the threads; this module
holds what happens to them over the process's life, so it can be read (and tested) apart from
the wiring:

- `stop_on_sigterm`: the Event a SIGTERM or SIGINT sets, installed at the process's start.
- `wait_until_leader`: a standby waits for the Lease, or for a stop.
- `start_threads`: the leader's named threads, each a daemon.
- `stand_down`: a standby told to stop releases what it holds and returns.
- `lead_until_stopped`: the leader waits for the stop, then hands over.
- `hand_over`: a graceful stop — the passes in flight end within one shared deadline, what the
  trigger recorded last is flushed to the jobs, and the Lease is released, so a standby leads at
  its next poll rather than after a whole lease duration.
- `exit_on_lost_leadership`: a leader that lost its Lease exits at once (its Deployment restarts
  it as a standby), so no stale leader acts.
- `retry_until_ready`: a store's migration (the queue store's, before its trigger shards start)
  tried again with a doubling delay until it succeeds or the process stops; a store that is
  down holds back only what needs it.

Clocks and waits are passed in (`monotonic`, `wait`), so the unit tests
(tests/unit/test_lifecycle.py) step them rather than sleep.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

log = logging.getLogger("vigil")

EXIT_LOST_LEADERSHIP = 75  # EX_TEMPFAIL: restart me
HANDOVER_JOIN_SECONDS = 5.0  # how long a stopping leader waits for the passes in flight to finish
PASSIVE_SUFFIX = "-cache"  # threads named so only fill a cache: a handover need not wait for them
STOP_POLL_SECONDS = 0.5  # how often a standby waiting for the Lease looks whether it was told to stop
#: A store that does not answer is tried again after this, doubling per failure up to
#: MIGRATE_RETRY_MAX_SECONDS: soon after a brief outage, and at most twice a minute during a long one.
MIGRATE_RETRY_SECONDS = 1.0
MIGRATE_RETRY_MAX_SECONDS = 30.0

Threads = Sequence[tuple[str, Callable[[], None]]]


class Lease(Protocol):
    """What the lifecycle needs of a Lease holder (`vigil.kube.kits.leasing.LeaderElector`)."""

    def wait_until_leader(self, timeout: float | None = None) -> bool: ...
    def release(self) -> None: ...


class Releasable(Protocol):
    """Something held that a stop gives back (the trigger shards' Leases)."""

    def release(self) -> None: ...


class Joinable(Protocol):
    """A running thread as the handover sees it."""

    @property
    def name(self) -> str: ...
    def join(self, timeout: float | None = None) -> None: ...
    def is_alive(self) -> bool: ...


def stop_on_sigterm() -> threading.Event:
    """An Event that SIGTERM (a pod being deleted, `docker stop`) or SIGINT (Ctrl-C) sets, from
    the process's start.

    In a container the operator is PID 1, and the kernel drops every signal PID 1 has no handler
    for: without this one a SIGTERM is lost, and the pod waits out its whole grace period for
    SIGKILL (its Lease, if it held one, then expires instead of being released).
    """
    stopping = threading.Event()
    if threading.current_thread() is threading.main_thread():  # only the main thread may
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopping.set())
    return stopping


def wait_until_leader(elector: Lease, stopping: threading.Event) -> bool:
    """Wait for the Lease, or for a stop: whether this process leads."""
    while not stopping.is_set():
        if elector.wait_until_leader(timeout=STOP_POLL_SECONDS):
            return True
    return False


def exit_on_lost_leadership() -> None:
    """The elector's `on_lost`: exit now, without unwinding (a thread of the old leader's must not
    finish a write after a successor has begun)."""
    log.error("leadership lost: exiting so that no stale leader acts")
    logging.shutdown()
    os._exit(EXIT_LOST_LEADERSHIP)


def start_threads(threads: Threads) -> list[threading.Thread]:
    """Start each `(name, target)` as a daemon thread of that name; the threads, started."""
    started = [threading.Thread(target=target, name=name, daemon=True) for name, target in threads]
    for thread in started:
        thread.start()
    return started


def stand_down(elector: Releasable, *, senders: threading.Event, shards: Releasable | None) -> None:
    """A standby told to stop: its approval senders stop, its trigger shards and the Lease
    campaign are released."""
    senders.set()
    if shards is not None:
        shards.release()
    elector.release()


def lead_until_stopped(
    stopping: threading.Event,
    *,
    me: str,
    stop: threading.Event,
    threads: Sequence[Joinable],
    elector: Releasable,
    senders: threading.Event,
    shards: Releasable | None,
    flush: Callable[[float], None],
    wake: Callable[[], None],
) -> None:
    """The leader's main thread: the `threads` act; this one waits for `stopping`, then stops
    the approval senders, releases the trigger shards and hands over (`hand_over`)."""
    try:
        while not stopping.wait(STOP_POLL_SECONDS):
            pass  # the threads act; this one only waits to be told to stop
        log.info("%s stopping (SIGTERM): handing over", me)
    finally:
        senders.set()
        if shards is not None:
            shards.release()
        hand_over(stop, threads, elector, flush=flush, wake=wake)


def hand_over(
    stop: threading.Event,
    threads: Sequence[Joinable],
    elector: Releasable,
    flush: Callable[[float], None] = lambda deadline: None,
    wake: Callable[[], None] = lambda: None,
    *,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """A graceful stop (SIGTERM): stop acting — the trigger finishes the pass it is in
    — then release the Lease, so a standby leads at its next poll instead of after a whole lease.

    The threads that act get one deadline between them (not one each: ten threads of 5 s each
    held a handover for 15 s). The caches only read, and a watch stream ends only when its
    server-side timeout does, so they are not waited for. `flush` is given the deadline (at
    least a second from when the passes ended) to write what the trigger recorded last."""
    stop.set()
    wake()  # a pass waiting for work (the dispatcher's) sees the stop now, not at its interval
    began = monotonic()
    deadline = began + HANDOVER_JOIN_SECONDS
    waited: dict[str, float] = {}
    for thread in threads:
        if not thread.name.endswith(PASSIVE_SUFFIX):
            t0 = monotonic()
            thread.join(timeout=max(0.0, deadline - monotonic()))
            waited[thread.name] = monotonic() - t0
    late = [t.name for t in threads if t.is_alive() and not t.name.endswith(PASSIVE_SUFFIX)]
    if late:
        log.warning("stopping: %s still running after %.0fs; releasing the Lease anyway", ", ".join(late),
                    HANDOVER_JOIN_SECONDS)  # fmt: skip
    joined = monotonic()
    flush(max(deadline, monotonic() + 1.0))  # what the trigger recorded last is on the jobs first
    slowest = max(waited, key=lambda name: waited[name], default="none")
    log.info("stopping: passes ended in %.2fs (the slowest: %s), job statuses written in %.2fs", joined - began,
             slowest, monotonic() - joined)  # fmt: skip
    elector.release()


def retry_until_ready(
    step: Callable[[], object],
    *,
    stopped: Callable[[], bool],
    wait: Callable[[float], object],
    what: str,
    meanwhile: str,
    initial_seconds: float = MIGRATE_RETRY_SECONDS,
    max_seconds: float = MIGRATE_RETRY_MAX_SECONDS,
) -> bool:
    """Run `step` (a migration) until it succeeds, waiting `initial_seconds` after a failure,
    doubling up to `max_seconds`; whether it succeeded (False: `stopped` first). `wait(seconds)`
    waits for the stop, at most that long (`ShardLeases.wait_stopped`). Each failure is logged
    as "`what` not ready (the error): `meanwhile`, again in N s"."""
    delay = initial_seconds
    while not stopped():
        try:
            step()
        except Exception as err:
            log.warning("%s not ready (%s): %s, again in %.0fs", what, err, meanwhile, delay)
            wait(delay)
            delay = min(delay * 2, max_seconds)
            continue
        return True
    return False
