"""ScheduledJob triggering against the real API server with real operator processes.

Exactly-once firing with three operators racing for the Lease; failover by
SIGKILL in the middle of firing; an outage walked per catch-up policy;
schedule edits that fire nothing retroactively; suspend and resume; invalid
jobs reported without disturbing valid ones; every known hostile payload
template Invalid while another namespace's canary fires on time.
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from kubernetes import client

from tests.hostile_templates import ESCAPES
from tests.integration.canary import Canary
from tests.integration.conftest import KubeCluster
from tests.integration.jobs import (
    condition,
    create_job,
    duplicates,
    env_of,
    get_job,
    ledger,
    make_namespace,
    parse_time,
    patch_spec,
    pods_scheduled_for_by_job,
    rfc3339,
    scheduled_for_by_job,
    vigil_pods,
    wait_all_executions_finished,
    wait_for_ledger,
)
from tests.integration.operators import OperatorFleet
from tests.waiting import wait_for


def now() -> datetime:
    return datetime.now(UTC)


def lattice(start: datetime, end: datetime, step: timedelta) -> list[str]:
    out, t = [], start
    while t <= end:
        out.append(rfc3339(t))
        t += step
    return out


HEAVY_LEASE = {"leaseDurationSeconds": 10, "renewPeriodSeconds": 2}


def test_three_operators_fire_300_jobs_due_in_one_minute_exactly_once(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    # A Lease long enough for a busy machine (3 s renews with 1 s requests, which a loaded API
    # server can miss three times in a row): this test is about three replicas firing a burst
    # once, and the failover tests below kill leaders on purpose.
    for _ in range(3):
        fleet.start(leaderElection=HEAVY_LEASE)
    fleet.leader()
    run_at = rfc3339(now() + timedelta(seconds=20))
    for i in range(300):
        create_job(cluster, namespace, f"j{i:03}", runAt=run_at)

    def all_fired() -> bool:
        return len(vigil_pods(cluster, namespace)) >= 300

    wait_for(all_fired, timeout=180, what="300 pods")
    # Every job's ledger says Fired before counting, so no straggler can still appear.
    wait_for(
        lambda: all(
            any(e["outcome"] == "Fired" for e in (get_job(cluster, namespace, f"j{i:03}").get("status") or {}).get("occurrences") or [])
            for i in range(300)
        ),
        timeout=120,
        what="every ledger to record Fired",
    )
    pods = vigil_pods(cluster, namespace)
    assert len(pods) == 300
    executions = [p.metadata.labels["vigil.dev/execution-id"] for p in pods]
    assert len(set(executions)) == 300
    assert {p.metadata.labels["vigil.dev/job"] for p in pods} == {f"j{i:03}" for i in range(300)}


def test_killing_the_leader_mid_firing_loses_and_duplicates_nothing(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    for _ in range(3):
        fleet.start()
    fleet.leader()
    step = timedelta(seconds=2)
    jobs = [f"tick{i}" for i in range(10)]
    for name in jobs:
        create_job(cluster, namespace, name, every="2s", jitter="0s", catchUpPolicy="All", catchUpWindow="5m")
    rng = random.Random(1234)
    for _ in range(10):
        victim = fleet.leader()
        time.sleep(rng.uniform(0.5, 3.0))  # the scenario: the leader dies at a random moment while firing
        victim.kill()
        fleet.start()
    fleet.leader()
    horizon = now() + timedelta(seconds=4)
    for name in jobs:
        wait_for_ledger(cluster, namespace, name, through=horizon, timeout=90)
        patch_spec(cluster, namespace, name, {"suspend": True, "suspendReason": "end of test"})
    wait_all_executions_finished(cluster, namespace)
    fired = scheduled_for_by_job(cluster, namespace)
    assert fired == pods_scheduled_for_by_job(cluster, namespace), "every execution ran exactly one pod"
    for name in jobs:
        stamps = fired[name]
        assert not duplicates(stamps), f"{name} fired an occurrence twice: {duplicates(stamps)}"
        first, last = (datetime.fromisoformat(s.replace("Z", "+00:00")) for s in (stamps[0], stamps[-1]))
        expected = lattice(first, last, step)
        missing = sorted(set(expected) - set(stamps))
        assert not missing, f"{name} lost occurrences across failovers: {missing}"
        assert last >= horizon - step


def _gap_scenario(cluster: KubeCluster, namespace: str, fleet: OperatorFleet, policy: str) -> tuple[list[str], dict[str, str]]:
    op = fleet.start()
    fleet.leader()
    create_job(cluster, namespace, "gap", every="3s", jitter="0s", catchUpPolicy=policy, catchUpWindow="5s")
    wait_for_ledger(cluster, namespace, "gap", through=now(), timeout=30)
    op.kill()
    outage_start = now()
    time.sleep(30)  # the scenario: no operator runs for 30 seconds
    fleet.start()
    fleet.leader()
    entries = wait_for_ledger(cluster, namespace, "gap", through=now(), timeout=60)
    in_gap = {
        e["nominal"]: e["outcome"]
        for e in entries
        if outage_start + timedelta(seconds=6) <= datetime.fromisoformat(e["nominal"].replace("Z", "+00:00"))
        <= outage_start + timedelta(seconds=24)
    }
    return scheduled_for_by_job(cluster, namespace)["gap"], in_gap


def test_an_outage_with_catch_up_all_fires_every_missed_occurrence(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    stamps, in_gap = _gap_scenario(cluster, namespace, fleet, "All")
    assert len(in_gap) >= 5
    assert set(in_gap.values()) == {"Fired"}
    assert set(in_gap) <= set(stamps)
    assert not duplicates(stamps)


def test_an_outage_with_catch_up_latest_records_the_rest_as_missed(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    stamps, in_gap = _gap_scenario(cluster, namespace, fleet, "Latest")
    assert len(in_gap) >= 5
    assert set(in_gap.values()) == {"Missed"}
    assert not set(in_gap) & set(stamps)
    # The Events are posted in the background once the ledger is written: wait for them.
    events = wait_for(
        lambda: cluster.core.list_namespaced_event(namespace, field_selector="reason=Missed").items,
        timeout=30,
        what="a Missed occurrence's Event",
    )
    assert all(event.type == "Warning" for event in events)


def test_an_outage_with_catch_up_none_fires_nothing_late(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    stamps, in_gap = _gap_scenario(cluster, namespace, fleet, "None")
    assert len(in_gap) >= 5
    assert set(in_gap.values()) == {"Missed"}
    assert not set(in_gap) & set(stamps)


def test_editing_the_schedule_fires_nothing_retroactively(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    create_job(cluster, namespace, "edit", every="1h", jitter="0s")
    wait_for(lambda: (get_job(cluster, namespace, "edit").get("status") or {}).get("nextRun"), timeout=30, what="nextRun")
    time.sleep(6)  # let several of the new schedule's past lattice points go by before the edit
    edited_at = now()
    patch_spec(cluster, namespace, "edit", {"every": "2s"})
    entries = wait_for_ledger(cluster, namespace, "edit", through=edited_at + timedelta(seconds=6), timeout=30)
    fired = [e["nominal"] for e in entries if e["outcome"] == "Fired"]
    assert fired and min(fired) > rfc3339(edited_at - timedelta(seconds=1))
    assert any(e["outcome"] == "Superseded" for e in entries) or all(
        e["nominal"] > rfc3339(edited_at) for e in entries
    )


def test_suspend_then_resume_catches_up_without_double_fire(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    create_job(cluster, namespace, "pause", every="2s", jitter="0s", catchUpPolicy="All", catchUpWindow="5m")
    wait_for_ledger(cluster, namespace, "pause", through=now(), timeout=30)
    patch_spec(cluster, namespace, "pause", {"suspend": True, "suspendReason": "maintenance"})
    wait_for(
        lambda: (condition(get_job(cluster, namespace, "pause"), "Suspended") or {}).get("status") == "True",
        timeout=30,
        what="Suspended condition",
    )
    time.sleep(8)  # the scenario: suspended for a while
    resumed_at = now()
    patch_spec(cluster, namespace, "pause", {"suspend": False})
    wait_for_ledger(cluster, namespace, "pause", through=resumed_at + timedelta(seconds=4), timeout=30)
    patch_spec(cluster, namespace, "pause", {"suspend": True, "suspendReason": "end of test"})
    stamps = scheduled_for_by_job(cluster, namespace)["pause"]
    assert not duplicates(stamps)
    first, last = (datetime.fromisoformat(s.replace("Z", "+00:00")) for s in (stamps[0], stamps[-1]))
    missing = sorted(set(lattice(first, last, timedelta(seconds=2))) - set(stamps))
    assert not missing, f"catch-up after resume left gaps: {missing}"


WAIT_A = {"id": "a", "type": "wait", "wait": {"duration": "1s"}}


def assert_invalid_naming(cluster: KubeCluster, namespace: str, name: str, *words: str) -> None:
    """The job gets `Invalid` and a Warning Event (InvalidSpec), each message holding every word."""

    def invalid() -> dict[str, object] | None:
        c = condition(get_job(cluster, namespace, name), "Invalid")
        return c if c and c["status"] == "True" else None

    cond = wait_for(invalid, timeout=30, what=f"{name} to be Invalid")
    assert all(word in str(cond["message"]) for word in words), (words, cond)

    def warned() -> list[Any] | None:
        found = cluster.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name},reason=InvalidSpec"
        ).items
        return found or None

    events = wait_for(warned, timeout=10, what=f"the InvalidSpec Event of {name}")
    assert all(word in events[0].message for word in words), (words, events[0].message)


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set so far (VmHWM in /proc/<pid>/status), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for process {pid}")


#: The chart's memory limit for the operator: a render that passed it would OOM-kill the leader.
CHART_MEMORY_LIMIT_MIB = 512


def test_hostile_templates_are_invalid_while_another_namespace_fires_on_time(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    """Issue #36: every known way to grow a payload template past its budgets (tests/hostile_templates.py),
    each on a ScheduledJob in one namespace, is `Invalid` naming the field, while a canary job in
    another namespace fires every occurrence on time and the leader stays far below its memory limit."""
    leader = fleet.start()
    fleet.leader()
    canary = Canary.start(cluster)
    try:
        for index, escape in enumerate(ESCAPES):
            create_job(cluster, namespace, f"hostile-{index:02}", every="5s", payloadTemplate={"t": escape.template})
        for index, escape in enumerate(ESCAPES):
            assert_invalid_naming(cluster, namespace, f"hostile-{index:02}", "spec.payloadTemplate.t: ", escape.message)
        canary.assert_fired_on_time()
        assert not vigil_pods(cluster, namespace), "a hostile job fired"
        assert leader.alive and fleet.leader() is leader, "a hostile template cost the leader its life"
        assert peak_rss_mib(leader.proc.pid) < CHART_MEMORY_LIMIT_MIB / 2
    finally:
        canary.remove()


def test_invalid_jobs_are_reported_and_a_valid_one_still_fires(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    leader = fleet.start()
    fleet.leader()
    spin = "{% for a in range(9000) %}{% for b in range(9000) %}{% endfor %}{% endfor %}"
    bad = {
        "bomb": ({"every": "5s", "payloadTemplate": {"x": '{{ "x" * 2000000000 }}'}}, "spec.payloadTemplate.x"),
        "spin": ({"every": "5s", "payloadTemplate": {"y": spin}}, "spec.payloadTemplate.y"),
        "mars": ({"every": "5s", "timezone": "Mars/Olympus_Mons"}, "timezone"),
        "hour25": ({"cron": "0 25 * * *"}, "cron"),
        "template": ({"every": "5s", "payloadTemplate": {"date": "{{ periodStart | date "}}, "payloadTemplate"),
        "unknown-var": ({"every": "5s", "payloadTemplate": {"d": "{{ yesterday }}"}}, "payloadTemplate"),
        "huge": ({"every": "5s", "payload": {"blob": "x" * 40_000}}, "spec.payload"),
        # A workflowTemplate's steps are one atomic list: the API server admits a repeated id.
        "twice": ({"every": "5s", "workflowTemplate": {"steps": [WAIT_A, WAIT_A]}}, "spec.workflowTemplate.steps"),
    }
    for name, (spec, _) in bad.items():
        create_job(cluster, namespace, name, **spec)
    create_job(cluster, namespace, "good", every="2s", jitter="0s")
    for name, (_, field) in bad.items():
        assert_invalid_naming(cluster, namespace, name, field)
    wait_for_ledger(cluster, namespace, "good", through=now() + timedelta(seconds=2), timeout=30)
    assert {p.metadata.labels["vigil.dev/job"] for p in vigil_pods(cluster, namespace)} == {"good"}
    assert leader.alive and fleet.leader() is leader, "a hostile template cost the leader its life"


def test_pods_carry_the_execution_id_period_and_rendered_payload(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    create_job(
        cluster,
        namespace,
        "daily",
        cron="* * * * *",
        timezone="Europe/London",
        jitter="0s",
        catchUpWindow="1h",
        payloadTemplate={"date": "{{ periodStart | date }}", "until": "{{ periodEnd | isoformat }}"},
        idempotencyKey="daily:{{ scheduledFor | date('%Y-%m-%dT%H:%M') }}",
    )
    pod = wait_for(lambda: next(iter(vigil_pods(cluster, namespace)), None), timeout=90, what="the first pod")
    env = env_of(pod)
    assert env["VIGIL_EXECUTION_ID"] == pod.metadata.labels["vigil.dev/execution-id"]
    assert pod.metadata.name == f"{env['VIGIL_EXECUTION_ID']}-1"
    assert env["VIGIL_ATTEMPT"] == "1"
    start = datetime.fromisoformat(env["VIGIL_PERIOD_START"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(env["VIGIL_PERIOD_END"].replace("Z", "+00:00"))
    assert end - start == timedelta(minutes=1)
    assert env["VIGIL_SCHEDULED_FOR"] == env["VIGIL_PERIOD_END"]
    local_date = start.astimezone(ZoneInfo("Europe/London")).strftime("%Y-%m-%d")
    assert json.loads(env["VIGIL_PAYLOAD"])["date"] == local_date
    assert env["VIGIL_IDEMPOTENCY_KEY"].startswith("daily:")
    owner = pod.metadata.owner_references[0]  # the Execution: deleting it deletes its pods
    assert (owner.kind, owner.name, owner.controller) == ("Execution", env["VIGIL_EXECUTION_ID"], True)
    assert pod.spec.restart_policy == "Never"


def test_kubectl_get_shows_schedule_next_run_and_ready(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    create_job(cluster, namespace, "shown", cron="0 2 * * *", timezone="Europe/London")
    wait_for(lambda: (get_job(cluster, namespace, "shown").get("status") or {}).get("nextRun"), timeout=30, what="nextRun")
    out = cluster.kubectl("get", "sj", "-n", namespace).stdout
    header, row = out.splitlines()[0], out.splitlines()[1]
    for column in ("SCHEDULE", "TIMEZONE", "NEXT RUN", "LAST SCHEDULED", "LAST SUCCESS", "READY", "AGE"):
        assert column in header
    assert "0 2 * * *" in row and "Europe/London" in row and "True" in row


def test_a_launch_refused_for_good_settles_as_failed_and_another_namespace_keeps_firing(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    """A ResourceQuota that allows no Executions: each occurrence there settles Failed with the
    quota's words (ledger, Warning Event, LaunchFailing), and a job elsewhere fires on time."""
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-executions"),
        spec=client.V1ResourceQuotaSpec(hard={"count/executions.vigil.dev": "0"}),
    )
    cluster.core.create_namespaced_resource_quota(namespace, quota)
    wait_for(
        lambda: (cluster.core.read_namespaced_resource_quota("no-executions", namespace).status.hard or {}),
        timeout=60,
        what="the quota to be counted",
    )
    other = make_namespace(cluster, "unharmed")
    try:
        fleet.start()
        fleet.leader()
        create_job(cluster, namespace, "refused", every="2s", jitter="0s")
        create_job(cluster, other, "fine", every="2s", jitter="0s")

        def settled_failed() -> list[dict[str, Any]] | None:
            failed = [e for e in ledger(cluster, namespace, "refused") if e["outcome"] == "Failed"]
            return failed if len(failed) >= 3 else None

        failed = wait_for(settled_failed, timeout=60, what="refused occurrences settled as Failed")
        assert all(e["reason"] == "LaunchRefused" for e in failed), failed
        cond = condition(get_job(cluster, namespace, "refused"), "LaunchFailing")
        assert cond and cond["status"] == "True" and "exceeded quota" in cond["message"], cond
        events = cluster.core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=refused,reason=Failed"
        ).items
        assert events and events[0].type == "Warning" and "exceeded quota" in events[0].message
        started = now()
        wait_for_ledger(cluster, other, "fine", through=started + timedelta(seconds=6), timeout=30)
        fired = [e for e in ledger(cluster, other, "fine") if e["outcome"] == "Fired"]
        late = [e for e in fired if parse_time(e["at"]) - parse_time(e["fireAt"]) > timedelta(seconds=2)]
        assert not [e for e in late if parse_time(e["nominal"]) > started], late
    finally:
        cluster.clear_namespace(other)
