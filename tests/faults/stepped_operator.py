"""`vigil operator` with its one wall clock stepped by the test: run as `python -m tests.faults.stepped_operator
<offset file> operator --config ...`.

The operator reads the time only through the clock its composition root makes
(`vigil.runtime.clocks.wall_clock`, a `vigil.kube.kits.clocks.SystemClock`, handed to every part); this launcher hands it
one that adds the seconds written in the offset file (read again whenever the file changes), so a
test steps one replica's clock ahead and back without touching the machine's. Everything else is
the real operator process.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from vigil.__main__ import main
from vigil.runtime import clocks

OFFSET_FILE = Path(sys.argv[1])


class SteppedClock:
    """The system clock plus the offset the test wrote (seconds; 0 when the file is empty or gone)."""

    def __init__(self) -> None:
        self._seen: tuple[float, float] = (-1.0, 0.0)  # (the file's mtime, its offset)

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset())

    def offset(self) -> float:
        try:
            mtime = OFFSET_FILE.stat().st_mtime
        except FileNotFoundError:
            return 0.0
        if mtime != self._seen[0]:
            text = OFFSET_FILE.read_text().strip()
            self._seen = (mtime, float(text) if text else 0.0)
        return self._seen[1]


STEPPED = SteppedClock()
clocks.wall_clock = lambda: STEPPED  # the root's clock, replaced for this process only

if __name__ == "__main__":
    sys.exit(main(sys.argv[2:]))
