"""Gathering what the watchdog needs to know about every ScheduledJob, from the API server.

One pass reads the whole catalogue once — the jobs, the in-flight and dead
executions, the schedule buckets that still hold future occurrences, and each
declared output's ConfigMap — and turns each job into the core's `JobFacts`.
This is deliberately not on the firing path: it runs every `watchdog.interval`
(default 30 s), whatever the trigger is doing, and reads the buckets themselves
rather than trusting the job's own `status.nextRun`, because the failure it
exists to catch is the one where the two disagree. It also reads what the
trigger last published about its progress (`vigil.kube.stores.progress`), by which a
late chain head is judged behind or broken.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.buckets import Outcome
from vigil.core.conditions import ConditionType
from vigil.core.executions import AttemptOutcome, Phase
from vigil.core.progress import TriggerProgress
from vigil.core.timeparse import parse_rfc3339
from vigil.core.watchdog import JobFacts
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.informer import Informer, list_pages, slim
from vigil.kube.stores.buckets import KubeBucketStore
from vigil.kube.stores.executions import ExecutionStore, execution_from_object
from vigil.kube.stores.progress import LeaseProgress
from vigil.model import GROUP, VERSION
from vigil.model.jobspec import InvalidJob, parse_spec
from vigil.model.names import SCHEDULED_JOBS

log = logging.getLogger(__name__)

#: How long a pass waits for the leader's job cache to hold its first full list before it lists.
CACHE_SYNC_WAIT_SECONDS = 120.0


def _time(value: str | None) -> datetime | None:
    return parse_rfc3339(value) if value else None


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def _delta(value: Any) -> timedelta | None:
    return timedelta(seconds=value.total_seconds()) if value is not None else None


class FactGatherer:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        buckets: KubeBucketStore,
        executions: ExecutionStore,
        progress: LeaseProgress | None = None,
        jobs: Informer | None = None,
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._jobs = jobs
        self._core = CoreApi(api)
        self._buckets = buckets
        self._executions = executions
        self._progress = progress

    def progress(self) -> TriggerProgress | None:
        """What the trigger last published about its progress (None: nothing to read)."""
        return self._progress.read() if self._progress is not None else None

    def jobs(self) -> Iterator[dict[str, Any]]:
        """Every ScheduledJob, one at a time: from the leader's cache (the first pass waits for it
        to hold them), else from a paged list, each object slimmed as the cache would hold it. A
        whole unpaged list of 10,000 jobs, managedFields and all, held through a pass, was the
        leader's high-water mark, and its resident memory stayed there."""
        if self._jobs is not None and self._jobs.synced.wait(CACHE_SYNC_WAIT_SECONDS):
            yield from self._jobs.iter_items()
            return

        def list_fn(**kwargs: Any) -> Any:
            return self._custom.list_cluster_custom_object(GROUP, VERSION, SCHEDULED_JOBS, **kwargs)

        for page, _ in list_pages(list_fn):
            yield from (slim(obj) for obj in page)

    def future_heads(self, now: datetime) -> dict[str, datetime]:
        """Job uid → the fire time of its earliest unhandled occurrence in the buckets (the chain head)."""
        heads: dict[str, datetime] = {}
        for bucket in self._buckets.pending_objects():  # the leader's cache, else one paged list
            fired = (bucket.get("status") or {}).get("fired") or {}
            for entry in (bucket.get("spec") or {}).get("occurrences") or []:
                if entry["key"] in fired:
                    continue
                fire_at = parse_rfc3339(entry["fireAt"])
                uid = entry["uid"]
                heads[uid] = min(heads.get(uid, fire_at), fire_at)
        return heads

    def facts(self, now: datetime, *, read_buckets: bool = True) -> Iterator[tuple[dict[str, Any], JobFacts]]:
        """Every valid job with what the watchdog needs, one job at a time.

        Without `read_buckets` the chain heads are not looked up (every job then
        reads as having none): the caller must ignore the schedule-integrity verdict.
        """
        heads = self.future_heads(now) if read_buckets else {}
        active: dict[str, list[Any]] = defaultdict(list)
        for obj in self._executions.in_phase(Phase.READY, Phase.RUNNING, Phase.BACKOFF):
            active[obj["spec"]["job"]["uid"]].append(execution_from_object(obj))
        dead: dict[str, list[tuple[str, datetime]]] = defaultdict(list)
        for obj in self._executions.in_phase(Phase.DEAD):
            ex = execution_from_object(obj)
            dead[obj["spec"]["job"]["uid"]].append((ex.execution_id, ex.finished_at or now))
        for job in self.jobs():
            try:
                facts = self._job_facts(job, now, heads, active, dead)
            except InvalidJob:
                continue  # the Invalid condition already says why; the watchdog has nothing to assert
            yield job, facts

    def _job_facts(
        self,
        job: Mapping[str, Any],
        now: datetime,
        heads: Mapping[str, datetime],
        active: Mapping[str, Iterable[Any]],
        dead: Mapping[str, list[tuple[str, datetime]]],
    ) -> JobFacts:
        spec = parse_spec(job)
        meta, status = job["metadata"], job.get("status") or {}
        uid = meta["uid"]
        created = parse_rfc3339(meta["creationTimestamp"])
        suspended_condition = _condition(status, ConditionType.SUSPENDED)
        suspended_since = None
        enabled_since = created
        if suspended_condition is not None and suspended_condition.get("lastTransitionTime"):
            changed = parse_rfc3339(suspended_condition["lastTransitionTime"])
            if suspended_condition.get("status") == "True":
                suspended_since = changed
            else:
                enabled_since = max(created, changed)
        ledger = status.get("occurrences") or []
        fired = [_time(e.get("at")) for e in ledger if e.get("outcome") == Outcome.FIRED]
        failures = [_time(r.get("finishedAt")) for r in status.get("recent") or [] if r.get("outcome") == AttemptOutcome.FAILED]
        in_flight = list(active.get(uid, ()))
        running = [ex.started_at for ex in in_flight if ex.phase is Phase.RUNNING and ex.started_at]
        waiting = [ex.ready_since for ex in in_flight if ex.phase in (Phase.READY, Phase.BACKOFF)]
        output_time, output_error = self._output(meta["namespace"], spec)
        refused = _condition(status, ConditionType.LAUNCH_FAILING)
        refused_since = None
        if refused is not None and refused.get("status") == "True":
            refused_since = _time(refused.get("lastTransitionTime")) or now
        return JobFacts(
            namespace=meta["namespace"],
            name=meta["name"],
            recurring=spec.run_at is None,
            enabled_since=enabled_since,
            suspended=spec.suspend,
            suspended_since=suspended_since if spec.suspend else None,
            suspend_reason=spec.suspend_reason,
            suspended_by=spec.suspended_by,
            expected_max_interval=_delta(spec.expected_max_interval),
            expected_duration=_delta(spec.expected_duration),
            last_success=_time(status.get("lastSuccessfulTime")),
            last_fired=max((f for f in fired if f), default=None),
            last_failure=max((f for f in failures if f), default=None),
            running_since=min(running, default=None),
            ready_since=min(waiting, default=None),
            next_occurrence=heads.get(uid),
            dead_letters=tuple(sorted(dead.get(uid, []), key=lambda d: d[1])),
            output_time=output_time,
            output_max_age=_delta(spec.freshness.max_age) if spec.freshness else None,
            output_error=output_error,
            launch_refused_since=refused_since,
            launch_refused_message=str((refused or {}).get("message") or ""),
            scheduled=int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0),
        )

    def _output(self, namespace: str, spec: Any) -> tuple[datetime | None, str | None]:
        """The job's declared output timestamp (freshness), read independently of the scheduler."""
        if spec.freshness is None:
            return None, None
        ref = spec.freshness.config_map
        try:
            cm = self._core.read_namespaced_config_map(ref.name, namespace)
        except ApiException as err:
            return None, f"ConfigMap {namespace}/{ref.name}: {err.reason}"
        value = (cm.get("data") or {}).get(ref.key)
        if not value:
            return None, f"ConfigMap {namespace}/{ref.name} has no key {ref.key}"
        try:
            return parse_rfc3339(value.strip()), None
        except ValueError as err:
            return None, f"ConfigMap {namespace}/{ref.name} key {ref.key}: {err}"
