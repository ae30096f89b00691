"""The worker SDK of the volume tier: `@task` functions run from a PostgreSQL queue.

    from vigil.worker import Context, task

    @task("reconcile_daily")
    def reconcile(ctx: Context) -> None:
        if ctx.once("post-ledger"):       # one copy acts, even if two run at once
            post(ctx.payload["date"], dedupe=ctx.execution_id)

`vigil worker --queue Q --tasks myapp.tasks` imports `myapp.tasks` and runs its
tasks (vigil.worker.command); `Worker` is the loop itself (vigil.worker.running).
Installed with the extra `vigil[worker]`; it imports no
Kubernetes client (an import contract in pyproject.toml keeps it so).

The names below are loaded when first used (PEP 562): importing a submodule
(`vigil worker --help` imports `vigil.worker.command`) or declaring tasks loads
neither the queue store, the PostgreSQL driver nor the metrics until the loop
that needs them is asked for. A worker process pays for each once, at its start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vigil.worker.running import Worker, WorkerCounts
    from vigil.worker.settings import WorkerSettings
    from vigil.worker.tasks import REGISTRY, Context, TaskRegistry, task

__all__ = ["REGISTRY", "Context", "TaskRegistry", "Worker", "WorkerCounts", "WorkerSettings", "task"]

#: Where each exported name lives.
_HOMES = {
    "Worker": "vigil.worker.running",
    "WorkerCounts": "vigil.worker.running",
    "WorkerSettings": "vigil.worker.settings",
    "REGISTRY": "vigil.worker.tasks",
    "Context": "vigil.worker.tasks",
    "TaskRegistry": "vigil.worker.tasks",
    "task": "vigil.worker.tasks",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next look-up is an ordinary one
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
