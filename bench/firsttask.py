"""The task a `vigil worker` runs in the start figure (bench/queuestart.py), and nothing more.

It prints the wall clock when it runs, so the bench can see when the worker's first lease came
back. It imports only the worker SDK, as a user's task module would, and the line's prefix
(bench.queuestart: standard library only at its top), so the figure is the worker's own start
and not the bench's.
"""

from __future__ import annotations

import time

from bench.queuestart import RAN
from vigil.worker import Context, task


@task("first")
async def first(ctx: Context) -> None:
    print(f"{RAN} {time.time():.6f}", flush=True)
