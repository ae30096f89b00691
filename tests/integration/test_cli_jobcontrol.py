"""`run`, `suspend`, `resume` and the global connection flags, as a kubectl plugin on a real API server.

No operator runs: what is checked is what the verbs write. `run` creates one
Execution marked `source: Manual` with the request id annotated; the same
request again creates nothing and names the same execution; another request
is another execution. When the operator records the end of its attempt
(`JobResults`, as the execution controller calls it), the job's ledger shows it as
Manual with its request id, and `occurrences` prints it. `suspend` writes `suspendedBy` as the API server names
the caller (a SelfSubjectReview asked here independently) and refuses a second
suspension with exit 2; `resume` clears all three fields. `--kubeconfig` and
`--context` choose the cluster and the default namespace: a kubeconfig whose
current context points nowhere still works with `--context` naming a good one.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import create_job, get_job
from tests.integration.jobstatuses import flush
from tests.integration.test_cli import NEVER_SOON, kubectl_plugin
from tests.integration.test_cli_workflows import whoami
from vigil.cli.main import EXIT_BAD_INPUT
from vigil.core.executions import AttemptOutcome, AttemptResult, RetryPolicy, finish, start
from vigil.core.ids import manual_execution_id, pod_name
from vigil.core.memory import FakeClock
from vigil.kube.kits.events import EventRecorder
from vigil.kube.stores.executions import ExecutionStore, execution_from_object
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.jobstatus import JobStatusWriter
from vigil.kube.stores.results import JobResults
from vigil.model.names import ANNOTATION_REQUEST_ID, LABEL_JOB_UID


def test_run_twice_with_one_request_id_creates_one_manual_execution(cluster: KubeCluster, namespace: str) -> None:
    uid = create_job(cluster, namespace, "nightly", cron=NEVER_SOON, timezone="UTC")["metadata"]["uid"]

    first = kubectl_plugin(cluster, "run", "nightly", "--request-id", "deploy-42", "-n", namespace, "-o", "json")
    again = kubectl_plugin(cluster, "run", "nightly", "--request-id", "deploy-42", "-n", namespace, "-o", "json")
    other = kubectl_plugin(cluster, "run", "nightly", "--request-id", "deploy-43", "-n", namespace, "-o", "yaml")

    assert first.returncode == again.returncode == other.returncode == 0, (first.stderr, again.stderr, other.stderr)
    created, repeated, another = json.loads(first.stdout), json.loads(again.stdout), yaml.safe_load(other.stdout)
    assert (created["result"], repeated["result"], another["result"]) == ("created", "already exists", "created")
    assert created["executionId"] == repeated["executionId"] == manual_execution_id(uid, "deploy-42")
    assert another["executionId"] == manual_execution_id(uid, "deploy-43")
    executions = cluster.custom.list_namespaced_custom_object(
        "vigil.dev", "v1alpha1", namespace, "executions", label_selector=f"{LABEL_JOB_UID}={uid}"
    )["items"]
    assert sorted(e["metadata"]["name"] for e in executions) == sorted([created["executionId"], another["executionId"]])
    mine = next(e for e in executions if e["metadata"]["name"] == created["executionId"])
    assert mine["spec"]["source"] == "Manual"
    assert mine["metadata"]["annotations"][ANNOTATION_REQUEST_ID] == "deploy-42"


def test_suspend_names_the_caller_and_resume_clears_it(cluster: KubeCluster, namespace: str) -> None:
    create_job(cluster, namespace, "nightly", cron=NEVER_SOON, timezone="UTC")
    me, _ = whoami(cluster.api)

    suspended = kubectl_plugin(cluster, "suspend", "nightly", "--reason", "db migration", "-n", namespace)
    twice = kubectl_plugin(cluster, "suspend", "nightly", "--reason", "again", "-n", namespace)
    spec = get_job(cluster, namespace, "nightly")["spec"]
    resumed = kubectl_plugin(cluster, "resume", "nightly", "-n", namespace, "-o", "json")

    assert suspended.returncode == 0, suspended.stderr
    assert suspended.stdout.strip() == f"scheduledjob nightly suspended by {me}: db migration"
    assert (spec["suspend"], spec["suspendReason"], spec["suspendedBy"]) == (True, "db migration", me)
    assert twice.returncode == EXIT_BAD_INPUT and f"already suspended (by {me}: db migration)" in twice.stderr
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["suspend"] is False
    after = get_job(cluster, namespace, "nightly")["spec"]
    assert not after.get("suspend") and "suspendReason" not in after and "suspendedBy" not in after


def test_kubeconfig_and_context_choose_the_cluster_and_namespace(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    create_job(cluster, namespace, "nightly", cron=NEVER_SOON, timezone="UTC")
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    good = config["contexts"][0]["context"]
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}})
    config["contexts"] = [
        {"name": "nowhere", "context": {"cluster": "nowhere", "user": good["user"]}},
        {"name": "prod", "context": {**good, "namespace": namespace}},
    ]
    config["current-context"] = "nowhere"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))

    chosen = kubectl_plugin(cluster, "--kubeconfig", str(path), "--context", "prod", "occurrences", "nightly", "-o", "json")
    current = kubectl_plugin(cluster, "--kubeconfig", str(path), "--request-timeout", "5s", "occurrences", "nightly")

    assert chosen.returncode == 0, chosen.stderr
    assert json.loads(chosen.stdout) == {"occurrences": []}
    assert current.returncode != 0 and "127.0.0.1" in current.stderr


def test_a_manual_run_enters_the_ledger_when_its_attempt_ends(cluster: KubeCluster, namespace: str) -> None:
    create_job(cluster, namespace, "nightly", cron=NEVER_SOON, timezone="UTC")
    ran = kubectl_plugin(cluster, "run", "nightly", "--request-id", "inc-4711", "-n", namespace, "-o", "json")
    assert ran.returncode == 0, ran.stderr
    name = json.loads(ran.stdout)["executionId"]
    obj = cluster.custom.get_namespaced_custom_object("vigil.dev", "v1alpha1", namespace, "executions", name)
    now = datetime.now(UTC).replace(microsecond=0)
    running = start(execution_from_object(obj), pod=pod_name(name, 1), now=now)
    result = AttemptResult(attempt=1, outcome=AttemptOutcome.SUCCEEDED, reason="Completed", started_at=now)
    succeeded = finish(running, result, policy=RetryPolicy(max_attempts=1), now=now + timedelta(seconds=2))
    writer = JobStatusWriter(cluster.api, catalogue=KubeCatalogue(cluster.api))  # its queue is not run
    results = JobResults(
        store=ExecutionStore(cluster.api), events=EventRecorder(cluster.api, instance="test"),
        clock=FakeClock(now + timedelta(seconds=2)), writer=writer,
    )  # fmt: skip

    results.record(obj, succeeded)
    flush(writer)

    listed = kubectl_plugin(cluster, "occurrences", "nightly", "-n", namespace, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)["occurrences"]
    assert (entry["outcome"], entry["executionId"], entry["reason"]) == ("Manual", name, "run by hand, request inc-4711")
