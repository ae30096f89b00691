"""Exactly-once accounting for recurring jobs, from watches of their Executions and pods.

Within each job's window (its first fired occurrence to the end of the run) every point of the
`every` lattice must have exactly one Execution and that Execution exactly one pod; outside it,
nothing twice either. Counted by uid from `Sightings` watches, so an object deleted and created
again counts twice, and one deleted by retention still counts once. Fire lag is the time this process first saw the Execution (or the pod)
minus its nominal time: jitter is off, so the nominal time is the fire time.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import (
    GROUP,
    MANAGED_SELECTOR,
    PLURAL,
    VERSION,
    create_job,
    parse_time,
    patch_spec,
    rfc3339,
)
from tests.stress.figures import Figures, percentile, spread
from tests.stress.recorders import Sighting, Sightings
from tests.waiting import wait_for
from vigil.model.scheduledjob import Retention

FINAL = ("Succeeded", "Dead", "Cancelled")
DEFAULT_RETENTION = Retention().model_dump()
SHOWN = 10  # problems listed by name in a failure message


def execution_facts(obj: dict[str, Any]) -> dict[str, str]:
    return {
        "job": obj["spec"]["job"]["name"],
        "scheduledFor": obj["spec"]["scheduledFor"],
        "phase": (obj.get("status") or {}).get("phase") or "Ready",
    }


def pod_facts(obj: dict[str, Any]) -> dict[str, str]:
    labels = obj["metadata"].get("labels") or {}
    env = {e["name"]: e.get("value") or "" for e in obj["spec"]["containers"][0].get("env") or []}
    return {"job": labels.get("vigil.dev/job", ""), "scheduledFor": env.get("VIGIL_SCHEDULED_FOR", "")}


def watch_executions(cluster: KubeCluster, namespace: str) -> Sightings:
    def list_executions(**kwargs: Any) -> Any:
        return cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "executions", **kwargs)

    return Sightings(list_executions, execution_facts)


def watch_pods(cluster: KubeCluster, namespace: str) -> Sightings:
    def list_pods(**kwargs: Any) -> Any:
        return cluster.core.list_namespaced_pod(namespace, **kwargs)

    return Sightings(list_pods, pod_facts, label_selector=MANAGED_SELECTOR)


def create_recurring_job(cluster: KubeCluster, namespace: str, name: str, *, every: timedelta) -> None:
    """A job firing on the `every` lattice, jitter off, catching up on everything missed.

    It keeps the operator's default retention (tests/integration's jobs keep every Execution):
    finished Executions and their pods are deleted as they go, as in production, and the
    watches have counted them by then.
    """
    create_job(cluster, namespace, name, every=f"{int(every.total_seconds())}s", jitter="0s",
               catchUpPolicy="All", catchUpWindow="10m", retention=DEFAULT_RETENTION)  # fmt: skip


def lattice(first: datetime, last: datetime, step: timedelta) -> list[str]:
    out, at = [], first
    while at <= last:
        out.append(rfc3339(at))
        at += step
    return out


def by_occurrence(sightings: Iterable[Sighting]) -> dict[tuple[str, str], list[Sighting]]:
    out: dict[tuple[str, str], list[Sighting]] = defaultdict(list)
    for s in sightings:
        out[(s.facts["job"], s.facts["scheduledFor"])].append(s)
    return out


def first_fired(executions: Sightings, jobs: Iterable[str]) -> dict[str, str]:
    """Each job's earliest nominal time with an Execution (jobs without one are left out)."""
    first: dict[str, str] = {}
    for s in executions.all():
        job, stamp = s.facts["job"], s.facts["scheduledFor"]
        if job in jobs and (job not in first or stamp < first[job]):
            first[job] = stamp
    return first


def wait_fired_through(executions: Sightings, jobs: list[str], through: datetime, *, timeout: float) -> None:
    """Until every job has an Execution for a nominal time at or after `through`."""
    stamp = rfc3339(through)

    def behind() -> list[str]:
        newest: dict[str, str] = {}
        for s in executions.all():
            newest[s.facts["job"]] = max(newest.get(s.facts["job"], ""), s.facts["scheduledFor"])
        return [job for job in jobs if newest.get(job, "") < stamp]

    wait_for(lambda: not behind(), timeout=timeout, interval=1.0, what=f"every job to fire through {stamp}")


def suspend_jobs(cluster: KubeCluster, namespace: str, jobs: list[str]) -> None:
    for name in jobs:
        patch_spec(cluster, namespace, name, {"suspend": True, "suspendReason": "end of the stress run"})


def unsettled(executions: Sightings, pods: Sightings) -> list[str]:
    """Executions not yet final, and those without a pod seen."""
    seen = executions.all()
    with_pods = set(by_occurrence(pods.all()))
    pending = [f"{s.name}:{s.facts['phase']}" for s in seen if s.facts["phase"] not in FINAL]
    podless = [f"{s.name}:no pod" for s in seen if (s.facts["job"], s.facts["scheduledFor"]) not in with_pods]
    return pending + podless


def wait_settled(executions: Sightings, pods: Sightings, *, timeout: float) -> None:
    """Until every Execution is final and each has a pod seen."""
    left: list[str] = []

    def settled() -> bool:
        left[:] = unsettled(executions, pods)
        return not left

    try:
        wait_for(settled, timeout=timeout, interval=1.0, what="every execution to finish")
    except AssertionError as error:
        raise AssertionError(f"{error}; {len(left)} unsettled, e.g. {left[:SHOWN]}") from None


@dataclasses.dataclass
class Account:
    """Executions and pods of recurring jobs against the nominal occurrences of their windows."""

    expected: int = 0
    fired: int = 0
    missing: list[str] = dataclasses.field(default_factory=list)
    off_lattice: list[str] = dataclasses.field(default_factory=list)
    duplicate_executions: list[str] = dataclasses.field(default_factory=list)
    duplicate_pods: list[str] = dataclasses.field(default_factory=list)
    without_pod: list[str] = dataclasses.field(default_factory=list)
    phases: Counter[str] = dataclasses.field(default_factory=Counter)
    execution_lag: list[float] = dataclasses.field(default_factory=list)
    pod_lag: list[float] = dataclasses.field(default_factory=list)

    def problems(self) -> list[str]:
        named = {
            "occurrences in the window without an execution": self.missing,
            "executions off the schedule's lattice": self.off_lattice,
            "occurrences with more than one execution": self.duplicate_executions,
            "occurrences with more than one pod": self.duplicate_pods,
            "executions without a pod": self.without_pod,
        }
        out = [f"{len(items)} {what}: {items[:SHOWN]}" for what, items in named.items() if items]
        if set(self.phases) - {"Succeeded"}:
            out.append(f"executions not Succeeded: {dict(self.phases)}")
        return out

    def report(self, figures: Figures) -> None:
        figures.add("occurrences expected", f"{self.expected} (every lattice point of each job's window)")
        figures.add("occurrences fired", f"{self.fired}; missed {len(self.missing)}")
        figures.add(
            "duplicates",
            f"executions {len(self.duplicate_executions)}, pods {len(self.duplicate_pods)}; "
            f"executions without a pod {len(self.without_pod)}",
        )
        figures.add("execution phases", ", ".join(f"{k} {v}" for k, v in sorted(self.phases.items())))
        figures.add("fire lag (execution seen)", spread(self.execution_lag))
        figures.add("fire lag (pod seen)", spread(self.pod_lag))


def account(
    executions: Iterable[Sighting],
    pods: Iterable[Sighting],
    *,
    windows: Mapping[str, tuple[datetime, datetime]],
    step: timedelta,
) -> Account:
    """Check every job's window: one Execution and one pod per lattice point, nothing twice anywhere."""
    result = Account()
    fired, podded = by_occurrence(executions), by_occurrence(pods)
    for (job, stamp), found in sorted(fired.items()):
        result.phases.update(s.facts["phase"] for s in found)
        label = f"{job}@{stamp}"
        if len(found) > 1:
            result.duplicate_executions.append(label)
        if len(podded.get((job, stamp), [])) > 1:
            result.duplicate_pods.append(label)
        if not podded.get((job, stamp)):
            result.without_pod.append(label)
        first, _ = windows[job]
        if (parse_time(stamp) - first) % step:
            result.off_lattice.append(label)
    for job, (first, last) in sorted(windows.items()):
        for stamp in lattice(first, last, step):
            result.expected += 1
            found = fired.get((job, stamp), [])
            if not found:
                result.missing.append(f"{job}@{stamp}")
                continue
            result.fired += 1
            nominal = parse_time(stamp).timestamp()
            result.execution_lag += [s.first_seen - nominal for s in found[:1] if s.first_seen is not None]
            result.pod_lag += [s.first_seen - nominal for s in podded.get((job, stamp), [])[:1] if s.first_seen is not None]
    return result


def lag_trend(sightings: Iterable[Sighting], *, start: datetime, end: datetime, parts: int = 10) -> str:
    """The median lag (first seen - nominal) in each of `parts` equal slices of [start, end].

    Flat means the operator keeps up; rising means a backlog builds.
    """
    width = (end - start) / parts
    slices: list[list[float]] = [[] for _ in range(parts)]
    for occurrence, found in by_occurrence(sightings).items():
        nominal = parse_time(occurrence[1])
        first = min((s.first_seen for s in found if s.first_seen is not None), default=None)
        if first is not None and start <= nominal < end:
            slices[int((nominal - start) / width)].append(first - nominal.timestamp())
    return " ".join(f"{percentile(lags, 0.5):.1f}" if lags else "-" for lags in slices) + " s"


def recorded_missed(cluster: KubeCluster, namespace: str, jobs: Iterable[str]) -> list[str]:
    """Occurrences the operator itself recorded as Missed: ledger entries and Missed Events."""
    out = []
    for name in jobs:
        job = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        out += [f"{name}@{e['nominal']}" for e in (job.get("status") or {}).get("occurrences") or []
                if e.get("outcome") == "Missed"]  # fmt: skip
    events = cluster.core.list_namespaced_event(namespace, field_selector="reason=Missed").items
    out += [f"event {e.involved_object.name}: {e.message}" for e in events]
    return out
