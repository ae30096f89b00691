"""How big each real-fault scenario is: short in the suite, long under `make faults`.

The suite (`make test`) runs every scenario short, seconds each, with scaled-down counts;
`make faults` sets VIGIL_FAULTS_LONG=1 and runs them at the sizes the issue names (1,000
occurrences due in the minute of the API server's restart, and so on). One place says both.
"""

from __future__ import annotations

import dataclasses
import os

LONG = os.environ.get("VIGIL_FAULTS_LONG") == "1"


@dataclasses.dataclass(frozen=True)
class Sizes:
    queue_jobs: int  # recurring queue jobs, every minute, fired by the trigger through the faults
    queue_minutes: int  # simulated minutes each of them runs
    held_tasks: int  # tasks holding their leases while every connection is cut, or a worker frozen
    terminations: int  # rounds of pg_terminate_backend of every connection of the store
    burst: int  # one-off ScheduledJobs due in the burst around an API server or etcd fault
    history_jobs: int  # jobs firing while the history database's disk is full

    def __str__(self) -> str:
        return ("long" if LONG else "short") + " sizes: " + ", ".join(
            f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
        )


SIZES = (
    Sizes(queue_jobs=200, queue_minutes=12, held_tasks=20, terminations=5, burst=1000, history_jobs=200)
    if LONG
    else Sizes(queue_jobs=20, queue_minutes=6, held_tasks=4, terminations=2, burst=40, history_jobs=12)
)
