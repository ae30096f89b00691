"""Finished Workflows leave after their ttlAfterFinished, on the real API server.

Through a real operator: workflows with a short ttlAfterFinished (their own, and the operator's
default) finish, then are deleted with their step pods (garbage-collected through their owner
references), while their history rows stay in the history database; one with 0s stays, and so
does a running one. A ScheduledJob's workflow takes the TTL of its workflowTemplate, and after
it is gone the job's `recent` list and `kubectl vigil occurrences` still name it. With the engine in this process and a clock the test moves (the only
stand-in: days cannot pass in a test): a running workflow stays ten days past any TTL, and a
finished one whose history the database has not taken yet stays until it has, then goes. A bad
ttlAfterFinished is refused by the API server naming the field.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import get_job, rfc3339
from tests.integration.operators import OperatorFleet
from tests.integration.test_cli import kubectl_plugin
from tests.integration.workflows import (
    GROUP,
    VERSION,
    WORKFLOWS,
    MovableClock,
    Outage,
    create_workflow,
    get_workflow,
    pod_step,
    wait_phase,
)
from tests.waiting import wait_for
from vigil.core.ids import execution_id
from vigil.history.store import SqlHistory
from vigil.kube.controllers.workflowapi import WorkflowApi, workflow_cache
from vigil.kube.controllers.workflows import WorkflowEngine
from vigil.kube.controllers.workflowttl import WorkflowTtl


def exists(cluster: KubeCluster, namespace: str, name: str) -> bool:
    try:
        get_workflow(cluster, namespace, name)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def pods_of(cluster: KubeCluster, namespace: str, uid: str) -> list[str]:
    listed = cluster.core.list_namespaced_pod(namespace, label_selector=f"vigil.dev/workflow-uid={uid}")
    return [pod.metadata.name for pod in listed.items]


def history_rows(dsn: str, namespace: str, name: str) -> list[dict[str, Any]]:
    store = SqlHistory(dsn, retention_days=30)
    try:
        return [dict(row.data) for row in store.workflow_events(namespace, name)]
    finally:
        store.close()


def test_finished_workflows_leave_after_their_ttl_with_their_pods_and_their_history_stays(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    ttls = {"own-ttl": timedelta(seconds=4), "default-ttl": timedelta(seconds=6)}
    fleet = OperatorFleet(cluster, tmp_path, workflows={"rescanSeconds": 2, "ttlAfterFinished": "6s"})
    dsn = fleet.settings["history"]["dsn"]
    try:
        fleet.start()
        fleet.leader()
        two_steps = [pod_step("a"), pod_step("b", "a")]
        create_workflow(cluster, namespace, "own-ttl", steps=two_steps, ttlAfterFinished="4s")
        create_workflow(cluster, namespace, "default-ttl", steps=two_steps)
        create_workflow(cluster, namespace, "kept", steps=two_steps, ttlAfterFinished="0s")
        create_workflow(cluster, namespace, "running", ttlAfterFinished="1s",
                        steps=[{"id": "hold", "type": "wait", "wait": {"duration": "1h"}}])  # fmt: skip
        done = {name: wait_phase(cluster, namespace, name, "Succeeded") for name in ("own-ttl", "default-ttl", "kept")}
        uids = {name: obj["metadata"]["uid"] for name, obj in done.items()}
        assert all(pods_of(cluster, namespace, uid) for uid in uids.values())

        for name in ("own-ttl", "default-ttl"):
            wait_for(lambda n=name: not exists(cluster, namespace, n), timeout=60, what=f"{name} deleted")
            gone_at = datetime.now(UTC)
            finished = datetime.fromisoformat(done[name]["status"]["finishedAt"])
            assert gone_at - finished >= ttls[name]
            wait_for(lambda u=uids[name]: not pods_of(cluster, namespace, u), timeout=60, what=f"{name}'s pods collected")
            assert history_rows(dsn, namespace, name) == done[name]["status"]["history"]

        # The ones that stay: 0s keeps it (past both TTLs by now), and a running one is never due.
        assert exists(cluster, namespace, "kept")
        assert pods_of(cluster, namespace, uids["kept"])
        assert get_workflow(cluster, namespace, "running")["status"]["phase"] == "Running"
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)


def test_a_scheduled_workflow_takes_its_ttl_from_the_template_and_the_job_still_names_it(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    fleet = OperatorFleet(cluster, tmp_path, workflows={"rescanSeconds": 2, "ttlAfterFinished": "1h"})
    try:
        fleet.start()
        fleet.leader()
        run_at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
        job = cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": "nightly"},
            "spec": {"runAt": rfc3339(run_at), "workflowTemplate": {"ttlAfterFinished": "3s", "steps": [pod_step("a")]}},
        })  # fmt: skip
        name = execution_id(job["metadata"]["uid"], run_at)
        done = wait_phase(cluster, namespace, name, "Succeeded", timeout=120)
        assert done["spec"]["ttlAfterFinished"] == "3s"
        wait_for(lambda: not exists(cluster, namespace, name), timeout=60, what="the scheduled workflow deleted")
        assert history_rows(fleet.settings["history"]["dsn"], namespace, name) == done["status"]["history"]

        recent = (get_job(cluster, namespace, "nightly").get("status") or {}).get("recent") or []
        assert [(r["executionId"], r["outcome"]) for r in recent] == [(name, "Succeeded")]
        shown = kubectl_plugin(cluster, "occurrences", "nightly", "-n", namespace)
        assert shown.returncode == 0, shown.stderr
        assert name in shown.stdout
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)


# --- the engine in this process, with a clock the test moves ------------------------------------


def in_namespace(cluster: KubeCluster, namespace: str, **options: Any) -> WorkflowEngine:
    """An engine whose Workflow cache follows only the test's namespace (others may hold
    workflows of other tests); nothing runs its informer or its queue."""
    cache = workflow_cache(cluster.api, namespace=namespace)
    return WorkflowEngine(WorkflowApi(cluster.api), cache=cache, **options)


def resynced(engine: WorkflowEngine, cluster: KubeCluster, namespace: str) -> int:
    """The informer's resync, on a cache that holds what a list of the namespace returns now (as
    its watch would have it); how many workflows it queued for a pass."""
    listed = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS)["items"]
    for obj in listed:
        engine.cache.observe(obj)
    engine.cache.resync()
    return len(engine.queue)




@pytest.fixture
def history(tmp_path: Path) -> Iterator[SqlHistory]:
    store = SqlHistory(f"sqlite:///{tmp_path}/history.db", retention_days=30)
    store.migrate()
    yield store
    store.close()


def wait_step(name: str, duration: str) -> dict[str, Any]:
    return {"id": name, "type": "wait", "wait": {"duration": duration}}


def test_a_running_workflow_stays_whatever_the_clock_and_a_finished_one_waits_for_its_history(
    cluster: KubeCluster, namespace: str, history: SqlHistory
) -> None:
    clock, database = MovableClock(), Outage(history)
    engine = in_namespace(
        cluster, namespace, clock=clock, events=None, history=database,
        ttl=WorkflowTtl(cluster.custom, default=timedelta(hours=1)),
    )  # fmt: skip
    create_workflow(cluster, namespace, "long", steps=[wait_step("hold", "30d")])
    create_workflow(cluster, namespace, "short", steps=[wait_step("hold", "1s")])
    for name in ("long", "short"):
        engine.reconcile(namespace, name)
    database.down = True
    clock.at += timedelta(seconds=2)
    engine.reconcile(namespace, "short")
    finished = get_workflow(cluster, namespace, "short")["status"]
    assert finished["phase"] == "Succeeded"
    assert finished["historyMirrored"] < len(finished["history"])

    # Ten days on: long still runs, short is far past its TTL but its history is not written.
    clock.at += timedelta(days=10)
    assert engine.reconcile(namespace, "long") is not None  # its timer, in 20 days
    engine.reconcile(namespace, "short")
    assert get_workflow(cluster, namespace, "long")["status"]["phase"] == "Running"
    assert exists(cluster, namespace, "short")
    assert resynced(engine, cluster, namespace) == 2  # long unfinished, short unmirrored: both looked at again

    database.down = False
    engine.reconcile(namespace, "short")
    assert not exists(cluster, namespace, "short")
    assert [dict(row.data) for row in history.workflow_events(namespace, "short")] == finished["history"]
    assert exists(cluster, namespace, "long")


def test_a_finished_workflow_waits_for_its_ttl_then_a_new_engine_finds_it_by_the_resync(
    cluster: KubeCluster, namespace: str, history: SqlHistory
) -> None:
    clock = MovableClock()

    def engine() -> WorkflowEngine:
        return in_namespace(
            cluster, namespace, clock=clock, events=None, history=history,
            ttl=WorkflowTtl(cluster.custom, default=None),
        )  # fmt: skip

    create_workflow(cluster, namespace, "done", steps=[wait_step("hold", "1s")], ttlAfterFinished="1h")
    first = engine()
    first.reconcile(namespace, "done")
    clock.at += timedelta(seconds=2)
    first.reconcile(namespace, "done")
    finished_at = datetime.fromisoformat(get_workflow(cluster, namespace, "done")["status"]["finishedAt"])
    assert first.reconcile(namespace, "done") == finished_at + timedelta(hours=1)  # mirrored; waits for its TTL
    assert resynced(first, cluster, namespace) == 0

    # A restart loses that timer: the resync of a new engine finds the workflow once it is due.
    clock.at = finished_at + timedelta(hours=1)
    second = engine()
    assert resynced(second, cluster, namespace) == 1
    second.reconcile(namespace, "done")
    assert not exists(cluster, namespace, "done")


@pytest.mark.parametrize(
    ("ttl", "words"),
    [
        pytest.param("1 day", "spec.ttlAfterFinished", id="words"),
        pytest.param("-1h", "spec.ttlAfterFinished", id="negative"),
        pytest.param(3600, "spec.ttlAfterFinished", id="a-number"),
    ],
)
def test_a_bad_ttl_after_finished_is_refused_by_the_api_server_naming_the_field(
    cluster: KubeCluster, namespace: str, ttl: object, words: str
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"name": "bad-ttl"},
        "spec": {"steps": [wait_step("hold", "1s")], "ttlAfterFinished": ttl},
    }  # fmt: skip
    with pytest.raises(ApiException) as refused:
        cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, body)
    assert refused.value.status == 422
    assert words in str(refused.value.body)
    job = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ScheduledJob", "metadata": {"name": "bad-ttl"},
        "spec": {"cron": "0 2 * * *", "workflowTemplate": {"steps": [wait_step("hold", "1s")], "ttlAfterFinished": ttl}},
    }  # fmt: skip
    with pytest.raises(ApiException) as refused:
        cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", job)
    assert refused.value.status == 422
    assert "spec.workflowTemplate.ttlAfterFinished" in str(refused.value.body)
