"""TaskQueues against the real API server: defaults, refused fields, printer columns, and — with a
real operator given a queue DSN on the session's real PostgreSQL — the declaration published to
the store, a status that shows ready, leased, dead and the oldest ready age, and the same counts
as the leader's per-queue gauges (what workers are autoscaled on). A ScheduledJob with `task:`
feeds its queue one ready execution per Fired occurrence (no Execution object, no pod), and is
Invalid, naming spec.task, with an operator whose volume tier is off, until an operator with it on starts.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer, free_port
from tests.integration.conftest import GROUP, VERSION, KubeCluster
from tests.integration.operators import OperatorFleet
from tests.waiting import wait_for
from vigil.queue.catalogue import Catalogue, RecurringJob
from vigil.queue.store import QueueStore, Submission, WorkerStore

__all__ = ["postgres"]

PLURAL = "taskqueues"


def task_queue(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskQueue", "metadata": {"name": name}, "spec": spec}


def create(cluster: KubeCluster, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, task_queue(name, spec)
    )
    return created


def get(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return found


def test_a_task_queue_applied_shows_its_defaults(cluster: KubeCluster, namespace: str) -> None:
    spec = create(cluster, namespace, "plain", {})["spec"]
    assert spec == {
        "leaseDuration": "30s",
        "heartbeatInterval": "10s",
        "retry": {"maxAttempts": 3, "backoff": {"initial": "10s", "factor": 2.0, "max": "10m"}},
        "deadLetter": {"retention": "7d"},
        "tenants": {},
    }


BAD_FIELDS = [
    pytest.param({"heartbeatInterval": "30s"}, "heartbeatInterval", id="heartbeat-not-below-lease"),
    pytest.param({"leaseDuration": "0s"}, "leaseDuration", id="zero-lease"),
    pytest.param({"leaseDuration": "30x"}, "leaseDuration", id="lease-not-a-duration"),
    pytest.param({"retry": {"maxAttempts": 0}}, "retry.maxAttempts", id="no-attempts"),
    pytest.param({"retry": {"backoff": {"factor": 0.5}}}, "retry.backoff.factor", id="shrinking-backoff"),
    pytest.param({"deadLetter": {"retention": "forever"}}, "deadLetter.retention", id="retention"),
    pytest.param(
        {"priorities": [{"name": "high", "value": 0, "reservedShare": 0.7},
                        {"name": "low", "value": 9, "reservedShare": 0.4}]},
        "reservedShare values must sum to at most 1",
        id="shares-over-one",
    ),
    pytest.param(
        {"priorities": [{"name": "a", "value": 1}, {"name": "b", "value": 1}]},
        "a value of its own",
        id="same-priority-value",
    ),
    pytest.param({"priorities": [{"name": "high", "value": 0, "reservedShare": 1.5}]}, "reservedShare", id="share-over-one"),
    pytest.param({"priorities": [{"name": "High_One", "value": 0}]}, "priorities[0].name", id="priority-name"),
    pytest.param({"priorities": [{"name": "x", "value": 40000}]}, "priorities[0].value", id="priority-value-range"),
    pytest.param({"tenants": {"maxConcurrent": 0}}, "tenants.maxConcurrent", id="tenant-cap-zero"),
    pytest.param({"tenants": {"overrides": [{"name": "a", "maxConcurrent": -1}]}}, "maxConcurrent", id="override-negative"),
    pytest.param({"tenants": {"overrides": [{"maxConcurrent": 1}]}}, "name", id="override-without-tenant"),
    pytest.param({"objective": {"oldestReadyAge": "-5s"}}, "objective.oldestReadyAge", id="negative-objective"),
    pytest.param({"objective": {}}, "oldestReadyAge", id="objective-without-age"),
    pytest.param({"leaseDurationSeconds": 30}, "leaseDurationSeconds", id="unknown-field"),
]


@pytest.mark.parametrize(("spec", "named"), BAD_FIELDS)
def test_bad_fields_are_refused_naming_the_field(
    cluster: KubeCluster, namespace: str, spec: dict[str, Any], named: str
) -> None:
    with pytest.raises(client.ApiException) as refused:
        cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, task_queue("bad", spec), field_validation="Strict"
        )
    assert refused.value.status in (400, 422)  # 400: an unknown field under strict field validation
    assert named in str(refused.value.body)


def test_kubectl_get_tq_answers_is_it_keeping_up(cluster: KubeCluster, namespace: str) -> None:
    crd = cluster.apiext.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
    assert crd.spec.names.short_names == ["tq"]
    [served] = crd.spec.versions
    assert [(c.name, c.json_path) for c in served.additional_printer_columns] == [
        ("Ready", ".status.ready"),
        ("Leased", ".status.leased"),
        ("Dead", ".status.dead"),
        ("Oldest", ".status.oldestReadyAge"),
        ("Objective", ".spec.objective.oldestReadyAge"),
        ("Behind", '.status.conditions[?(@.type=="Behind")].status'),
        ("Jobs Overdue", '.status.conditions[?(@.type=="JobsOverdue")].status'),
        ("Chain Broken", '.status.conditions[?(@.type=="ChainBroken")].status'),
        ("Age", ".metadata.creationTimestamp"),
    ]
    create(cluster, namespace, "shown", {"objective": {"oldestReadyAge": "1m"}})
    header, row = cluster.kubectl("get", "tq", "-n", namespace).stdout.splitlines()
    assert header.split() == [
        "NAME", "READY", "LEASED", "DEAD", "OLDEST", "OBJECTIVE", "BEHIND", "JOBS", "OVERDUE", "CHAIN", "BROKEN", "AGE",
    ]  # fmt: skip
    assert row.split()[0] == "shown" and "1m" in row.split()


# -- with an operator and the queue store -------------------------------------------------------


@pytest.fixture
def queue_dsn(postgres: PostgresServer) -> str:
    """A database of the test's own on the session's PostgreSQL, with the queue schema."""
    info = postgres.conninfo(postgres.create_database().rsplit("/", 1)[1])
    QueueStore(info).migrate()
    return info


@pytest.fixture
def metrics_port() -> int:
    return free_port()


@pytest.fixture
def queue_fleet(
    cluster: KubeCluster, tmp_path: Path, queue_dsn: str, metrics_port: int, request: pytest.FixtureRequest
) -> Iterator[OperatorFleet]:
    """A leader with the volume tier on: this test's queue database, a TaskQueue pass a second,
    metrics on `metrics_port`."""
    fleet = OperatorFleet(cluster, tmp_path, queue={"dsn": queue_dsn, "statusIntervalSeconds": 1})
    fleet.start(http={"metricsPort": metrics_port, "apiPort": 0})
    fleet.leader()
    yield fleet
    fleet.finish(request)


def queue_gauges(port: int, namespace: str, queue: str) -> dict[str, float]:
    """The leader's vigil_queue_* gauges of one TaskQueue, by metric name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("vigil_queue_") and sample.labels == {"namespace": namespace, "queue": queue}
    }


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def shown_condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    """The condition `type_` the status must show: failing, not None, when it does not."""
    found = condition(obj, type_)
    assert found is not None, f"no {type_} condition in {obj.get('status')}"
    return found


@pytest.mark.postgres
def test_status_shows_ready_leased_dead_and_the_oldest_age(
    cluster: KubeCluster, namespace: str, queue_fleet: OperatorFleet, queue_dsn: str, metrics_port: int
) -> None:
    key = f"{namespace}/work"
    store = QueueStore(queue_dsn)
    now = datetime.now(UTC)
    store.submit(key, [Submission("record", run_after=now - timedelta(minutes=5)) for _ in range(4)], now=now)
    store.submit(key, [Submission("poison", max_attempts=1)], now=now)
    create(cluster, namespace, "work", {"leaseDuration": "20s", "heartbeatInterval": "5s",
                                        "retry": {"maxAttempts": 4}, "objective": {"oldestReadyAge": "1m"}})  # fmt: skip

    published = wait_for(lambda: store.declaration(key), timeout=60, what="the declaration in the store")
    assert (published.lease, published.heartbeat, published.max_attempts) == (timedelta(seconds=20), timedelta(seconds=5), 4)

    async def lease_and_kill() -> None:
        async with await psycopg.AsyncConnection.connect(queue_dsn, autocommit=True) as connection:
            worker = WorkerStore(connection, queue=key, worker="w1")
            await worker.lease(["record"], limit=1, lease=timedelta(minutes=5), now=datetime.now(UTC))
            leased_at = datetime.now(UTC)
            await worker.lease(["poison"], limit=1, lease=timedelta(seconds=1), now=leased_at)
            await worker.expire(now=leased_at + timedelta(seconds=2))  # its only attempt's lease ran out: dead

    asyncio.run(lease_and_kill())

    def shown() -> dict[str, Any] | None:
        status = get(cluster, namespace, "work").get("status") or {}
        return status if (status.get("ready"), status.get("leased"), status.get("dead")) == (3, 1, 1) else None

    status = wait_for(shown, timeout=60, what="status to show 3 ready, 1 leased, 1 dead")
    assert status["oldestReadySeconds"] >= 300 and status["oldestReadyAge"].startswith("5m")
    assert status["deadPerMinute"] == 1
    assert status["observedGeneration"] == 1
    obj = get(cluster, namespace, "work")
    assert shown_condition(obj, "Ready")["status"] == "True"
    assert shown_condition(obj, "Behind")["status"] == "True"
    assert shown_condition(obj, "Behind")["reason"] == "OldestReadyTooOld"
    _, row = cluster.kubectl("get", "tq", "work", "-n", namespace).stdout.splitlines()
    assert row.split()[1:7] == ["3", "1", "1", status["oldestReadyAge"], "1m", "True"]

    def published() -> dict[str, float] | None:  # by the same pass, just after the status writes
        gauges = queue_gauges(metrics_port, namespace, "work")
        return gauges if gauges.get("vigil_queue_ready") == 3 else None

    gauges = wait_for(published, timeout=30, what="the leader's gauges for the queue")
    assert gauges["vigil_queue_leased"] == 1
    assert gauges["vigil_queue_oldest_ready_age_seconds"] >= 300

    # A change reaches the store; a deletion removes the declaration (workers fall back to flags).
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "work", {"spec": {"leaseDuration": "1m"}})
    wait_for(lambda: (d := store.declaration(key)) is not None and d.lease == timedelta(minutes=1),
             timeout=60, what="the changed lease in the store")  # fmt: skip
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "work")
    wait_for(lambda: store.declaration(key) is None, timeout=60, what="the declaration removed")


@pytest.mark.postgres
def test_what_only_the_operator_can_check_makes_the_queue_invalid_with_an_event(
    cluster: KubeCluster, namespace: str, queue_fleet: OperatorFleet, queue_dsn: str
) -> None:
    create(cluster, namespace, "odd", {"retry": {"backoff": {"initial": "5m", "max": "1m"}}})

    def invalid() -> dict[str, Any] | None:
        found = condition(get(cluster, namespace, "odd"), "Invalid")
        return found if found is not None and found["status"] == "True" else None

    found = wait_for(invalid, timeout=60, what="the Invalid condition")
    assert "spec.retry.backoff" in found["message"] and "initial" in found["message"]
    assert shown_condition(get(cluster, namespace, "odd"), "Ready")["status"] == "False"
    events = wait_for(
        lambda: [e for e in cluster.core.list_namespaced_event(namespace).items
                 if e.involved_object.name == "odd" and e.reason == "InvalidSpec"] or None,
        timeout=30, what="the InvalidSpec Event",
    )  # fmt: skip
    assert "spec.retry.backoff" in events[0].message
    assert QueueStore(queue_dsn).declaration(f"{namespace}/odd") is None  # nothing published



@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["operator", "separate"])
def test_overdue_jobs_and_broken_chains_of_the_queue_show_as_its_conditions(
    cluster: KubeCluster, namespace: str, tmp_path: Path, queue_dsn: str, mode: str, request: pytest.FixtureRequest
) -> None:
    """The volume watchdog, in the leader or in its own `vigil watchdog` process, leaves each
    queue's verdicts in the store; the leader's TaskQueue pass shows them as conditions."""
    fleet = OperatorFleet(
        cluster, tmp_path, queue={"dsn": queue_dsn, "statusIntervalSeconds": 1},
        watchdog={"mode": mode, "intervalSeconds": 1}, audit={"intervalSeconds": 1},
    )  # fmt: skip
    try:
        fleet.start()
        fleet.leader()
        if mode == "separate":
            fleet.start("watchdog")
        create(cluster, namespace, "nightly", {})
        key = f"{namespace}/nightly"
        catalogue = Catalogue(queue_dsn, shards=1)
        added = datetime.now(UTC) - timedelta(hours=3)  # expected hourly, never run: overdue
        late = catalogue.add(RecurringJob(key, "report", "0 3 * * *", expected_max_interval=timedelta(hours=1)), now=added)
        lost = catalogue.add(RecurringJob(key, "report", "0 3 * * *"), now=added)
        with psycopg.connect(queue_dsn, autocommit=True) as connection:
            connection.execute("DELETE FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s", {"j": lost.job_id})

        def conditions(overdue: str, broken: str) -> dict[str, dict[str, Any]] | None:
            obj = get(cluster, namespace, "nightly")
            found = {t: condition(obj, t) for t in ("JobsOverdue", "ChainBroken")}
            shown = {t: c["status"] for t, c in found.items() if c is not None}
            if shown != {"JobsOverdue": overdue, "ChainBroken": broken}:
                return None
            return {t: shown_condition(obj, t) for t in found}

        found = wait_for(lambda: conditions("True", "True"), timeout=90, what="JobsOverdue and ChainBroken True")
        assert found["JobsOverdue"]["reason"] == "OverdueJobs"
        assert found["JobsOverdue"]["message"].startswith("1 job overdue") and late.job_id in found["JobsOverdue"]["message"]
        assert found["ChainBroken"]["reason"] == "BrokenChains"
        assert f"{lost.job_id} (NoFutureOccurrence)" in found["ChainBroken"]["message"]
        _, row = cluster.kubectl("get", "tq", "nightly", "-n", namespace).stdout.splitlines()
        assert row.split()[-3:-1] == ["True", "True"]
        described = cluster.kubectl("describe", "tq", "nightly", "-n", namespace).stdout
        assert "JobsOverdue" in described and lost.job_id in described

        for job_id in (late.job_id, lost.job_id):
            catalogue.delete(job_id, now=datetime.now(UTC))
        found = wait_for(lambda: conditions("False", "False"), timeout=90, what="JobsOverdue and ChainBroken False")
        assert (found["JobsOverdue"]["reason"], found["ChainBroken"]["reason"]) == ("NoOverdueJobs", "ChainsIntact")
    finally:
        fleet.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(fleet.logs())
        cluster.clear_namespace(fleet.namespace)


# -- ScheduledJobs with `task:` ----------------------------------------------------------------


def task_job(name: str, queue: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScheduledJob",
        "metadata": {"name": name},
        "spec": {
            "every": "2s",
            "jitter": "0s",
            "payloadTemplate": {"at": "{{ scheduledFor }}", "job": "{{ job.name }}"},
            "task": {"queue": queue, "name": "record"},
            **spec,
        },
    }


def job_status(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", name)
    return obj.get("status") or {}


@pytest.mark.postgres
def test_a_scheduled_job_with_a_task_feeds_its_queue_one_execution_per_occurrence(
    cluster: KubeCluster, namespace: str, queue_fleet: OperatorFleet, queue_dsn: str
) -> None:
    create(cluster, namespace, "reports", {})
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", task_job("feed", "reports"))

    def fired() -> list[dict[str, Any]] | None:
        entries = [e for e in job_status(cluster, namespace, "feed").get("occurrences") or [] if e.get("outcome") == "Fired"]
        return entries if len(entries) >= 3 else None

    entries = wait_for(fired, timeout=60, what="three Fired occurrences in the job's ledger")
    with psycopg.connect(queue_dsn) as connection:
        rows = connection.execute(
            "SELECT execution_id, idempotency_key, task, state, payload, run_after FROM vigil_queue.executions "
            "WHERE queue = %s",
            (f"{namespace}/reports",),
        ).fetchall()
    by_id = {row[0]: row for row in rows}
    for entry in entries:  # each Fired occurrence is one ready execution under its own id
        execution_id, key, task, state, payload, run_after = by_id[entry["executionId"]]
        assert (key, task, state) == (execution_id, "record", "ready")
        assert payload["job"] == "feed"
        assert datetime.fromisoformat(payload["at"]) == datetime.fromisoformat(entry["nominal"].replace("Z", "+00:00"))
        assert run_after == datetime.fromisoformat(entry["fireAt"].replace("Z", "+00:00"))
    later = [e for e in job_status(cluster, namespace, "feed").get("occurrences") or [] if e.get("outcome") == "Fired"]
    assert len(rows) <= len(later) + 1, "more executions than occurrences (one may be between submit and ledger)"
    assert cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "executions")["items"] == []
    assert cluster.core.list_namespaced_pod(namespace).items == []


@pytest.mark.postgres
def test_a_task_job_is_invalid_while_the_volume_tier_is_off_and_scheduled_once_it_is_on(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, queue_dsn: str
) -> None:
    fleet.start()
    fleet.leader()
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", task_job("feed", "reports"))

    def invalid() -> dict[str, Any] | None:
        found = condition({"status": job_status(cluster, namespace, "feed")}, "Invalid")
        return found if found and found["status"] == "True" else None

    found = wait_for(invalid, timeout=30, what="the task job to be Invalid")
    assert "spec.task: the volume tier is off: set queue.dsn" in found["message"]

    def warned() -> list[Any] | None:
        events = cluster.core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=feed,reason=InvalidSpec"
        ).items
        return events or None

    [event] = wait_for(warned, timeout=10, what="the InvalidSpec Event")
    assert "spec.task" in event.message
    status = job_status(cluster, namespace, "feed")
    assert not status.get("occurrences") and not status.get("nextRun")

    # The operator restarts with the tier on: the job, unchanged since, is judged again.
    fleet.leader().kill()
    fleet.start(queue={"dsn": queue_dsn})

    def scheduled() -> dict[str, Any] | None:
        status = job_status(cluster, namespace, "feed")
        found = condition({"status": status}, "Invalid")
        return status if found and found["status"] == "False" and status.get("nextRun") else None

    wait_for(scheduled, timeout=60, what="the task job to be valid, with a next run, under an operator with the tier on")
