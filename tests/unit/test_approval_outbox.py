"""The approval outbox (vigil.kube.kits.outbox) and the publisher's offers (vigil.kube.controllers.approvals).

The retry delays are a table: the first after `first`, doubling up to the cap, stretched by at
most a fifth, never earlier than the base. The outbox runs its real sender threads on a fake
clock the test moves: a failed delivery is not tried again before its delay (the test waits
until the senders have looked at the clock twice just before it), and is tried once the clock
reaches it; a success resets the count. A full outbox refuses a new key, keeps the ones it
accepted, and takes the refused key once there is room. The publisher's hooks only offer: a
pass reads no workflow and sends nothing; a workflow the full outbox refused is offered again
on its next pass.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.unit.test_approval_delivery import Clock, FakeCore, Notifier, key_of, waiting_workflow
from tests.waiting import wait_for
from vigil.core.workflow import Event, Record, StepKind
from vigil.core.workflowpass import Pass
from vigil.kube.controllers.approvals import TokenPublisher
from vigil.kube.kits.outbox import JITTER, Outbox, retry_delay

WAIT = 10.0  # seconds any condition of these tests may take to come true on a busy machine


@pytest.mark.parametrize(
    ("failures", "spread", "seconds"),
    [
        pytest.param(1, 0.0, 30.0, id="first-retry-after-first"),
        pytest.param(2, 0.0, 60.0, id="doubles"),
        pytest.param(4, 0.0, 240.0, id="doubles-again"),
        pytest.param(5, 0.0, 480.0, id="below-the-cap"),
        pytest.param(6, 0.0, 600.0, id="capped"),
        pytest.param(500, 0.0, 600.0, id="capped-however-many"),
        pytest.param(1, 0.5, 30.0 * (1 + JITTER / 2), id="jitter-stretches"),
        pytest.param(6, 0.999999, 600.0 * (1 + JITTER * 0.999999), id="jitter-at-the-cap"),
    ],
)
def test_retry_delays_double_up_to_the_cap_with_jitter_above_the_base(
    failures: int, spread: float, seconds: float
) -> None:
    assert retry_delay(failures, first=30.0, cap=600.0, spread=spread) == pytest.approx(seconds)


class Ticks:
    """A monotonic clock the test moves; it counts how often the senders read it."""

    def __init__(self) -> None:
        self.at = 0.0
        self.reads = 0
        self._cond = threading.Condition()

    def __call__(self) -> float:
        with self._cond:
            self.reads += 1
            self._cond.notify_all()
            return self.at

    def move_and_wait_looked(self, to: float) -> None:
        """Move to ``to``, then wait until the senders have read it twice: a whole look at the
        queue has happened at that time (the first read may have begun before the move)."""
        with self._cond:
            self.at = to
            seen = self.reads
            assert self._cond.wait_for(lambda: self.reads >= seen + 2, timeout=WAIT)


class Deliveries:
    """A delivery that fails the first ``failing`` times; records the clock at each try."""

    def __init__(self, ticks: Ticks, *, failing: int) -> None:
        self.ticks = ticks
        self.failing = failing
        self.tried_at: list[float] = []
        self.tried = threading.Semaphore(0)

    def __call__(self, key: str) -> bool:
        self.tried_at.append(self.ticks.at)
        self.tried.release()
        return len(self.tried_at) > self.failing

    def next_try(self) -> None:
        assert self.tried.acquire(timeout=WAIT), "no delivery tried"


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_a_failed_delivery_waits_its_backoff_then_is_tried_until_it_succeeds(stop: threading.Event) -> None:
    ticks = Ticks()
    deliver = Deliveries(ticks, failing=2)
    failures: list[None] = []
    outbox: Outbox[str] = Outbox(
        "test", deliver, senders=1, capacity=8, first_retry=30.0, max_retry=600.0,
        ticks=ticks, spread=lambda: 0.5, on_failed=lambda: failures.append(None),
    )  # fmt: skip
    threading.Thread(target=outbox.run, args=(stop,), daemon=True).start()
    assert outbox.offer("wf")
    deliver.next_try()
    first = 30.0 * (1 + JITTER * 0.5)
    ticks.move_and_wait_looked(first - 0.1)
    assert deliver.tried_at == [0.0], "tried again before its backoff"
    ticks.move_and_wait_looked(first)
    deliver.next_try()
    second = first + 60.0 * (1 + JITTER * 0.5)
    ticks.move_and_wait_looked(second - 0.1)
    assert deliver.tried_at == [0.0, first], "the second retry did not wait twice as long"
    ticks.move_and_wait_looked(second)
    deliver.next_try()
    assert deliver.tried_at == [0.0, first, second]
    wait_for(outbox.idle, timeout=WAIT, what="the delivered key to leave the outbox")
    assert len(failures) == 2
    ticks.move_and_wait_looked(second + 10_000.0)
    assert len(deliver.tried_at) == 3, "a delivered key was tried again"


def test_a_full_outbox_refuses_new_keys_and_keeps_the_ones_it_accepted(stop: threading.Event) -> None:
    gate, started = threading.Event(), threading.Event()
    delivered: list[str] = []
    refused: list[None] = []

    def deliver(key: str) -> bool:
        if key == "a":
            started.set()
            assert gate.wait(WAIT)
        delivered.append(key)
        return True

    outbox: Outbox[str] = Outbox(
        "test", deliver, senders=1, capacity=1, first_retry=1.0, max_retry=1.0, on_refused=lambda: refused.append(None)
    )
    threading.Thread(target=outbox.run, args=(stop,), daemon=True).start()
    assert outbox.offer("a")
    assert started.wait(WAIT)
    assert outbox.offer("a"), "a key already accepted is not refused"
    assert not outbox.offer("b")
    assert (len(refused), outbox.depth) == (1, 1)
    gate.set()
    wait_for(outbox.idle, timeout=WAIT, what="'a' to be delivered")
    assert outbox.offer("b")
    wait_for(lambda: "b" in delivered, timeout=WAIT, what="'b' to be delivered")
    assert delivered.count("b") == 1


# --- the publisher's hooks: they only offer ---------------------------------------------------


class Offers:
    """An outbox that never sends: what was offered, refusing while ``full``."""

    def __init__(self) -> None:
        self.offered: list[tuple[str, str]] = []
        self.full = False

    def offer(self, key: tuple[str, str]) -> bool:
        self.offered.append(key)
        return not self.full


def started_approval() -> Record:
    return Record(Event.STEP_STARTED, Clock().now(), step="approve", detail={"kind": str(StepKind.APPROVAL)})


def test_a_pass_only_offers_and_a_refused_workflow_is_offered_on_its_next_pass() -> None:
    clock, notifier = Clock(), Notifier()
    workflow = waiting_workflow(clock)
    reads: list[tuple[str, str]] = []

    def find(namespace: str, name: str) -> dict[str, object]:
        reads.append((namespace, name))
        return workflow

    publisher = TokenPublisher(
        key=key_of(FakeCore(), clock), notifier=notifier, clock=clock, find_workflow=find,
        default_lifetime=timedelta(hours=24),
    )  # fmt: skip
    offers = Offers()
    publisher.sending_with(offers)  # the publisher needs only `offer` of its outbox
    done = Pass("media", "publish", (started_approval(),), (), "Running")
    publisher.on_pass(done)
    assert (offers.offered, reads, notifier.sent) == ([("media", "publish")], [], [])
    assert publisher.deliver(("media", "publish"))
    assert len(notifier.sent) == 2
    quiet = Pass("media", "publish", (), (), "Running")
    publisher.on_pass(quiet)
    assert len(offers.offered) == 1, "checked just now: a quiet pass offers nothing"
    offers.full = True
    publisher.on_pass(done)
    assert len(offers.offered) == 2
    offers.full = False
    publisher.on_pass(quiet)
    assert len(offers.offered) == 3, "refused: not offered again on its next pass"
