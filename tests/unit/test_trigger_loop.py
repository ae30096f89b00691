"""The leader's trigger loop: a pass starts when its minute's next occurrence comes due, not at
the next tick.

The trigger is a stand-in that only reports when its next occurrence is due (the trigger itself
is covered in test_trigger.py); the interval is a minute, so a loop that waited for it would
never reach the second pass before the deadline.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from vigil.core.trigger import TickReport
from vigil.kube.kits.loops import trigger_loop
from vigil.settings import Settings, Trigger

DEADLINE_SECONDS = 20.0


class DueSoon:
    """A trigger whose every pass has an occurrence due 50 ms after it."""

    def __init__(self, passes: int) -> None:
        self.passes = 0
        self._enough = passes
        self.done = threading.Event()

    def rescan(self) -> None:
        """Nothing behind the cursor."""

    def drain(self) -> None:
        """No markers in flight."""

    def tick(self) -> TickReport:
        self.passes += 1
        if self.passes >= self._enough:
            self.done.set()
        now = datetime.now(UTC)
        return TickReport(now=now, next_fire=now + timedelta(milliseconds=50))


def test_the_next_pass_starts_when_the_next_occurrence_is_due_not_at_the_next_tick() -> None:
    trigger = DueSoon(passes=3)
    settings = Settings(trigger=Trigger(tick_milliseconds=60_000))
    stop = threading.Event()
    loop = threading.Thread(target=trigger_loop, args=(trigger, settings, stop), daemon=True)
    loop.start()
    try:
        assert trigger.done.wait(DEADLINE_SECONDS), f"{trigger.passes} passes: the loop waited for the tick"
    finally:
        stop.set()
        loop.join(DEADLINE_SECONDS)
    assert not loop.is_alive()
