"""How big the stress runs are: the sizes issue 14 asks for, overridable from the environment.

`make stress` runs them at these defaults (about 75 minutes on the 2-core machine, the soak being the
hour); a quick check of the harness itself sets smaller ones, e.g.
`VIGIL_STRESS_KILLS=5 VIGIL_STRESS_SOAK_SECONDS=60 VIGIL_STRESS_WORKFLOW_KILLS=3`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Sizes:
    #: Leader SIGKILLs while recurring jobs fire (VIGIL_STRESS_KILLS).
    leader_kills: int = 100
    #: Seconds the soak runs at its steady rate (VIGIL_STRESS_SOAK_SECONDS): an hour.
    soak_seconds: float = 3600.0
    #: Executions per second the soak's jobs add up to (VIGIL_STRESS_SOAK_RATE).
    soak_rate: int = 10
    #: The operator's resident memory may not exceed this many MiB at any sample of the soak
    #: (VIGIL_STRESS_SOAK_RSS_MIB): the design budgets 200 MiB for 10,000 ScheduledJobs, and the
    #: soak has a few dozen, so a process that reaches it holds on to what it has done.
    soak_rss_budget_mib: float = 200.0
    #: Operator SIGKILLs during multi-step workflows (VIGIL_STRESS_WORKFLOW_KILLS).
    workflow_kills: int = 50
    #: Seed of the random kill moments (VIGIL_STRESS_SEED), printed with the figures so a run
    #: can be repeated.
    seed: int = 20261201

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Sizes:
        return cls(
            leader_kills=int(environ.get("VIGIL_STRESS_KILLS", cls.leader_kills)),
            soak_seconds=float(environ.get("VIGIL_STRESS_SOAK_SECONDS", cls.soak_seconds)),
            soak_rate=int(environ.get("VIGIL_STRESS_SOAK_RATE", cls.soak_rate)),
            soak_rss_budget_mib=float(environ.get("VIGIL_STRESS_SOAK_RSS_MIB", cls.soak_rss_budget_mib)),
            workflow_kills=int(environ.get("VIGIL_STRESS_WORKFLOW_KILLS", cls.workflow_kills)),
            seed=int(environ.get("VIGIL_STRESS_SEED", cls.seed)),
        )


SIZES = Sizes.from_env(os.environ)
