"""Storing the tail of an attempt's log when its pod ends, before retention may delete the pod.

Retention deletes finished pods, and with them their logs: the log of last night's failure
is gone once another run has failed since. This keeps the end of each wanted attempt's
log (its job's `spec.logs`: all, failed — the default — or none) in the history database,
beside the attempt's row, so `kubectl vigil logs` can show it once the pod is gone.

Off the firing path, and bounded:

* The pods cache's handler (`pod_changed`) only notes an ended pod and queues it; the
  one read of its log (the main container's, streamed into a `TailBuffer`, so a huge log
  costs the tail's size in memory) and the database write happen on a few workers of
  their own. The queue holds at most `backlog` pods (a few hundred bytes each until read);
  a pod that finds it full is not captured (a warning says so), never waited for.
* Retention asks `settled` before it deletes an Execution: not while one of its pods'
  tails is pending, but only for `settle_within` after the pod was seen ended (a hung
  log read, a database down for long) — then retention goes ahead and the tail is lost,
  with a warning. Until the pods cache has announced its first list, nothing is settled
  (a new leader has not yet seen which pods' tails it owes).
* A database that is down keeps the tail read in memory and the write is tried again
  every `retry_after` until the bound; the log is never read twice. At most `max_held`
  tails are held so (64 of 64 KiB by default); past that no more logs are read until the
  database is back (the pods stay, within the bound). A new leader asks the database
  first and reads only the logs of pods whose tail is not stored yet.

Nothing here writes to the API server; the log read is the only request per attempt.
When a tail settles, `on_settled` lets retention look at the job again (the history
flusher only calls it after writing an execution).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from vigil.core.logtail import (
    DEFAULT_LOG_POLICY,
    DEFAULT_TAIL_BYTES,
    LogPolicy,
    LogTail,
    TailBuffer,
    wanted,
)
from vigil.core.ports import Clock, HistoryUnavailable, LogTailSink
from vigil.core.timeparse import parse_rfc3339
from vigil.kube.controllers.workflowpods import workflow_of
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.stores.executions import readable
from vigil.kube.stores.pods import LABEL_ATTEMPT, LABEL_EXECUTION, ended
from vigil.model.names import LABEL_WORKFLOW_UID

log = logging.getLogger(__name__)

Key = tuple[str, str]
#: How many lines the log read asks the kubelet for: a bound on what it sends (the tail is
#: then cut to bytes here); four bytes a line on average still fills the default tail.
LINES_PER_TAIL_BYTE = 0.25
CHUNK_BYTES = 32 * 1024


class PodLogReader(Protocol):
    def read(self, namespace: str, pod: str, container: str, *, into: TailBuffer, deadline: datetime) -> None:
        """Stream the container's log into `into` until its end or `deadline`; raise on failure."""
        ...


class KubePodLogs:
    """The log read through the API server (the kubelet serves it), streamed, never held whole."""

    def __init__(self, core: CoreApi, *, clock: Clock, read_timeout_seconds: float = 30.0) -> None:
        self._core = core
        self._clock = clock
        self._read_timeout = read_timeout_seconds

    def read(self, namespace: str, pod: str, container: str, *, into: TailBuffer, deadline: datetime) -> None:
        options: dict[str, Any] = {"tail_lines": max(1, int(into.limit * LINES_PER_TAIL_BYTE))}
        if container:
            options["container"] = container
        response = self._core.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", options=options, preload=False,
            timeout=(5.0, self._read_timeout),
        )  # fmt: skip
        try:
            for chunk in response.stream(CHUNK_BYTES):
                into.feed(chunk)
                if self._clock.now() >= deadline:
                    raise TimeoutError(f"the log of {namespace}/{pod} took too long to read")
        finally:
            response.close()  # never back to the pool with bytes unread (CoreApi.request)


@dataclasses.dataclass
class _Pending:
    namespace: str
    pod: str
    container: str
    execution_id: str
    attempt: int
    job: str
    job_uid: str
    scheduled_for: datetime
    seen_at: datetime
    tail: LogTail | None = None  # read, not yet written (the database was down)


@dataclasses.dataclass(frozen=True)
class Owner:
    """Whose attempt an ended pod ran, as the stored tail names it, and whether its tail is wanted."""

    execution_id: str
    job: str  # the ScheduledJob's name, or the Workflow's for a step's pod
    job_uid: str
    scheduled_for: datetime  # the row's time for retention: the occurrence, or the step pod's creation
    policy: LogPolicy


#: The owner of an ended pod (namespace, pod), or None when nothing is to be captured.
OwnerOf = Callable[[str, Mapping[str, Any]], Owner | None]
#: The job's `spec.logs`, or None when the job is gone or invalid (nothing is captured).
PolicyOf = Callable[[str, str], LogPolicy | None]
#: Called with (namespace, job name, job uid) once a pod's tail is settled.
Settled = Callable[[str, str, str], object]


def execution_owner(executions: Callable[[str, str], dict[str, Any] | None], policy_of: PolicyOf) -> OwnerOf:
    """A job's pod: its Execution (from the cache) and the job's `spec.logs`."""

    def owner(namespace: str, pod: Mapping[str, Any]) -> Owner | None:
        execution_id = (pod["metadata"].get("labels") or {}).get(LABEL_EXECUTION)
        obj = executions(namespace, execution_id) if execution_id else None
        found = readable([obj]) if obj is not None else []
        if not found:
            return None
        obj, ex = found[0]
        policy = policy_of(namespace, ex.job)
        if policy is None:
            return None
        return Owner(ex.execution_id, ex.job, obj["spec"]["job"]["uid"], ex.scheduled_for, policy)

    return owner


def step_owner(namespace: str, pod: Mapping[str, Any]) -> Owner | None:
    """A workflow step's pod: the step's execution id and the workflow, from the pod itself.
    Workflows have no `spec.logs`: failed attempts' tails are kept (the default)."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    workflow = workflow_of(pod)
    execution_id, uid = labels.get(LABEL_EXECUTION), labels.get(LABEL_WORKFLOW_UID)
    if workflow is None or not execution_id or not uid or not meta.get("creationTimestamp"):
        return None
    return Owner(execution_id, workflow[1], uid, parse_rfc3339(meta["creationTimestamp"]), DEFAULT_LOG_POLICY)


class LogCapture:
    def __init__(
        self,
        *,
        reader: PodLogReader,
        sink: LogTailSink,
        owner_of: OwnerOf,
        clock: Clock,
        tail_bytes: int = DEFAULT_TAIL_BYTES,
        workers: int = 2,
        backlog: int = 2048,
        max_held: int = 64,
        settle_within: timedelta = timedelta(minutes=5),
        read_within: timedelta = timedelta(seconds=60),
        retry_after: timedelta = timedelta(seconds=10),
        synced: Callable[[], bool] = lambda: True,
        on_settled: Settled | None = None,
        on_lost: Callable[[], object] = lambda: None,
    ) -> None:
        self._reader = reader
        self._sink = sink
        self._owner_of = owner_of
        self._clock = clock
        self._tail_bytes = tail_bytes
        self._workers = workers
        self._backlog = backlog
        self._max_held = max_held
        self._settle_within = settle_within
        self._read_within = read_within
        self._retry_after = retry_after
        self._synced = synced
        self._on_settled = on_settled
        self._on_lost = on_lost
        self._cond = threading.Condition()
        self._due: list[tuple[datetime, int, Key]] = []  # (not before, tie-break, pod key), a heap
        self._order = itertools.count()
        self._pending: dict[Key, _Pending] = {}  # by (namespace, pod)
        self._done: set[Key] = set()  # pods settled by this process (forgotten when the pod goes)
        self.dropped = 0  # pods not captured: the backlog was full, or the bound ran out

    # -- what queues a pod ------------------------------------------------------------------------

    def pod_changed(self, key: Key, pod: Mapping[str, Any], deleted: bool) -> None:
        """The pods cache's handler: an ended pod whose job wants its tail is queued (never waited on)."""
        if deleted:
            with self._cond:
                self._done.discard(key)
                self._pending.pop(key, None)  # nothing left to read
            return
        if not ended(pod):
            return
        with self._cond:
            if key in self._done or key in self._pending:
                return
        item = self._item(key, pod)
        if item is None:
            with self._cond:
                self._done.add(key)
            return
        with self._cond:
            if len(self._pending) >= self._backlog:
                self.dropped += 1
                self._done.add(key)
            else:
                self._pending[key] = item
                heapq.heappush(self._due, (item.seen_at, next(self._order), key))
                self._cond.notify()
                return
        log.warning("log capture backlog full (%d): the log of %s/%s is not stored", self._backlog, *key)
        self._on_lost()

    def _item(self, key: Key, pod: Mapping[str, Any]) -> _Pending | None:
        """What capturing this pod's tail needs, or None when its owner does not want it."""
        attempt = (pod["metadata"].get("labels") or {}).get(LABEL_ATTEMPT)
        owner = self._owner_of(key[0], pod) if attempt and attempt.isdigit() else None
        failed = (pod.get("status") or {}).get("phase") == "Failed"
        if attempt is None or owner is None or not wanted(owner.policy, failed=failed):
            return None
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        return _Pending(
            namespace=key[0], pod=key[1], container=str(containers[0].get("name") or ""),
            execution_id=owner.execution_id, attempt=int(attempt), job=owner.job, job_uid=owner.job_uid,
            scheduled_for=owner.scheduled_for, seen_at=self._clock.now(),
        )  # fmt: skip

    # -- what retention asks ----------------------------------------------------------------------

    def settled(self, obj: Mapping[str, Any]) -> bool:
        """May retention delete this Execution (and its pods)? Not while a pod's tail is pending
        and the bound since it was seen ended has not run out."""
        if not self._synced():
            return False
        meta = obj["metadata"]
        now = self._clock.now()
        with self._cond:
            waiting = [
                p for p in self._pending.values()
                if p.namespace == meta["namespace"] and p.execution_id == meta["name"]
            ]  # fmt: skip
        return all(now - p.seen_at >= self._settle_within for p in waiting)

    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    # -- the work ---------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Run the workers until `stop` (each takes the earliest due pod, reads, writes)."""
        threads = [
            threading.Thread(target=self._work, args=(stop,), name=f"log-capture-{n}", daemon=True)
            for n in range(self._workers)
        ]
        for thread in threads:
            thread.start()
        stop.wait()
        with self._cond:
            self._cond.notify_all()
        for thread in threads:
            thread.join(timeout=5)

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            key = self._take(stop)
            if key is not None:
                try:
                    self.capture(key)
                except Exception:  # one pod's failure must not end the worker
                    log.exception("capturing the log of %s/%s", *key)

    def _take(self, stop: threading.Event) -> Key | None:
        """The next due pod's key, waiting (at most a second at a time) for one."""
        with self._cond:
            while not stop.is_set():
                if self._due:
                    at, _, key = self._due[0]
                    wait = (at - self._clock.now()).total_seconds()
                    if wait <= 0:
                        heapq.heappop(self._due)
                        if key in self._pending:
                            return key
                        continue
                    self._cond.wait(min(wait, 1.0))
                else:
                    self._cond.wait(1.0)
        return None

    def capture(self, key: Key) -> None:
        """Read the pod's log (unless already read or stored) and store its tail; on a database
        outage keep the tail and try again later, until the bound."""
        with self._cond:
            item = self._pending.get(key)
        if item is None:
            return
        now = self._clock.now()
        if now - item.seen_at >= self._settle_within:
            self._give_up(key, item, "its tail could not be stored in time")
            return
        if item.tail is None:
            if self._stored(item):
                self._settle(key, item)  # stored by an earlier leader
                return
            if self._held() >= self._max_held:  # the database is down: read no more until it is back
                self._again(key, now)
                return
            item.tail = self._read(item, now=now)  # read now, while the pod is there
        try:
            self._sink.write_log_tail(item.tail)
        except HistoryUnavailable as err:
            log.warning("history database unavailable; the log tail of %s/%s waits: %s", *key, err)
            self._again(key, now)
            return
        self._settle(key, item)

    def _again(self, key: Key, now: datetime) -> None:
        """Look at the pod again after `retry_after` (while the bound lasts)."""
        with self._cond:
            if key in self._pending:
                heapq.heappush(self._due, (now + self._retry_after, next(self._order), key))

    def _held(self) -> int:
        """Tails read and waiting for the database: each up to the tail bound in memory."""
        with self._cond:
            return sum(1 for p in self._pending.values() if p.tail is not None)

    def _stored(self, item: _Pending) -> bool:
        """Did an earlier leader store this tail? Unknown while the database is down: then the
        log is read all the same, and the tail held until it can be written."""
        try:
            return self._sink.has_log_tail(item.execution_id, item.attempt)
        except HistoryUnavailable:
            return False

    def _read(self, item: _Pending, *, now: datetime) -> LogTail:
        buffer = TailBuffer(self._tail_bytes)
        note = ""
        try:
            self._reader.read(
                item.namespace, item.pod, item.container, into=buffer, deadline=now + self._read_within
            )
        except Exception as err:  # the log may be gone, the kubelet down, the read slow: say so
            note = f"the log could not be read: {_one_line(err)}"
        text, truncated = buffer.text()
        if note:
            log.warning("log of %s/%s: %s", item.namespace, item.pod, note)
        return LogTail(
            execution_id=item.execution_id, attempt=item.attempt, namespace=item.namespace, job=item.job,
            pod=item.pod, scheduled_for=item.scheduled_for, captured_at=self._clock.now(), text=text,
            truncated=truncated, log_bytes=buffer.seen, note=note,
        )  # fmt: skip

    def _settle(self, key: Key, item: _Pending) -> None:
        with self._cond:
            self._pending.pop(key, None)
            self._done.add(key)
        if self._on_settled is not None:
            try:
                self._on_settled(item.namespace, item.job, item.job_uid)
            except Exception:  # retention is housekeeping: the next history flush tries again
                log.exception("after storing the log tail of %s/%s", *key)

    def _give_up(self, key: Key, item: _Pending, why: str) -> None:
        log.warning("the log of %s/%s is not stored: %s", *key, why)
        with self._cond:
            self.dropped += 1
        self._on_lost()
        self._settle(key, item)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]


def policy_from(specs: Iterable[tuple[str, str, LogPolicy]]) -> PolicyOf:
    """A fixed policy lookup (tests, tools): (namespace, job, policy) triples; others get None."""
    table = {(ns, job): policy for ns, job, policy in specs}
    return lambda namespace, job: table.get((namespace, job))
