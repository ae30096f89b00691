"""Fifty SIGKILLs of the operator during multi-step workflows: every workflow completes, no step runs twice.

The long variant of the ten-round diamond test in tests/integration/test_workflows.py. A leader
and two standbys (a killed leader is replaced at once), and three eight-step workflows in
flight at all times (fan out to three, join, fan out to two, finish; each step a pod that takes
a moment), new ones created as others finish. The leader is SIGKILLed
VIGIL_STRESS_WORKFLOW_KILLS times (50): each time once it has created a random number (0 to 3)
of step pods since it took over, then at a random moment within the next second — while it
resumes, between a step's record and its pod, between pods. Afterwards every workflow
Succeeded with exactly one pod per step (counted by uid from a watch, so a pod deleted and
created again counts twice) and exactly one StepStarted per step in its history.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import parse_time
from tests.integration.operators import OperatorFleet
from tests.integration.workflows import (
    FINISHED,
    GROUP,
    VERSION,
    WORKFLOWS,
    create_workflow,
    emit,
    events_of,
    get_workflow,
    pod_step,
    step_pods,
)
from tests.stress.failover import (
    Takeover,
    kill_the_leader,
    report_kills,
    start_with_standbys,
    wait_standbys,
)
from tests.stress.figures import Figures, spread
from tests.stress.recorders import Sightings
from tests.stress.sizes import SIZES
from tests.waiting import wait_for

IN_FLIGHT = 3
STEPS = ("prepare", "extract-a", "extract-b", "extract-c", "merge", "publish", "notify", "finish")
PODS_BEFORE_KILL = (0, 3)  # step pods the leader creates after taking over, before it may be killed
KILL_WITHIN = 1.0  # seconds: the random moment after that
PROGRESS_TIMEOUT = 120.0
FINISH_TIMEOUT = 300.0
WORKFLOW_PODS = "app.kubernetes.io/managed-by=vigil-workflows"


def pipeline() -> list[dict[str, Any]]:
    """prepare -> (extract-a, -b, -c) -> merge -> (publish, notify) -> finish."""
    work = emit({"ok": True}, then="sleep 0.3")
    return [
        pod_step("prepare", command=work),
        pod_step("extract-a", "prepare", command=work),
        pod_step("extract-b", "prepare", command=work),
        pod_step("extract-c", "prepare", command=work),
        pod_step("merge", "extract-a", "extract-b", "extract-c", command=work),
        pod_step("publish", "merge", command=work),
        pod_step("notify", "merge", command=work),
        pod_step("finish", "publish", "notify", command=work),
    ]


def workflow_facts(obj: dict[str, Any]) -> dict[str, str]:
    status = obj.get("status") or {}
    return {
        "phase": status.get("phase") or "",
        "startedAt": status.get("startedAt") or "",
        "finishedAt": status.get("finishedAt") or "",
    }


def step_pod_facts(obj: dict[str, Any]) -> dict[str, str]:
    labels = obj["metadata"].get("labels") or {}
    return {
        "workflow": labels.get("vigil.dev/workflow", ""),
        "step": labels.get("vigil.dev/step", ""),
        "compensation": labels.get("vigil.dev/compensation", ""),
    }


@pytest.mark.stress
@pytest.mark.timeout(900 + 60 * SIZES.workflow_kills)  # pyproject's 600 s is per ordinary test
def test_operator_sigkills_during_workflows_never_start_a_step_twice(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, figures: Figures, watches: ExitStack
) -> None:
    rng = random.Random(SIZES.seed)
    leader = start_with_standbys(fleet)

    def list_workflows(**kwargs: Any) -> Any:
        return cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, **kwargs)

    def list_pods(**kwargs: Any) -> Any:
        return cluster.core.list_namespaced_pod(namespace, **kwargs)

    workflows = watches.enter_context(Sightings(list_workflows, workflow_facts))
    pods = watches.enter_context(Sightings(list_pods, step_pod_facts, label_selector=WORKFLOW_PODS))
    created: list[str] = []

    def top_up() -> None:
        running = sum(w.facts["phase"] not in FINISHED for w in workflows.all())
        for _ in range(IN_FLIGHT - running - (len(created) - workflows.count())):
            created.append(f"wf-{len(created):04}")
            create_workflow(cluster, namespace, created[-1], steps=pipeline())

    def progressed(since: int, pods_wanted: int) -> bool:
        """The leader created `pods_wanted` step pods and one workflow is Running (kept IN_FLIGHT meanwhile)."""
        top_up()
        running = any(w.facts["phase"] == "Running" for w in workflows.all())
        return running and pods.count() >= since + pods_wanted

    takeovers: list[Takeover] = []
    mid_workflow = 0
    try:
        for kill in range(SIZES.workflow_kills):
            wait_standbys(fleet, 1)
            before, target = pods.count(), rng.randint(*PODS_BEFORE_KILL)
            with explained(cluster, namespace, created):
                wait_for(lambda b=before, t=target: progressed(b, t), timeout=PROGRESS_TIMEOUT,
                         what=f"{target} step pods from the leader (kill {kill})")  # fmt: skip
            time.sleep(rng.uniform(0, KILL_WITHIN))  # the scenario: a random moment of its work
            mid_workflow += any(w.facts["phase"] == "Running" for w in workflows.all())
            takeovers.append(kill_the_leader(fleet, leader))
            leader = takeovers[-1].leader
    finally:
        figures.add("scenario", f"{IN_FLIGHT} {len(STEPS)}-step workflows in flight, 1 leader + 2 standbys, "
                                f"seed {SIZES.seed}")  # fmt: skip
        report_kills(figures, takeovers, f"{mid_workflow} with a workflow Running")

    def all_finished() -> bool:
        seen = workflows.all()
        return len(seen) == len(created) and all(w.facts["phase"] in FINISHED for w in seen)

    with explained(cluster, namespace, created):
        wait_for(all_finished, timeout=FINISH_TIMEOUT, interval=1.0, what=f"all {len(created)} workflows to finish")
    workflows.stop()
    pods.stop()
    report_workflows(cluster, namespace, figures, workflows, pods, created)
    assert mid_workflow >= len(takeovers) * 0.9, f"only {mid_workflow} of {len(takeovers)} kills found a workflow Running"


@contextlib.contextmanager
def explained(cluster: KubeCluster, namespace: str, names: list[str]) -> Iterator[None]:
    """A timed-out wait's message with where every unfinished workflow stands."""
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{error}\n" + "\n".join(where(cluster, namespace, names))) from None


def where(cluster: KubeCluster, namespace: str, names: list[str]) -> list[str]:
    out = []
    for name in names:
        status = get_workflow(cluster, namespace, name).get("status") or {}
        if status.get("phase") in FINISHED:
            continue
        steps = {step: (state or {}).get("phase") for step, state in (status.get("steps") or {}).items()}
        tail = [f"{e.get('at')} {e.get('event')} {e.get('step', '')}" for e in (status.get("history") or [])[-4:]]
        pods = {p.metadata.name: p.status.phase for p in step_pods(cluster, namespace, name)}
        out.append(f"{name}: {status.get('phase')} {status.get('progress')} steps {steps}; pods {pods}; "
                   f"history {len(status.get('history') or [])}, last {tail}")  # fmt: skip
    return out


def report_workflows(cluster: KubeCluster, namespace: str, figures: Figures, workflows: Sightings, pods: Sightings,
                     created: list[str]) -> None:  # fmt: skip
    """Check every workflow: Succeeded, one pod and one StepStarted per step; add the figures."""
    phases = Counter(w.facts["phase"] for w in workflows.all())
    durations = [
        (parse_time(w.facts["finishedAt"]) - parse_time(w.facts["startedAt"])).total_seconds()
        for w in workflows.all()
        if w.facts["startedAt"] and w.facts["finishedAt"]
    ]
    per_step = Counter((p.facts["workflow"], p.facts["step"]) for p in pods.all() if p.facts["compensation"] == "false")
    doubled_pods = sorted(f"{wf}/{step} x{n}" for (wf, step), n in per_step.items() if n > 1)
    podless = sorted(f"{wf}/{step}" for wf in created for step in STEPS if not per_step.get((wf, step)))
    doubled_starts = []
    for name in created:
        started = Counter(e["step"] for e in events_of(get_workflow(cluster, namespace, name), "StepStarted"))
        doubled_starts += [f"{name}/{step} x{n}" for step, n in started.items() if n > 1]
    figures.add("workflows", f"{len(created)} created; " + ", ".join(f"{k} {v}" for k, v in sorted(phases.items())))
    figures.add("workflow duration", spread(durations))
    figures.add("step pods", f"{sum(per_step.values())} for {len(created) * len(STEPS)} steps")
    figures.add("steps run twice", f"pods {len(doubled_pods)}, StepStarted {len(doubled_starts)}; "
                                   f"steps without a pod {len(podless)}")  # fmt: skip
    figures.add("watch re-lists / errors", f"{workflows.relists + pods.relists} / {len(workflows.errors + pods.errors)}")
    assert phases == {"Succeeded": len(created)}, dict(phases)
    assert not doubled_pods, doubled_pods
    assert not doubled_starts, doubled_starts
    assert not podless, podless
