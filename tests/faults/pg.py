"""A seeded fault layer around psycopg connections (sync and async), by statement kind.

Temporal wraps its persistence layer with per-method faults, "committed, then timed out"
among them; this is that layer for Vigil's queue store. A `PgFaults` plan decides, from its
seed, for each statement the code under test sends, whether to inject a fault and which:

* `DROPPED`: the connection dropped before the statement ran (the real connection is closed, the
  server rolls back the open transaction; the caller gets an OperationalError);
* `SERIALIZATION`: PostgreSQL's serialization failure (40001) for the statement (nothing of it ran;
  the caller's transaction is rolled back as it leaves its block);
* `REPLY_LOST`: the statement ran *and committed*, then the connection dropped before the reply:
  in autocommit at once; inside a transaction block, at the block's commit (the commit reaches
  the server, the caller hears OperationalError). The caller cannot tell this from `DROPPED`.

A statement's kind is its name in vigil/queue/sql/ when it is one of those (`trigger_apply`,
`settle_succeeded`, ...), else the first word of its SQL (`select`, `update`). `kinds` narrows the
plan to some; `budget` caps the faults injected so a scenario ends. The seed is printed when the
plan is made (pytest shows it on failure) and `injected` lists what was done, for replay.

`FaultyConnection` / `FaultyAsyncConnection` wrap a real connection and pass everything else
through; a test hands them to the code under test where it would take a connection (the trigger's
`connection()`, a `WorkerStore`'s `connection`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from enum import StrEnum
from typing import Any

import psycopg
import psycopg.errors
from psycopg.pq import TransactionStatus

from vigil.queue.functions import CALLS
from vigil.queue.queries import QUERIES


class PgFault(StrEnum):
    DROPPED = "dropped"
    SERIALIZATION = "serialization"
    REPLY_LOST = "reply_lost"


# a worker sends its statements as calls of their functions (vigil.queue.functions): the same kinds
_NAMES = {" ".join(text.split()): name for name, text in (*QUERIES.items(), *CALLS.items())}


def kind_of(query: Any) -> str:
    """A statement's kind: its sql/ name (or that of the worker function it calls), else its SQL's first word, lower case."""
    text = query if isinstance(query, str) else getattr(query, "as_string", lambda _c=None: str(query))(None)
    named = _NAMES.get(" ".join(str(text).split()))
    if named is not None:
        return named
    words = str(text).split()
    return words[0].lower() if words else ""


@dataclasses.dataclass
class PgFaults:
    """The plan: for each statement of a kind in `kinds` (all when None), a fault with probability
    `rate`, of one of `faults`, chosen by the seeded generator; at most `budget` in all."""

    seed: int
    rate: float = 0.2
    faults: tuple[PgFault, ...] = tuple(PgFault)
    kinds: Collection[str] | None = None
    budget: int = 10
    on_fault: Callable[[str, PgFault], None] | None = None  # e.g. a History's fault events
    injected: list[tuple[str, PgFault]] = dataclasses.field(default_factory=list)
    seen: list[str] = dataclasses.field(default_factory=list)  # every statement kind sent, in order

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        print(f"PgFaults seed={self.seed} rate={self.rate} faults={[str(f) for f in self.faults]} kinds={self.kinds}")

    def decide(self, kind: str) -> PgFault | None:
        self.seen.append(kind)
        if self.kinds is not None and kind not in self.kinds:
            return None
        if len(self.injected) >= self.budget or self._random.random() >= self.rate:
            return None
        fault = self._random.choice(self.faults)
        self.injected.append((kind, fault))
        if self.on_fault is not None:
            self.on_fault(kind, fault)
        return fault


def _dropped(kind: str, why: str) -> psycopg.OperationalError:
    return psycopg.OperationalError(f"injected fault: the connection dropped {why} ({kind})")


class _Faulty:
    """What the sync and async wrappers share: the plan, and a reply lost inside a block."""

    def __init__(self, plan: PgFaults) -> None:
        self.plan = plan
        self.depth = 0  # transaction blocks open through this wrapper
        self.reply_lost: str | None = None  # the kind whose reply is lost at the block's commit

    def before(self, query: Any, drop: Callable[[], None]) -> tuple[str, PgFault | None]:
        kind = kind_of(query)
        fault = self.plan.decide(kind)
        if fault is PgFault.DROPPED:
            drop()
            raise _dropped(kind, "before the statement ran")
        if fault is PgFault.SERIALIZATION:
            raise psycopg.errors.SerializationFailure(
                f"injected fault: could not serialize access due to concurrent update ({kind})"
            )
        return kind, fault


class FaultyConnection(_Faulty):
    """A psycopg.Connection whose statements pass through `plan` (see the module docstring)."""

    def __init__(self, real: psycopg.Connection[Any], plan: PgFaults) -> None:
        super().__init__(plan)
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    @property
    def closed(self) -> bool:
        return self.real.closed

    def _drop(self) -> None:
        self.real.close()

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        return self._run(self.real.cursor(), query, params, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> _Cursor:
        return _Cursor(self, self.real.cursor(*args, **kwargs))

    def _run(self, cursor: Any, query: Any, params: Any, **kwargs: Any) -> Any:
        kind, fault = self.before(query, self._drop)
        result = cursor.execute(query, params, **kwargs)
        if fault is PgFault.REPLY_LOST:
            if self.real.info.transaction_status is TransactionStatus.IDLE:  # autocommit: committed
                self._drop()
                raise _dropped(kind, "after the statement committed")
            self.reply_lost = kind
        return result

    @contextlib.contextmanager
    def transaction(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self.depth += 1
        try:
            with self.real.transaction(*args, **kwargs) as tx:
                yield tx
        except BaseException:
            if self.depth == 1:
                self.reply_lost = None
            raise
        finally:
            self.depth -= 1
        if self.depth == 0 and self.reply_lost is not None:  # committed: now lose the reply
            kind, self.reply_lost = self.reply_lost, None
            self._drop()
            raise _dropped(kind, "after the transaction committed")


class _Cursor:
    def __init__(self, owner: FaultyConnection, real: Any) -> None:
        self._owner = owner
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        self._owner._run(self._real, query, params, **kwargs)
        return self


class FaultyAsyncConnection(_Faulty):
    """A psycopg.AsyncConnection whose statements pass through `plan` (see the module docstring)."""

    def __init__(self, real: psycopg.AsyncConnection[Any], plan: PgFaults) -> None:
        super().__init__(plan)
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    @property
    def closed(self) -> bool:
        return self.real.closed

    def _drop(self) -> None:
        self.real.pgconn.finish()  # as a cut socket: no Terminate sent, nothing awaited

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        kind, fault = self.before(query, self._drop)
        cursor = await self.real.execute(query, params, **kwargs)
        if fault is PgFault.REPLY_LOST:
            if self.real.info.transaction_status is TransactionStatus.IDLE and self.depth == 0:
                self._drop()
                raise _dropped(kind, "after the statement committed")
            self.reply_lost = kind
        return cursor

    @contextlib.asynccontextmanager
    async def transaction(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        self.depth += 1
        try:
            async with self.real.transaction(*args, **kwargs) as tx:
                yield tx
        except BaseException:
            if self.depth == 1:
                self.reply_lost = None
            raise
        finally:
            self.depth -= 1
        if self.depth == 0 and self.reply_lost is not None:
            kind, self.reply_lost = self.reply_lost, None
            self._drop()
            raise _dropped(kind, "after the transaction committed")
