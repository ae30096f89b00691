"""`kubectl vigil` execution verbs as a real kubectl plugin, against the local control plane.

No operator is started: the test writes Execution statuses itself (Dead,
Backoff) the way the operator does, and checks what each verb reads and
writes. Covered: `backfill` of 11 days of a London daily cron across the
spring-forward day (11 Executions, 11 periods, 11 ids; a second run creates
none; a dry run creates nothing; bad ranges and names exit 2); `executions`
newest first; `describe`; `dead-letters` in one namespace and across all;
`retry` (spec.retryRequests +1, refused unless Dead); `cancel` of one execution,
of a job's in-flight executions, of a finished one (refused), and of a name
that is both; and the namespace taken from the kubeconfig context.

The test cluster is shared, so another test's operator may act on these
objects: Executions are created with their final phase label so no dispatcher
takes them as Ready, and assertions look at what the CLI wrote (spec), never at
what an operator might do next.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import GROUP, VERSION, create_job
from tests.integration.test_cli import kubectl_plugin
from tests.waiting import wait_for
from vigil.cli.errors import EXIT_BAD_INPUT
from vigil.core.executions import (
    AttemptOutcome,
    AttemptResult,
    Execution,
    RetryPolicy,
    finish,
    new_execution,
    start,
)
from vigil.core.ids import ExecutionId, execution_id, pod_name
from vigil.core.ports import Conflict
from vigil.kube.stores.executions import ExecutionStore, execution_body
from vigil.model.names import EXECUTIONS

LONDON = "Europe/London"
DAILY_0200 = "0 2 * * *"
ELEVEN_DAYS = ("2026-03-24", "2026-04-03")  # London springs forward on 2026-03-29
ELEVEN_NOMINALS = [f"2026-03-{d}T02:00:00Z" for d in range(24, 29)] + [
    *(f"2026-03-{d}T01:00:00Z" for d in (29, 30, 31)),
    *(f"2026-04-0{d}T01:00:00Z" for d in (1, 2, 3)),
]
ONE_DAY = timedelta(days=1)
FAR_AWAY = timedelta(days=1)  # a Backoff retry no test outlives


@pytest.fixture
def job(cluster: KubeCluster, namespace: str) -> dict[str, Any]:
    return create_job(cluster, namespace, "nightly", cron=DAILY_0200, timezone=LONDON)


def executions(cluster: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    items = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, EXECUTIONS)["items"]
    return list(items)


def backfilled(cluster: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    """The Executions a backfill made (not any the trigger may fire meanwhile)."""
    return [ex for ex in executions(cluster, namespace) if ex["spec"]["source"] == "Backfill"]


def spec_of(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    obj = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, EXECUTIONS, name)
    return dict(obj["spec"])


def stdout_rows(stdout: str, *, header: list[str]) -> list[list[str]]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[: len(header)] == header)
    return [line.split() for line in lines[start + 1 :] if line.strip() and not line.startswith(("created", "dry run"))]


# --- Executions with a status written here, as the operator would ---------------------------


def failed_once(ex: Execution, *, at: datetime, policy: RetryPolicy) -> Execution:
    running = start(ex, pod=pod_name(ex.execution_id, ex.attempt), now=at)
    result = AttemptResult(
        attempt=ex.attempt, outcome=AttemptOutcome.FAILED, reason="ExitCode3",
        message="connection refused", exit_code=3, started_at=at,
    )  # fmt: skip
    return finish(running, result, policy=policy, now=at + timedelta(seconds=4))


def dead(ex: Execution, at: datetime) -> Execution:
    return failed_once(ex, at=at, policy=RetryPolicy(max_attempts=1))


def in_backoff(ex: Execution, at: datetime) -> Execution:
    waiting = failed_once(ex, at=at, policy=RetryPolicy(max_attempts=3))
    return dataclasses.replace(waiting, retry_at=datetime.now(UTC) + FAR_AWAY)


Shape = Callable[[Execution, datetime], Execution]


def make_execution(
    cluster: KubeCluster, job: dict[str, Any], *, nominal: datetime, shape: Shape | None = None
) -> ExecutionId:
    """An Execution of `job` for `nominal`, its status made by `shape(fresh, at)` (None: no status)."""
    ex_id = execution_id(job["metadata"]["uid"], nominal)
    body = execution_body(
        job=job, execution_id=ex_id, scheduled_for=nominal,
        period_start=nominal - ONE_DAY, period_end=nominal, source="Backfill",
    )  # fmt: skip
    store = ExecutionStore(cluster.api)
    fresh = new_execution(
        ex_id, namespace=job["metadata"]["namespace"], job="nightly", scheduled_for=nominal, now=datetime.now(UTC)
    )
    target = shape(fresh, datetime.now(UTC) - timedelta(hours=1)) if shape else fresh
    assert store.create(body)
    if shape:
        write_status(store, job["metadata"]["namespace"], ex_id, target)
    return ex_id


def write_status(store: ExecutionStore, namespace: str, name: str, ex: Execution) -> None:
    def written() -> bool:
        try:
            store.write(store.get(namespace, name) or {}, ex)
        except Conflict:
            return False
        return True

    wait_for(written, timeout=30, what=f"status of {name} written")


def nominal(day: int) -> datetime:
    return datetime(2026, 4, day, 1, 0, tzinfo=UTC)


# --- backfill ---------------------------------------------------------------------------------


def test_backfill_of_eleven_days_creates_eleven_executions_once(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    first = kubectl_plugin(cluster, "backfill", "nightly", "-n", namespace, "--from", ELEVEN_DAYS[0], "--to", ELEVEN_DAYS[1])

    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "created 11, already existed 0"
    made = backfilled(cluster, namespace)
    assert sorted(ex["spec"]["scheduledFor"] for ex in made) == ELEVEN_NOMINALS
    assert len({ex["spec"]["periodStart"][:10] for ex in made}) == 11  # each its own day
    uid = job["metadata"]["uid"]
    expected_ids = {execution_id(uid, datetime.fromisoformat(n)) for n in ELEVEN_NOMINALS}
    assert {ex["metadata"]["name"] for ex in made} == expected_ids
    assert all(ex["spec"]["executionId"] == ex["metadata"]["name"] for ex in made)

    second = kubectl_plugin(cluster, "backfill", "nightly", "-n", namespace, "--from", ELEVEN_DAYS[0], "--to", ELEVEN_DAYS[1])

    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[-1] == "created 0, already existed 11"
    assert len(backfilled(cluster, namespace)) == 11


def test_backfill_dry_run_lists_the_occurrences_and_creates_nothing(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    proc = kubectl_plugin(cluster, "backfill", "nightly", "-n", namespace, "--from", "2026-03-28", "--to", "2026-03-30", "--dry-run")

    assert proc.returncode == 0, proc.stderr
    rows = stdout_rows(proc.stdout, header=["SCHEDULED", "PERIOD", "START"])
    assert [row[0] for row in rows] == ["2026-03-28T02:00:00Z", "2026-03-29T01:00:00Z", "2026-03-30T01:00:00Z"]
    assert proc.stdout.splitlines()[-1].startswith("dry run: would create 3, already existed 0")
    assert backfilled(cluster, namespace) == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(("nightly", "--from", "2026-04-05", "--to", "2026-04-01"), "is after --to", id="reversed"),
        pytest.param(("nightly", "--from", "2026-02-30", "--to", "2026-04-01"), "invalid date", id="bad-date"),
        pytest.param(
            ("nightly", "--from", ELEVEN_DAYS[0], "--to", ELEVEN_DAYS[1], "--limit", "10"),
            "more than 10 occurrences",
            id="over-limit",
        ),
        pytest.param(("weekly", "--from", "2026-04-01", "--to", "2026-04-02"), 'scheduledjob "weekly" not found', id="no-job"),
    ],
)
def test_backfill_refuses_bad_input_with_one_line_and_creates_nothing(
    cluster: KubeCluster, namespace: str, job: dict[str, Any], args: tuple[str, ...], expected: str
) -> None:
    proc = kubectl_plugin(cluster, "backfill", *args, "-n", namespace)

    assert proc.returncode == EXIT_BAD_INPUT
    assert expected in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert backfilled(cluster, namespace) == []


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("workflowTemplate", {"workflowTemplate": {"steps": [{"id": "a", "type": "wait", "wait": {"duration": "1s"}}]}}),
        ("task", {"task": {"queue": "billing", "name": "invoice"}}),
    ],
)
def test_backfill_refuses_a_job_whose_occurrences_are_no_executions(
    cluster: KubeCluster, namespace: str, kind: str, spec: dict[str, Any]
) -> None:
    """Such a job's occurrences are Workflows or queue executions: an Execution made for one would
    wait Ready forever, so the backfill refuses it, as `run` does."""
    create_job(cluster, namespace, "not-a-pod", cron=DAILY_0200, **spec)
    proc = kubectl_plugin(cluster, "backfill", "not-a-pod", "--from", "2026-03-24", "--to", "2026-03-25", "-n", namespace)

    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert f"runs a {kind}, not a pod: backfill starts pod-template jobs only" in proc.stderr
    assert executions(cluster, namespace) == []


# --- executions, describe, dead-letters -------------------------------------------------------


def test_executions_lists_the_jobs_executions_newest_first(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    made = [make_execution(cluster, job, nominal=nominal(day)) for day in (2, 1)]
    make_execution(cluster, job, nominal=nominal(3), shape=dead)
    newest = execution_id(job["metadata"]["uid"], nominal(3))

    proc = kubectl_plugin(cluster, "executions", "nightly", "-n", namespace)

    assert proc.returncode == 0, proc.stderr
    rows = stdout_rows(proc.stdout, header=["EXECUTION", "SCHEDULED", "PHASE"])
    assert [row[0] for row in rows] == [newest, *made]
    assert rows[0][1:5] == ["2026-04-03T01:00:00Z", "Dead", "1", "ExitCode3"]


def test_describe_prints_the_timeline_of_an_execution(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    ex_id = make_execution(cluster, job, nominal=nominal(1), shape=dead)

    proc = kubectl_plugin(cluster, "describe", ex_id, "-n", namespace)

    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "Job:           nightly" in lines
    assert f"Pod:           gone (retention deleted it, or it was never made); its log as stored: kubectl vigil logs {ex_id} --attempt 1" in lines
    assert "Scheduled for: 2026-04-01T01:00:00Z" in lines
    assert "Period:        2026-03-31T01:00:00Z → 2026-04-01T01:00:00Z" in lines
    assert any(line.startswith("Phase:         Dead since") and line.endswith("reason ExitCode3") for line in lines)
    attempts = stdout_rows(proc.stdout, header=["ATTEMPT", "OUTCOME"])
    assert [row[:4] for row in attempts] == [["1", "Failed", "ExitCode3", "3"]]
    assert attempts[0][-3:] == ["4.0s", "connection", "refused"]


def test_dead_letters_lists_dead_executions_in_a_namespace_and_across_all(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    dead_id = make_execution(cluster, job, nominal=nominal(1), shape=dead)
    make_execution(cluster, job, nominal=nominal(2), shape=in_backoff)
    header = ["NAMESPACE", "JOB", "EXECUTION", "ATTEMPTS"]

    here = kubectl_plugin(cluster, "dead-letters", "-n", namespace)
    everywhere = kubectl_plugin(cluster, "dead-letters", "-A")

    assert here.returncode == 0, here.stderr
    rows = stdout_rows(here.stdout, header=header)
    assert [row[:5] for row in rows] == [[namespace, "nightly", dead_id, "1", "ExitCode3"]]
    assert rows[0][5].endswith("m")  # dead for about an hour: "59m" or "1h"-ish, never blank
    assert everywhere.returncode == 0, everywhere.stderr
    mine = [row for row in stdout_rows(everywhere.stdout, header=header) if row[0] == namespace]
    assert [row[2] for row in mine] == [dead_id]


def test_the_namespace_defaults_to_the_kubeconfig_contexts(
    cluster: KubeCluster, namespace: str, job: dict[str, Any], tmp_path: Path
) -> None:
    dead_id = make_execution(cluster, job, nominal=nominal(1), shape=dead)
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for context in config["contexts"]:
        if context["name"] == config["current-context"]:
            context["context"]["namespace"] = namespace
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    elsewhere = KubeCluster(kubeconfig, cluster.bin)

    proc = kubectl_plugin(elsewhere, "dead-letters")

    assert proc.returncode == 0, proc.stderr
    assert [row[2] for row in stdout_rows(proc.stdout, header=["NAMESPACE", "JOB", "EXECUTION"])] == [dead_id]


# --- retry ------------------------------------------------------------------------------------


def test_retry_of_a_dead_execution_requests_one_more_attempt(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    ex_id = make_execution(cluster, job, nominal=nominal(1), shape=dead)

    proc = kubectl_plugin(cluster, "retry", ex_id, "-n", namespace)

    assert proc.returncode == 0, proc.stderr
    assert f"execution {ex_id} will run again as attempt 2 with the same execution id" in proc.stdout
    assert spec_of(cluster, namespace, ex_id)["retryRequests"] == 1


def test_retry_refuses_an_execution_that_is_not_dead(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    ex_id = make_execution(cluster, job, nominal=nominal(1), shape=in_backoff)

    proc = kubectl_plugin(cluster, "retry", ex_id, "-n", namespace)

    assert proc.returncode == EXIT_BAD_INPUT
    assert "is Backoff, not Dead" in proc.stderr
    assert spec_of(cluster, namespace, ex_id).get("retryRequests", 0) == 0


# --- cancel -----------------------------------------------------------------------------------


def test_cancel_of_an_execution_sets_spec_cancel_with_the_reason(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    ex_id = make_execution(cluster, job, nominal=nominal(1), shape=in_backoff)

    proc = kubectl_plugin(cluster, "cancel", ex_id, "-n", namespace, "--reason", "bad input data")

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"execution {ex_id} (Backoff, attempt 2): cancel requested")
    spec = spec_of(cluster, namespace, ex_id)
    assert (spec["cancel"], spec["cancelReason"]) == (True, "bad input data")


def test_cancel_of_a_job_cancels_its_in_flight_executions_only(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    waiting = [make_execution(cluster, job, nominal=nominal(day), shape=in_backoff) for day in (1, 2)]
    finished = make_execution(cluster, job, nominal=nominal(3), shape=dead)

    proc = kubectl_plugin(cluster, "cancel", "nightly", "-n", namespace)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("scheduledjob nightly: cancel requested for 2 in-flight execution(s)")
    assert [row[0] for row in stdout_rows(proc.stdout, header=["EXECUTION", "SCHEDULED"])] == waiting
    assert [spec_of(cluster, namespace, name).get("cancel") for name in waiting] == [True, True]
    assert spec_of(cluster, namespace, finished).get("cancel") is not True


def test_cancel_refuses_an_execution_that_has_finished(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    ex_id = make_execution(cluster, job, nominal=nominal(1), shape=dead)

    proc = kubectl_plugin(cluster, "cancel", ex_id, "-n", namespace)

    assert proc.returncode == EXIT_BAD_INPUT
    assert "is already Dead: nothing to cancel" in proc.stderr
    assert spec_of(cluster, namespace, ex_id).get("cancel") is not True


def test_cancel_prefers_the_execution_when_a_job_has_the_same_name(
    cluster: KubeCluster, namespace: str, job: dict[str, Any]
) -> None:
    ex_id = make_execution(cluster, job, nominal=nominal(1), shape=in_backoff)
    create_job(cluster, namespace, ex_id, cron="0 0 1 1 *", timezone="UTC")

    proc = kubectl_plugin(cluster, "cancel", ex_id, "-n", namespace)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"execution {ex_id}")
    assert "also names a ScheduledJob" in proc.stdout
    assert spec_of(cluster, namespace, ex_id)["cancel"] is True


# --- unknown names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "kind"),
    [
        pytest.param("executions", "scheduledjob", id="executions"),
        pytest.param("describe", "execution", id="describe"),
        pytest.param("retry", "execution", id="retry"),
        pytest.param("cancel", "execution or scheduledjob", id="cancel"),
    ],
)
def test_an_unknown_name_exits_2_naming_it_and_the_namespace(
    cluster: KubeCluster, namespace: str, verb: str, kind: str
) -> None:
    proc = kubectl_plugin(cluster, verb, "ex-nosuchthing", "-n", namespace)

    assert proc.returncode == EXIT_BAD_INPUT
    assert f'{kind} "ex-nosuchthing"' in proc.stderr or f'{kind} named "ex-nosuchthing"' in proc.stderr
    assert f'namespace "{namespace}"' in proc.stderr
    assert "Traceback" not in proc.stderr
