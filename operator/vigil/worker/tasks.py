"""`@task("name")`: how a function becomes something a worker runs, and the context it is given.

A task is a plain function, sync or async, taking one argument: the `Context` of
the execution it runs. What it returns is its execution's output, when the store can
keep it (`vigil.worker.outputs`). Registering is a side effect of importing the module that
defines it (`vigil worker --tasks myapp.tasks` imports it), into the registry the
decorator is given (by default the process-wide `REGISTRY`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class Context:
    """One attempt of one execution, as its task sees it.

    `execution_id` is the same on every attempt of the execution (deduplicate on
    it); `attempt` counts from 1. `lease_lost` turns true once a heartbeat finds
    the lease taken by another worker (a second copy may be running now) or the
    execution cancelled through the HTTP API (its result will change nothing).
    `once(key)` (from a sync task) and `await once_async(key)` (from an async
    one) return True for exactly one copy of the execution, whichever asks first.
    """

    execution_id: str
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    payload: dict[str, Any]
    idempotency_key: str | None
    task: str
    queue: str
    worker: str
    lease_lost: bool = False
    claim: Callable[[str], Coroutine[Any, Any, bool]] | None = dataclasses.field(default=None, repr=False)
    loop: asyncio.AbstractEventLoop | None = dataclasses.field(default=None, repr=False)

    async def once_async(self, key: str) -> bool:
        """Claim `key` for this execution (async tasks): True for the first copy only."""
        if self.claim is None:
            raise RuntimeError("this context has no store to claim keys in")
        return await self.claim(key)

    def once(self, key: str) -> bool:
        """Claim `key` for this execution (sync tasks, which run in worker threads)."""
        if self.claim is None or self.loop is None:
            raise RuntimeError("this context has no store to claim keys in")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # a worker thread, as it should be
        else:
            raise RuntimeError("an async task must `await ctx.once_async(key)`")
        return asyncio.run_coroutine_threadsafe(self.claim(key), self.loop).result()


TaskFunction = Callable[[Context], Any]


class TaskRegistry:
    """Task names to functions; a name registered twice is a mistake, refused."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskFunction] = {}

    def register(self, name: str, function: TaskFunction) -> None:
        if not name:
            raise ValueError("a task needs a name")
        if name in self._tasks and self._tasks[name] is not function:
            raise ValueError(f"task {name!r} is registered already (by {self._tasks[name].__qualname__})")
        self._tasks[name] = function

    def get(self, name: str) -> TaskFunction | None:
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self._tasks)

    @staticmethod
    def is_async(function: TaskFunction) -> bool:
        return inspect.iscoroutinefunction(function)


REGISTRY = TaskRegistry()


def task(name: str, *, registry: TaskRegistry = REGISTRY) -> Callable[[F], F]:
    """Register the decorated function (sync or async, one `Context` argument) as task `name`."""

    def register(function: F) -> F:
        registry.register(name, function)
        return function

    return register
