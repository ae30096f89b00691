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
"""

from vigil.worker.running import Worker, WorkerCounts
from vigil.worker.settings import WorkerSettings
from vigil.worker.tasks import REGISTRY, Context, TaskRegistry, task

__all__ = ["REGISTRY", "Context", "TaskRegistry", "Worker", "WorkerCounts", "WorkerSettings", "task"]
