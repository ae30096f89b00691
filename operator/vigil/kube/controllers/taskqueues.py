"""TaskQueues: publish each declaration to the queue store, and write back whether it keeps up.

The leader alone runs this, and only when the volume tier is on (`queue.dsn`). A TaskQueue NAME
in namespace NS is the store's queue "NS/NAME". One pass, every `queue.statusIntervalSeconds`
(and soon after a TaskQueue changes), reads the TaskQueues from a watch-fed cache and:

- parses each spec; what admission could not check and the model refuses makes the queue
  `Invalid` (condition and Event naming the field), and its last good declaration stays;
- publishes each valid declaration that differs from what this leader published last (the
  first pass publishes all), and removes the rows of TaskQueues that are gone, so workers —
  which read the store, never the API server — see changes within their refresh;
- counts every queue in one statement (ready, leased, dead, the oldest due ready age, the last
  minute's rates) and deletes dead executions past their queue's retention;
- keeps the store bounded (vigil.queue.bounds): deletes succeeded and cancelled executions past
  their queue's `finishedRetention` (else the chart's) and jobs deleted longer ago, writes each
  namespace's quota (the chart's, lowered by its TaskQueues' `quota`) and recounts what each
  namespace keeps unfinished, so room comes back as its executions finish;
- reads, in the same statement, the volume watchdog's latest summary of each queue's jobs (which
  the watchdog leaves in the store each pass, wherever it runs) into the `JobsOverdue` and
  `ChainBroken` conditions;
- gives each namespace with a TaskQueue its workers' database role and the Secret holding its DSN,
  and takes both from a namespace whose last TaskQueue is gone (vigil.kube.controllers.queuecredentials);
- writes each status through `TaskQueueStatusWriter`, which writes only what changed, and hands
  the counts to `publish` (the runtime's `metrics.record_queue_stats`: the per-queue gauges that
  workers are autoscaled on; this module does not import the metrics).

Status is refreshed per pass, never per execution: the store's volume never reaches the API server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from kubernetes import client
from pydantic import ValidationError

from vigil.core.conditions import ConditionReason, ConditionType, set_condition
from vigil.core.ports import Clock
from vigil.core.queue import (
    QueueDeclaration,
    QueueStats,
    QueueWatchSummary,
    QuotaLimits,
    namespace_quotas,
)
from vigil.core.queuewatch import watch_conditions
from vigil.kube.kits.events import WARNING, EventRecorder
from vigil.kube.kits.informer import Informer, Key, key_of
from vigil.kube.kits.loops import woken_every
from vigil.model import (
    TaskQueueSpec,
    TaskQueueStatus,
    describe_validation_error,
    format_duration,
    queue_key,
)
from vigil.model.names import GROUP, TASK_QUEUES, VERSION

if TYPE_CHECKING:
    from vigil.kube.controllers.queuecredentials import QueueCredentials

log = logging.getLogger(__name__)

STOP_CHECK_SECONDS = 0.5  # how often a pass waiting for the cache looks whether the leader is stopping

#: Receives one pass's counts, (namespace, TaskQueue name) -> the store's stats, every queue at once.
PublishStats = Callable[[Mapping[tuple[str, str], QueueStats]], None]

#: The conditions the volume watchdog's summary decides (`vigil.core.queuewatch.watch_conditions`).
WATCH_CONDITIONS = frozenset({ConditionType.JOBS_OVERDUE, ConditionType.CHAIN_BROKEN})


class QueueDeclarations(Protocol):
    """The queue store as this controller uses it (vigil.queue.store.QueueStore)."""

    def migrate_apart(self) -> None: ...
    def declare(self, queue: str, declaration: QueueDeclaration, *, generation: int, now: datetime) -> None: ...
    def declared(self) -> dict[str, int]: ...
    def undeclare(self, queues: Sequence[str]) -> None: ...
    def stats(self, queues: Sequence[str], *, now: datetime) -> dict[str, QueueStats]: ...
    def purge_dead(self, retention: dict[str, timedelta], *, now: datetime) -> int: ...
    def keep_bounded(
        self,
        *,
        limits: Mapping[str, QuotaLimits],
        default_limits: QuotaLimits,
        retention: Mapping[str, timedelta],
        default_retention: timedelta,
        now: datetime,
    ) -> object: ...


def taskqueue_cache(api: client.ApiClient) -> Informer:
    """The leader's cache of every TaskQueue (declarations: few, and all of them Vigil's)."""
    custom = client.CustomObjectsApi(api)

    def list_fn(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(GROUP, VERSION, TASK_QUEUES, **kwargs)

    return Informer(list_fn, what=TASK_QUEUES, label_selector="")


def queue_status(
    old: Mapping[str, Any],
    *,
    stats: QueueStats | None,
    objective: timedelta | None,
    invalid: str | None,
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """The TaskQueue's new status: the store's counts (the old ones when the store did not answer),
    Ready, Invalid, (with an objective) Behind, and the watchdog's JobsOverdue and ChainBroken,
    each condition merged by type."""
    if stats is None:
        counts = {k: old[k] for k in ("ready", "leased", "dead", "oldestReadyAge", "oldestReadySeconds") if k in old}
        counts |= {k: old[k] for k in ("succeededPerMinute", "deadPerMinute") if k in old}
    else:
        age = stats.oldest_ready_age
        whole = None if age is None else timedelta(seconds=int(age.total_seconds()))
        counts = {
            "ready": stats.ready,
            "leased": stats.leased,
            "dead": stats.dead,
            "oldestReadyAge": None if whole is None else format_duration(whole),
            "oldestReadySeconds": None if whole is None else int(whole.total_seconds()),
            "succeededPerMinute": stats.succeeded_last_minute,
            "deadPerMinute": stats.dead_last_minute,
        }
    conditions: list[dict[str, Any]] = list(old.get("conditions") or [])
    if invalid is not None:
        ready = (False, ConditionReason.INVALID_SPEC, invalid)
    elif stats is None:
        ready = (False, ConditionReason.STORE_UNAVAILABLE, "the queue store did not answer; counts are the last known")
    else:
        ready = (True, ConditionReason.PUBLISHED, "the declaration is in the queue store")
    conditions = set_condition(
        conditions, type_=ConditionType.READY, status=ready[0], reason=ready[1], message=ready[2],
        generation=generation, now=now,
    )  # fmt: skip
    conditions = set_condition(
        conditions, type_=ConditionType.INVALID, status=invalid is not None,
        reason=ConditionReason.INVALID_SPEC if invalid else ConditionReason.VALID, message=invalid or "",
        generation=generation, now=now,
    )  # fmt: skip
    if objective is None:
        conditions = [c for c in conditions if c.get("type") != ConditionType.BEHIND]
    elif stats is not None:
        age = stats.oldest_ready_age or timedelta(0)
        behind = age > objective
        shown = format_duration(timedelta(seconds=int(age.total_seconds())))
        conditions = set_condition(
            conditions, type_=ConditionType.BEHIND, status=behind,
            reason=ConditionReason.OLDEST_READY_TOO_OLD if behind else ConditionReason.WITHIN_OBJECTIVE,
            message=f"the oldest ready execution has waited {shown}; the objective is {format_duration(objective)}",
            generation=generation, now=now,
        )  # fmt: skip
    if stats is not None:
        conditions = _watch_conditions(conditions, stats.watch, generation=generation, now=now)
    status = {**counts, "observedGeneration": generation, "conditions": conditions}
    # Through the model: the status written is one the CRD accepts, in its canonical form.
    return TaskQueueStatus.model_validate(status).model_dump(mode="json", exclude_none=True)


def _watch_conditions(
    conditions: list[dict[str, Any]], watch: QueueWatchSummary | None, *, generation: int, now: datetime
) -> list[dict[str, Any]]:
    """`conditions` with JobsOverdue and ChainBroken as the volume watchdog's latest summary of the
    queue says; absent until it has one (the watchdog off, or not yet run; ChainBroken until an audit)."""
    judged = [] if watch is None else watch_conditions(watch)
    types = {c.type for c in judged}
    kept = [c for c in conditions if c.get("type") not in WATCH_CONDITIONS or c.get("type") in types]
    for found in judged:
        kept = set_condition(
            kept, type_=found.type, status=found.status, reason=found.reason, message=found.message,
            generation=generation, now=now,
        )  # fmt: skip
    return kept


class TaskQueueStatusWriter:
    """The one writer of TaskQueue status: compares the new status with the cached one and writes
    (a merge patch of the status subresource) only on a difference."""

    def __init__(self, api: client.ApiClient, *, cache: Informer) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._cache = cache
        self.writes = 0

    def write(self, obj: Mapping[str, Any], status: dict[str, Any]) -> bool:
        """Write `status` onto `obj` if it differs from what `obj` holds; whether it wrote."""
        old = dict(obj.get("status") or {})
        if old == status:
            return False
        patch = {"status": {**{key: None for key in old if key not in status}, **status}}
        namespace, name = key_of(dict(obj))
        try:
            answer = self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, TASK_QUEUES, name, patch
            )
        except client.ApiException as error:
            if error.status == 404:  # deleted meanwhile
                return False
            raise
        self._cache.observe(answer)
        self.writes += 1
        return True


class TaskQueueController:
    """The leader's TaskQueue pass (see the module docstring)."""

    def __init__(
        self,
        *,
        cache: Informer,
        store: QueueDeclarations,
        writer: TaskQueueStatusWriter,
        events: EventRecorder,
        clock: Clock,
        interval_seconds: float,
        publish: PublishStats | None = None,
        quota: QuotaLimits | None = None,
        granted: Mapping[str, QuotaLimits] | None = None,
        finished_retention: timedelta = timedelta(days=7),
        credentials: QueueCredentials | None = None,
    ) -> None:
        """`publish`: called after each pass that the store answered (a pass that it did not
        leaves the last counts published). `quota`, `granted` and `finished_retention`: the chart's
        (`queue.quota`, `queue.quota.namespaces`, `queue.finishedRetentionDays`). `credentials`: the
        namespaces' database roles and DSN Secrets (`queue.tenantRoles`; None: none are made)."""
        self.credentials = credentials
        self.quota = quota or QuotaLimits()  # None: no limits (a controller without the chart's)
        self.granted = dict(granted or {})
        self.finished_retention = finished_retention
        self.cache = cache
        self.publish = publish
        self.store = store
        self.writer = writer
        self.events = events
        self.clock = clock
        self.interval_seconds = interval_seconds
        self._published: dict[str, QueueDeclaration] = {}  # what this leader published last
        self._reported: dict[Key, int] = {}  # the generation whose Invalid Event was posted
        self._migrated = False
        self._changed = threading.Event()
        cache.add_handler(self._on_change)

    def _on_change(self, key: Key, obj: dict[str, Any], deleted: bool) -> None:
        if deleted or _generation(obj) != (obj.get("status") or {}).get("observedGeneration"):
            self._changed.set()  # a new or changed spec, or a deletion: publish soon

    def run(self, stop: threading.Event) -> None:
        """Pass every interval, or soon after a TaskQueue changes (`vigil.kube.kits.loops.woken_every`),
        until `stop`; none before the cache has listed (an empty cache would remove every
        declaration).

        A pass, not a controller's reconcile per TaskQueue: the store is synced with every
        declaration at once (a queue missing from the cache is removed from the store) and
        counted in one statement for all of them."""
        while not self.cache.synced.wait(STOP_CHECK_SECONDS):
            if stop.is_set():
                return
        woken_every(stop, self.interval_seconds, "TaskQueue pass", self.run_pass, wake=self._changed)

    def run_pass(self) -> None:
        now = self.clock.now()
        queues: dict[str, tuple[dict[str, Any], QueueDeclaration | None, str | None]] = {}
        names: dict[str, tuple[str, str]] = {}
        for obj in self.cache.iter_items():
            namespace, name = key_of(obj)
            names[queue_key(namespace, name)] = (namespace, name)
            try:
                declaration, invalid = TaskQueueSpec.model_validate(obj.get("spec") or {}).declaration(), None
            except ValidationError as error:
                declaration, invalid = None, "; ".join(describe_validation_error(error))
                self._report_invalid(obj, invalid)
            queues[queue_key(namespace, name)] = (obj, declaration, invalid)
        stats: dict[str, QueueStats] | None
        try:
            stats = self._sync_store(queues, now=now)
        except Exception as error:  # the store is down: say so in status, try again next pass
            log.warning("queue store unavailable for TaskQueues: %s", error)
            stats = None
        for key, (obj, declaration, invalid) in queues.items():
            status = queue_status(
                obj.get("status") or {},
                stats=None if stats is None else stats.get(key),
                objective=declaration.objective if declaration else None,
                invalid=invalid,
                generation=_generation(obj),
                now=now,
            )
            self.writer.write(obj, status)
        if stats is not None and self.publish is not None:
            self.publish({names[key]: counted for key, counted in stats.items() if key in names})
        if stats is not None and self.credentials is not None:
            try:
                self.credentials.sync({namespace for namespace, _ in names.values()})
            except Exception as error:  # the store or the API server: the next pass tries again
                log.warning("queue credentials not provisioned this pass: %s", error)

    def _sync_store(
        self, queues: Mapping[str, tuple[dict[str, Any], QueueDeclaration | None, str | None]], *, now: datetime
    ) -> dict[str, QueueStats]:
        if not self._migrated:
            self.store.migrate_apart()  # in a child process: the operator never holds alembic
            self._migrated = True
        for key, (obj, declaration, _) in queues.items():
            if declaration is not None and self._published.get(key) != declaration:
                self.store.declare(key, declaration, generation=_generation(obj), now=now)
                self._published[key] = declaration
        gone = [key for key in self.store.declared() if key not in queues]
        self.store.undeclare(gone)
        for key in gone:
            self._published.pop(key, None)
        retention = {
            key: declaration.dead_retention
            for key, (_, declaration, _) in queues.items()
            if declaration is not None and declaration.dead_retention is not None
        }
        self.store.purge_dead(retention, now=now)
        declared = {key: declaration for key, (_, declaration, _) in queues.items() if declaration is not None}
        self.store.keep_bounded(
            limits=namespace_quotas(declared, default=self.quota, granted=self.granted),
            default_limits=self.quota,
            retention={key: d.finished_retention for key, d in declared.items() if d.finished_retention is not None},
            default_retention=self.finished_retention,
            now=now,
        )
        return self.store.stats(list(queues), now=now)

    def _report_invalid(self, obj: Mapping[str, Any], message: str) -> None:
        key, generation = key_of(dict(obj)), _generation(obj)
        if self._reported.get(key) != generation:
            self._reported[key] = generation
            self.events.emit(obj, type_=WARNING, reason=ConditionReason.INVALID_SPEC, message=message)


def _generation(obj: Mapping[str, Any]) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)
