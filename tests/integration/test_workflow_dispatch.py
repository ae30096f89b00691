"""Workflow step pods go through the same dispatcher as executions: one set of caps.

Ten parallel steps of a workflow and a backlog of executions in another namespace, with
`maxRunning: 3`: at no moment do more than three Vigil pods of either kind live, and both make
progress — the workflow finishes and the executions all succeed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import (
    FAR_FUTURE,
    Follower,
    create_executions,
    create_job,
    delete_namespaces,
    make_namespace,
    now,
    rfc3339,
    wait_all_executions_finished,
)
from tests.integration.operators import OperatorFleet
from tests.integration.workflows import create_workflow, pod_step, wait_phase

CAPS = {"maxRunning": 3, "perNamespaceMax": 3, "reservedHigh": 0}
STEPS = 10
EXECUTIONS = 10


class LivePods(Follower):
    """Every Vigil pod (executions' and steps') in some namespaces; the peak of live ones."""

    def __init__(self, cluster: KubeCluster, namespaces: set[str]) -> None:
        self._namespaces = namespaces
        self._live: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()
        self.peak = 0
        self.kinds: set[str] = set()
        super().__init__(cluster.core.list_pod_for_all_namespaces, label_selector="app.kubernetes.io/managed-by")

    def on_event(self, kind: str, obj: Any) -> None:
        meta = obj.metadata
        if meta.namespace not in self._namespaces:
            return
        live = kind != "DELETED" and obj.status.phase in ("Pending", "Running") and not meta.deletion_timestamp
        self._live[(meta.namespace, meta.name)] = live
        if live:
            self.kinds.add(meta.labels["app.kubernetes.io/managed-by"])
        self.peak = max(self.peak, sum(self._live.values()))


def test_step_pods_and_executions_share_one_cap(cluster: KubeCluster, tmp_path: Path) -> None:
    fleet = OperatorFleet(cluster, tmp_path, dispatch=CAPS)
    flows, jobs = make_namespace(cluster, "wf-caps"), make_namespace(cluster, "ex-caps")
    census = LivePods(cluster, {flows, jobs})
    try:
        fleet.start()
        fleet.leader()
        job = create_job(cluster, jobs, "work", runAt=rfc3339(now() + FAR_FUTURE), command="sleep 2")
        create_executions(cluster, job, EXECUTIONS)
        create_workflow(cluster, flows, "wide", steps=[pod_step(f"s{n}", command="sleep 2") for n in range(STEPS)])

        done = wait_phase(cluster, flows, "wide", "Succeeded", "Failed", timeout=240)
        wait_all_executions_finished(cluster, jobs, timeout=240)
        census.check()
        assert done["status"]["phase"] == "Succeeded"
        assert census.kinds == {"vigil", "vigil-workflows"}, "both kinds ran"
        assert census.peak <= CAPS["maxRunning"], f"{census.peak} Vigil pods live at once, cap {CAPS['maxRunning']}"
        assert census.peak == CAPS["maxRunning"], "the cap was reached, so it was exercised"
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        census.stop()
        fleet.stop()
        delete_namespaces(cluster, flows, jobs, fleet.namespace)
