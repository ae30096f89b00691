"""The execution layer against the real API server, with real operator processes and real pods.

Retries keep one execution id across attempt pods, waiting a full-jitter
backoff stored as `retryAt`; a leader SIGKILLed during a backoff is replaced
and the retry still happens once, at the stored time; dead letters are
announced and can be retried by hand; cancellation stops a running attempt for
good; concurrency policies Forbid and Replace; dispatch fairness between
namespaces and high priority during a backfill; and the history database kept
off the firing path through a PostgreSQL outage, with nothing lost.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from tests.contract.postgres import PostgresServer
from tests.integration.conftest import KubeCluster
from tests.integration.jobs import (
    EXECUTIONS,
    FAR_FUTURE,
    GROUP,
    PLURAL,
    VERSION,
    Follower,
    PodCreations,
    condition,
    create_executions,
    create_job,
    delete_namespaces,
    env_of,
    events_about,
    execution_pods,
    execution_status,
    executions,
    get_execution,
    get_job,
    ledger,
    make_namespace,
    now,
    parse_time,
    patch_execution_spec,
    patch_spec,
    rfc3339,
    vigil_pods,
    wait_all_executions_finished,
    wait_execution_phase,
)
from tests.integration.operators import OperatorFleet
from tests.waiting import wait_for
from vigil.core.executions import Backoff, RetryPolicy, backoff_cap, backoff_delay
from vigil.core.history import AttemptState
from vigil.core.ids import execution_id
from vigil.history.store import SqlHistory

#: Added to every bound derived from the settings under test: this 2-core machine runs the API
#: server, etcd, the node agent and the operator together, and a starved thread loses a second or two.
MARGIN = timedelta(seconds=2)
DISPATCH_INTERVAL_SECONDS = 1.0  # the dispatcher's idle poll (vigil/runtime/leader.py), the longest it sleeps
TIMESTAMP_GRAIN_SECONDS = 1.0  # Kubernetes writes creation and status times in whole seconds
#: Seconds the dispatcher may take beyond a due time: one idle poll, one timestamp's truncation,
#: and the margin (which also covers the pod event's way back to the operator).
DISPATCH_SLACK_SECONDS = DISPATCH_INTERVAL_SECONDS + TIMESTAMP_GRAIN_SECONDS + MARGIN.total_seconds()
FIRST_FIRE_DELAY = timedelta(seconds=2)


def history_dsn(fleet: OperatorFleet) -> str:
    return f"sqlite:///{fleet.workdir}/history.db"


def history_states(dsn: str, ex_id: str) -> list[tuple[int, str]]:
    history = SqlHistory(dsn)
    try:
        return [(r.attempt, str(r.state)) for r in history.timeline(ex_id)]
    except Exception:  # the operator may not have created the database yet
        return []
    finally:
        history.close()


def one_off(cluster: KubeCluster, namespace: str, name: str, **spec: Any) -> str:
    """A job due FIRST_FIRE_DELAY from now; returns its execution id (a function of uid and runAt)."""
    run_at = (now() + FIRST_FIRE_DELAY).replace(microsecond=0) + timedelta(seconds=1)
    job = create_job(cluster, namespace, name, runAt=rfc3339(run_at), **spec)
    return execution_id(job["metadata"]["uid"], run_at)


def retry_spec(*, max_attempts: int, initial: str, factor: float = 2.0, max_: str = "10s") -> dict[str, Any]:
    return {"maxAttempts": max_attempts, "backoff": {"initial": initial, "factor": factor, "max": max_}}


def test_retries_keep_the_execution_id_and_wait_a_jittered_backoff(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    ex_id = one_off(
        cluster, namespace, "flaky",
        command='test "$VIGIL_ATTEMPT" -ge 3',
        retry=retry_spec(max_attempts=3, initial="2s", factor=2, max_="10s"),
    )  # fmt: skip
    done = wait_execution_phase(cluster, namespace, ex_id, "Succeeded", timeout=90)
    status = execution_status(done)
    assert status["attempt"] == 3
    assert [a["outcome"] for a in status["attempts"]] == ["Failed", "Failed", "Succeeded"]
    assert [a["reason"] for a in status["attempts"]] == ["ExitCode1", "ExitCode1", "Completed"]

    pods = execution_pods(cluster, namespace, ex_id)
    assert [p.metadata.name for p in pods] == [f"{ex_id}-1", f"{ex_id}-2", f"{ex_id}-3"]
    assert [env_of(p)["VIGIL_EXECUTION_ID"] for p in pods] == [ex_id] * 3
    assert [env_of(p)["VIGIL_ATTEMPT"] for p in pods] == ["1", "2", "3"]

    backoff = Backoff(initial=timedelta(seconds=2), factor=2, max=timedelta(seconds=10))
    policy = RetryPolicy(max_attempts=3, backoff=backoff)
    for k in (1, 2):
        # Both times are whole seconds, truncated: the measured gap can be up to 1 s short or long.
        finished = parse_time(status["attempts"][k - 1]["finishedAt"])
        gap = (pods[k].metadata.creation_timestamp - finished).total_seconds()
        cap = backoff_cap(policy.backoff, attempt=k).total_seconds()
        assert 0 <= gap <= cap + DISPATCH_SLACK_SECONDS, f"attempt {k + 1} came {gap}s after {k} (cap {cap}s)"
        # The jitter is a function of the execution id, so the wait itself is known exactly.
        waited = backoff_delay(policy, attempt=k, execution_id=ex_id).total_seconds()
        assert waited - 1 <= gap <= waited + DISPATCH_SLACK_SECONDS, f"attempt {k + 1}: {gap}s, stored wait {waited}s"

    def two_retrying() -> list[Any] | None:
        found = events_about(cluster, namespace, "flaky", "Retrying")
        return found if len(found) >= 2 else None

    retrying = wait_for(two_retrying, timeout=30, what="a Retrying event per failed attempt")
    failed = sorted(re.findall(r"attempt (\d+) failed", e.message)[0] for e in retrying)
    assert failed == ["1", "2"] and {e.type for e in retrying} == {"Warning"}, [e.message for e in retrying]

    dsn = history_dsn(fleet)
    rows = wait_for(
        lambda: (states := history_states(dsn, ex_id))[-1:] == [(3, "succeeded")] and states,
        timeout=30,
        what="three history rows",
    )
    assert rows == [(1, "failed"), (2, "failed"), (3, "succeeded")]


#: Long enough for a leader to be killed and replaced while the execution waits.
CRASH_BACKOFF = Backoff(initial=timedelta(seconds=15), factor=2, max=timedelta(seconds=15))
#: The shortest stored wait that leaves room to kill the leader and for a successor to take over
#: (a 3 s Lease, plus a new process's start) before the retry is due.
CRASH_MIN_DELAY = timedelta(seconds=10)
CRASH_CANDIDATES = 40  # jobs tried for one with a long enough wait: each qualifies with p = 1/3


def _job_with_a_long_first_backoff(cluster: KubeCluster, namespace: str, run_at: datetime) -> str:
    """Create jobs until one's first retry waits at least CRASH_MIN_DELAY; delete the others.

    The wait is a deterministic function of the execution id (uid and nominal
    time), so the test can choose a job whose backoff leaves time for the crash.
    """
    policy = RetryPolicy(max_attempts=2, backoff=CRASH_BACKOFF)
    retry = retry_spec(max_attempts=2, initial="15s", factor=2, max_="15s")
    for i in range(CRASH_CANDIDATES):
        name = f"crash-{i}"
        command = 'test "$VIGIL_ATTEMPT" -ge 2'
        job = create_job(cluster, namespace, name, runAt=rfc3339(run_at), command=command, retry=retry)
        ex_id = execution_id(job["metadata"]["uid"], run_at)
        if backoff_delay(policy, attempt=1, execution_id=ex_id) >= CRASH_MIN_DELAY:
            return ex_id
        cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    raise AssertionError(f"no job with a long enough first backoff in {CRASH_CANDIDATES} tries")


#: How far past any wait the policy could produce the test moves the stored retryAt: a successor
#: that recomputed the wait from the policy would retry before it; one that reads it, at it.
STORED_BEYOND_POLICY = timedelta(seconds=5)


def test_a_leader_killed_during_backoff_is_replaced_and_the_retry_happens_once_at_retry_at(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    """The successor retries at the *stored* time. The wait is a function of the execution id, so
    recomputing it would land on the same instant; to tell the two apart, the stored retryAt is
    moved while no leader runs to a time the policy can never produce (past its cap)."""
    fleet.start()
    fleet.leader()
    run_at = (now() + timedelta(seconds=8)).replace(microsecond=0)
    ex_id = _job_with_a_long_first_backoff(cluster, namespace, run_at)
    waiting = wait_execution_phase(cluster, namespace, ex_id, "Backoff", timeout=60, attempt=2)
    status = execution_status(waiting)
    retry_at, failed_at = parse_time(status["retryAt"]), parse_time(status["attempts"][0]["finishedAt"])

    fleet.leader().kill()
    killed_at = now()
    assert killed_at < retry_at, "the leader must die during the backoff"
    latest_by_policy = failed_at + timedelta(seconds=1) + backoff_cap(CRASH_BACKOFF, attempt=1)
    stored = max(latest_by_policy, killed_at).replace(microsecond=0) + STORED_BEYOND_POLICY
    cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, EXECUTIONS, ex_id, {"status": {"retryAt": rfc3339(stored)}}
    )
    successor = fleet.start()
    assert fleet.leader(timeout=60) is successor
    took_over = now()

    done = wait_execution_phase(cluster, namespace, ex_id, "Succeeded", timeout=60)
    pods = execution_pods(cluster, namespace, ex_id)
    assert [p.metadata.name for p in pods] == [f"{ex_id}-1", f"{ex_id}-2"]
    created = pods[1].metadata.creation_timestamp
    assert created >= stored, f"retried at {created}, before the stored retryAt {stored} (policy's: {retry_at})"
    due = max(stored, took_over)  # normally the stored time: the successor leads well before it
    assert (created - due).total_seconds() <= DISPATCH_SLACK_SECONDS, f"retried at {created}, due {due}"
    print(f"successor led {(stored - took_over).total_seconds():.1f}s before retryAt; pod 2 at {created}")
    assert [a["attempt"] for a in execution_status(done)["attempts"]] == [1, 2]


def test_a_dead_letter_is_announced_and_a_retry_request_runs_it_again_with_the_same_id(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    ex_id = one_off(cluster, namespace, "doomed", command="exit 3", retry=retry_spec(max_attempts=2, initial="1s"))
    dead = wait_execution_phase(cluster, namespace, ex_id, "Dead", timeout=60)
    assert execution_status(dead)["attempt"] == 2
    assert execution_status(dead)["reason"] == "ExitCode3"

    def dead_lettered() -> dict[str, Any] | None:
        cond = condition(get_job(cluster, namespace, "doomed"), "DeadLettered")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for(dead_lettered, timeout=30, what="the DeadLettered condition")
    assert ex_id in cond["message"]
    events = wait_for(lambda: events_about(cluster, namespace, "doomed", "DeadLettered"), timeout=30, what="event")
    assert events[0].type == "Warning" and ex_id in events[0].message

    patch_execution_spec(cluster, namespace, ex_id, {"retryRequests": 1})
    third = wait_for(
        lambda: next((p for p in execution_pods(cluster, namespace, ex_id) if p.metadata.name == f"{ex_id}-3"), None),
        timeout=60,
        what="a third attempt pod",
    )
    assert env_of(third)["VIGIL_EXECUTION_ID"] == ex_id
    assert env_of(third)["VIGIL_ATTEMPT"] == "3"
    again = wait_execution_phase(cluster, namespace, ex_id, "Dead", timeout=60, attempt=3)
    assert [a["attempt"] for a in execution_status(again)["attempts"]] == [1, 2, 3]
    assert execution_status(again)["observedRetryRequests"] == 1


#: The backoff of `retry_spec(max_attempts=3, initial="1s")` below: what a retry would wait.
def test_a_final_transition_whose_history_was_not_written_reaches_it_through_the_next_leader(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    """The crash window between an Execution's final status write and its history row, replayed:
    the leader dies with the Dead status stored, and the database it wrote to is not the one the
    next leader uses. The next leader's cache announces every Execution, so it writes the row,
    and the dead letter is listed."""
    fleet.start()
    fleet.leader()
    ex_id = one_off(cluster, namespace, "doomed", command="exit 3", retry=retry_spec(max_attempts=1, initial="1s"))
    wait_execution_phase(cluster, namespace, ex_id, "Dead", timeout=60)
    fleet.leader().kill()
    after_crash = f"sqlite:///{fleet.workdir}/after-crash.db"  # the row the crash kept from being written
    fleet.start(history={"dsn": after_crash})
    fleet.leader()

    wait_for(lambda: history_states(after_crash, ex_id), timeout=60, what="the attempt's history row")
    assert history_states(after_crash, ex_id) == [(1, str(AttemptState.DEAD))]
    dead_letters = [
        e["metadata"]["name"]
        for e in cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, EXECUTIONS)["items"]
        if execution_status(e).get("phase") == "Dead"
    ]
    assert dead_letters == [ex_id]


CANCEL_BACKOFF = Backoff(initial=timedelta(seconds=1), factor=2, max=timedelta(seconds=10))


def test_cancelling_a_running_execution_deletes_its_pod_and_never_retries(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    ex_id = one_off(cluster, namespace, "long", command="sleep 300", retry=retry_spec(max_attempts=3, initial="1s"))

    def pod_running() -> bool:
        pods = execution_pods(cluster, namespace, ex_id)
        return bool(pods) and pods[0].status.phase == "Running"

    wait_for(pod_running, timeout=60, what="the attempt's pod to run")
    wait_execution_phase(cluster, namespace, ex_id, "Running", timeout=30)
    patch_execution_spec(cluster, namespace, ex_id, {"cancel": True})

    cancelled = wait_execution_phase(cluster, namespace, ex_id, "Cancelled", timeout=30)
    assert execution_status(cancelled)["reason"] == "CancelledByUser"
    assert [a["outcome"] for a in execution_status(cancelled)["attempts"]] == ["Cancelled"]
    wait_for(lambda: not execution_pods(cluster, namespace, ex_id), timeout=60, what="the pod to be deleted")
    # A retry would have come by the backoff's cap plus the dispatcher's slack after the attempt
    # ended; wait past that (and a margin), then look.
    ended = parse_time(execution_status(cancelled)["finishedAt"])
    retry_would_be_due = ended + backoff_cap(CANCEL_BACKOFF, attempt=1) + timedelta(seconds=DISPATCH_SLACK_SECONDS)
    wait_for(lambda: now() > retry_would_be_due + MARGIN, timeout=60, what="the time a retry would have come")
    assert not execution_pods(cluster, namespace, ex_id), "a cancelled execution was retried"
    assert execution_status(get_execution(cluster, namespace, ex_id))["phase"] == "Cancelled"

    dsn = history_dsn(fleet)
    wait_for(lambda: history_states(dsn, ex_id), timeout=30, what="the attempt's history row")
    wait_for(lambda: history_states(dsn, ex_id)[-1][1] != str(AttemptState.RUNNING), timeout=30, what="the row final")
    assert history_states(dsn, ex_id) == [(1, str(AttemptState.CANCELLED))]


class PhasesSeen(Follower):
    """Every phase each Execution of a namespace was written with, in order, recorded by a watch."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        self.seen: dict[str, list[str]] = {}
        super().__init__(cluster.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, EXECUTIONS)

    def on_event(self, kind: str, obj: Any) -> None:
        phases = self.seen.setdefault(obj["metadata"]["name"], [])
        phase = execution_status(obj).get("phase") or "Ready"  # a fresh Execution is Ready
        if not phases or phases[-1] != phase:
            phases.append(phase)


def test_an_attempt_whose_pod_no_node_takes_is_not_recorded_running_and_fails_at_its_pending_limit(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    """Running means on a node: a pod the scheduler cannot place leaves its Execution Ready, with
    no write (a burst's pods wait for the scheduler too), however long `runningAfterSeconds` has
    passed, until `pendingLimitSeconds` fails the attempt as StuckPending and deletes the pod."""
    fleet.start(dispatch={"runningAfterSeconds": 0, "pendingLimitSeconds": 3})
    fleet.leader()
    phases = PhasesSeen(cluster, namespace)
    nowhere = {"nodeSelector": {"vigil.dev/test-node": "none-has-this"}, "containers": [
        {"name": "main", "image": "busybox", "command": ["true"]}]}  # fmt: skip
    try:
        ex_id = one_off(cluster, namespace, "nowhere", template={"spec": nowhere},
                        retry=retry_spec(max_attempts=1, initial="1s"))  # fmt: skip
        dead = wait_execution_phase(cluster, namespace, ex_id, "Dead", timeout=60)
        wait_for(lambda: not execution_pods(cluster, namespace, ex_id), timeout=60, what="the pod deleted")
    finally:
        phases.stop()
    phases.check()
    attempts = execution_status(dead)["attempts"]
    assert [(a["outcome"], a["reason"]) for a in attempts] == [("Failed", "StuckPending")]
    assert "Unschedulable" in attempts[0]["message"]
    assert phases.seen[ex_id] == ["Ready", "Dead"]


def _every_3s_sleeping(cluster: KubeCluster, namespace: str, name: str, policy: str) -> None:
    create_job(cluster, namespace, name, every="3s", jitter="0s", command="sleep 20", concurrencyPolicy=policy)


def _by_schedule(cluster: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    return sorted(executions(cluster, namespace), key=lambda e: e["spec"]["scheduledFor"])


def test_concurrency_forbid_skips_occurrences_while_one_runs(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    _every_3s_sleeping(cluster, namespace, "single", "Forbid")
    first = wait_for(lambda: _by_schedule(cluster, namespace), timeout=60, what="a first execution")[0]
    wait_execution_phase(cluster, namespace, first["metadata"]["name"], "Running", timeout=30)

    def two_skipped() -> list[dict[str, Any]] | None:
        skipped = [e for e in ledger(cluster, namespace, "single") if e["outcome"] == "Skipped"]
        return skipped if len(skipped) >= 2 else None

    skipped = wait_for(two_skipped, timeout=60, what="two Skipped occurrences")
    patch_spec(cluster, namespace, "single", {"suspend": True, "suspendReason": "end of test"})
    assert {e["reason"] for e in skipped} == {"ConcurrencyForbid"}
    runs = executions(cluster, namespace)
    assert [e["metadata"]["name"] for e in runs] == [first["metadata"]["name"]]
    assert execution_status(runs[0])["phase"] == "Running"
    assert [p.metadata.name for p in vigil_pods(cluster, namespace)] == [f"{first['metadata']['name']}-1"]


def test_concurrency_replace_cancels_the_running_execution_and_starts_the_new_one(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    _every_3s_sleeping(cluster, namespace, "latest", "Replace")
    first = wait_for(lambda: _by_schedule(cluster, namespace), timeout=60, what="a first execution")[0]
    first_id = first["metadata"]["name"]
    wait_for(lambda: execution_pods(cluster, namespace, first_id), timeout=30, what="the first execution's pod")
    wait_for(lambda: len(_by_schedule(cluster, namespace)) >= 2, timeout=30, what="a second execution")
    second_id = _by_schedule(cluster, namespace)[1]["metadata"]["name"]

    replaced = wait_execution_phase(cluster, namespace, first_id, "Cancelled", timeout=30)
    assert execution_status(replaced)["reason"] == "Replaced"
    wait_for(lambda: not execution_pods(cluster, namespace, first_id), timeout=60, what="the replaced pod gone")

    def second_started() -> bool:
        status = execution_status(get_execution(cluster, namespace, second_id))
        return bool(status.get("pod") or status.get("attempts"))

    wait_for(second_started, timeout=30, what="the second execution to start")
    patch_spec(cluster, namespace, "latest", {"suspend": True, "suspendReason": "end of test"})

    def newest_running() -> list[dict[str, Any]] | None:
        runs = _by_schedule(cluster, namespace)
        return runs if execution_status(runs[-1]).get("phase") == "Running" else None

    runs = wait_for(newest_running, timeout=30, what="the newest execution to run")
    for older in runs[:-1]:  # each replaced before its successor was created
        assert (execution_status(older)["phase"], execution_status(older)["reason"]) == ("Cancelled", "Replaced")


FAIR_SLOTS = 20
FAIR_DISPATCH = {"maxRunning": FAIR_SLOTS, "perNamespaceMax": FAIR_SLOTS, "reservedHigh": 0}
BACKFILL_SIZE = 1000
OTHER_SIZE = 10
def _running(cluster: KubeCluster, *namespaces: str) -> int:
    """Attempts holding a slot: their pods, Pending or Running and not being deleted (an attempt
    is recorded Running only after a while; its pod is what runs from the start)."""
    return sum(
        1
        for ns in namespaces
        for pod in vigil_pods(cluster, ns)
        if pod.status.phase in ("Pending", "Running") and not pod.metadata.deletion_timestamp
    )


def _started(pods: PodCreations, namespace: str, *, at_least: int) -> list[tuple[str, int]] | None:
    """(pod name, creation revision) of the namespace's pods in start order, once there are enough."""
    started = [(name, rv) for ns, name, rv in pods.ordered() if ns == namespace]
    return started if len(started) >= at_least else None


def _execution_of(pod: str) -> str:
    return pod.rsplit("-", 1)[0]


def _fairness_scenario(cluster: KubeCluster, tmp_path: Path, backfill_size: int) -> None:
    """A's backfill holds every slot when B's few arrive: B's start in the slots that free next,
    long before A's 10% mark; then a high-priority one takes the very next slot."""
    fleet = OperatorFleet(cluster, tmp_path, dispatch=FAIR_DISPATCH)
    ns_a, ns_b = make_namespace(cluster, "fair-a"), make_namespace(cluster, "fair-b")
    pods = PodCreations(cluster, {ns_a, ns_b})
    try:
        run_at = rfc3339(now() + FAR_FUTURE)
        job_a = create_job(cluster, ns_a, "backfill", runAt=run_at, command="sleep 1")
        job_b = create_job(cluster, ns_b, "other", runAt=run_at, command="sleep 1")
        urgent = create_job(cluster, ns_b, "urgent", runAt=run_at, command="sleep 1", priority="high")
        began = time.monotonic()
        create_executions(cluster, job_a, backfill_size)
        print(f"created {backfill_size} in A in {time.monotonic() - began:.1f}s")
        fleet.start()
        fleet.start()  # a standby, as the chart runs: a leader that cannot renew under this load exits
        fleet.leader()
        wait_for(lambda: _started(pods, ns_a, at_least=FAIR_SLOTS), timeout=180, what="A's backfill in every slot")
        a_before = len(_started(pods, ns_a, at_least=0) or [])
        others = {o["metadata"]["name"] for o in create_executions(cluster, job_b, OTHER_SIZE)}

        mark = backfill_size // 10
        b_started = wait_for(lambda: _started(pods, ns_b, at_least=OTHER_SIZE), timeout=180, what="B's to start")
        a_started = wait_for(lambda: _started(pods, ns_a, at_least=mark), timeout=300, what="A's 10% mark")
        last_b = max(rv for _, rv in b_started)
        a_ahead = sum(rv < last_b for _, rv in a_started)
        print(f"A started {a_before} before B arrived and {a_ahead} before B's last; 10% mark is {mark}")
        assert {_execution_of(name) for name, _ in b_started} == others
        assert last_b < a_started[mark - 1][1], f"B's last start came after A's {mark}th ({a_ahead} A's before it)"

        _high_priority_takes_the_next_slot(cluster, job=urgent, namespaces=(ns_a, ns_b))
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        pods.stop()
        fleet.stop()
        delete_namespaces(cluster, ns_a, ns_b, fleet.namespace)


def _started_at(cluster: KubeCluster, namespace: str) -> dict[str, datetime]:
    """Each started execution's start: the instant its dispatch pass began (one per pass)."""
    out = {}
    for obj in executions(cluster, namespace):
        started = execution_status(obj).get("startedAt")
        if started:
            out[obj["metadata"]["name"]] = parse_time(started)
    return out


def _high_priority_takes_the_next_slot(
    cluster: KubeCluster, *, job: dict[str, Any], namespaces: tuple[str, str]
) -> None:
    """Created while every slot is busy, a high-priority execution starts in the first dispatch
    pass that sees it: no pass that began after it existed starts anything before it
    (reservedHigh 0, so it waits for a slot to free, but not behind anyone)."""
    wait_for(lambda: _running(cluster, *namespaces) >= FAIR_SLOTS, timeout=120, what="every slot busy")
    high = create_executions(cluster, job, 1)[0]["metadata"]["name"]
    ready_at = now()
    started = wait_for(
        lambda: execution_status(get_execution(cluster, job["metadata"]["namespace"], high)).get("startedAt"),
        timeout=120,
        what="the high-priority execution to start",
    )
    high_started = parse_time(started)

    def others_started_after_it_was_ready() -> list[datetime] | None:
        others = {name: at for ns in namespaces for name, at in _started_at(cluster, ns).items() if name != high}
        later = sorted(at for at in others.values() if at > ready_at)
        return later or None

    # The backfill goes on, so normal executions start after the high one was ready: the order of
    # those starts is what the assertion is about (with none, it would hold vacuously).
    later = wait_for(others_started_after_it_was_ready, timeout=60, what="a normal start after the high was ready")
    assert high_started <= later[0], (
        f"a pass at {later[0]} started others before the high-priority one (ready {ready_at}, started {high_started})"
    )
    waited = (high_started - ready_at).total_seconds()
    print(f"high priority started {waited:.2f}s after it was ready; {len(later)} others started since")


def test_dispatch_is_fair_between_namespaces_and_high_priority_goes_first(
    cluster: KubeCluster, tmp_path: Path
) -> None:
    _fairness_scenario(cluster, tmp_path, BACKFILL_SIZE)


#: Caps that all bind: a namespace may hold half the slots, and a third is kept for high priority.
CAPS = {"maxRunning": 6, "perNamespaceMax": 3, "reservedHigh": 2}
CAPS_NORMAL_PER_NAMESPACE = 12
CAPS_HIGH = 6


class RunningCensus(Follower):
    """The attempts holding a slot in some namespaces after every change the API server records:
    their pods, Pending or Running and not being deleted (an execution is recorded Running only
    after a while; its pod is what runs, from the moment it exists).

    Each watch event is one write, in the order etcd applied them, so checking the counts after
    each one checks every state any dispatch pass could have read — finer than the passes.
    """

    def __init__(self, cluster: KubeCluster, priorities: dict[str, str]) -> None:
        self._priorities = priorities  # each namespace's one priority
        self._state: dict[tuple[str, str], bool] = {}  # (ns, pod) -> live
        self.peak_total = self.peak_shared = self.peak_high = 0
        self.peak_by_namespace: Counter[str] = Counter()
        self.breaches: list[str] = []
        super().__init__(cluster.core.list_pod_for_all_namespaces, label_selector="app.kubernetes.io/managed-by=vigil")

    def on_event(self, kind: str, obj: Any) -> None:
        meta = obj.metadata
        if meta.namespace not in self._priorities:
            return
        key = (meta.namespace, meta.name)
        self._state[key] = kind != "DELETED" and obj.status.phase in ("Pending", "Running") and not meta.deletion_timestamp
        running = [(ns, self._priorities[ns]) for (ns, _), live in self._state.items() if live]
        total = len(running)
        shared = sum(priority != "high" for _, priority in running)
        by_namespace = Counter(ns for ns, _ in running)
        self.peak_total, self.peak_shared = max(self.peak_total, total), max(self.peak_shared, shared)
        self.peak_high = max(self.peak_high, total - shared)
        for ns, count in by_namespace.items():
            self.peak_by_namespace[ns] = max(self.peak_by_namespace[ns], count)
        meta = {"resourceVersion": meta.resource_version}
        at = f"at revision {meta['resourceVersion']}"
        if total > CAPS["maxRunning"]:
            self.breaches.append(f"{total} running {at}, maxRunning {CAPS['maxRunning']}")
        if shared > CAPS["maxRunning"] - CAPS["reservedHigh"]:
            self.breaches.append(f"{shared} normal running {at}, reservedHigh {CAPS['reservedHigh']}")
        self.breaches += [
            f"{count} running in {ns} {at}, perNamespaceMax {CAPS['perNamespaceMax']}"
            for ns, count in by_namespace.items()
            if count > CAPS["perNamespaceMax"]
        ]


def test_running_stays_within_the_global_the_namespace_and_the_reserved_caps(
    cluster: KubeCluster, tmp_path: Path
) -> None:
    """Two namespaces' normal backlogs and a third's high-priority one, all ready at once: the
    running count never passes any cap, and each cap is reached, so each was exercised. High
    takes its namespace's cap at once; once it drains, normal work holds only the shared slots
    and the reserved ones stay empty."""
    fleet = OperatorFleet(cluster, tmp_path, dispatch=CAPS)
    spaces = [make_namespace(cluster, f"caps-{x}") for x in "abc"]
    census = RunningCensus(cluster, dict(zip(spaces, ("normal", "normal", "high"), strict=True)))
    try:
        run_at = rfc3339(now() + FAR_FUTURE)
        for ns, priority, count in zip(spaces, ("normal", "normal", "high"), (CAPS_NORMAL_PER_NAMESPACE, CAPS_NORMAL_PER_NAMESPACE, CAPS_HIGH), strict=True):
            job = create_job(cluster, ns, "work", runAt=run_at, command="sleep 4", priority=priority)
            create_executions(cluster, job, count)
        fleet.start()
        fleet.leader()
        for ns in spaces:
            wait_all_executions_finished(cluster, ns, timeout=240)
        census.check()
        assert census.breaches == [], census.breaches[:10]
        peaks = (census.peak_total, census.peak_shared, census.peak_high, max(census.peak_by_namespace.values()))
        print(f"peaks: total, normal, high, one namespace = {peaks}")
        shared = CAPS["maxRunning"] - CAPS["reservedHigh"]
        assert peaks == (CAPS["maxRunning"], shared, CAPS["perNamespaceMax"], CAPS["perNamespaceMax"])
    finally:
        census.stop()
        fleet.stop()
        delete_namespaces(cluster, *spaces, fleet.namespace)


OUTAGE_SECONDS = 60
HISTORY_TIMEOUT = 120


def _history_rows(server: PostgresServer, database: str) -> dict[tuple[str, int], int]:
    """How many rows each (execution id, attempt) has in the history table (none before it exists)."""
    with psycopg.connect(server.conninfo(database)) as connection:
        try:
            rows = connection.execute(
                "SELECT execution_id, attempt, count(*) FROM attempts GROUP BY execution_id, attempt"
            ).fetchall()
        except psycopg.errors.UndefinedTable:  # the operator has not migrated the database yet
            return {}
    return {(str(ex_id), int(attempt)): int(count) for ex_id, attempt, count in rows}


def _since(cluster: KubeCluster, namespace: str, start: datetime) -> list[dict[str, Any]]:
    """The namespace's executions due after `start`, oldest first."""
    due = [e for e in executions(cluster, namespace) if parse_time(e["spec"]["scheduledFor"]) > start]
    return sorted(due, key=lambda e: e["spec"]["scheduledFor"])


def test_firing_goes_on_while_the_history_database_is_down_and_nothing_is_lost(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    server = PostgresServer.create()
    database = f"history_{uuid.uuid4().hex[:8]}"
    fleet = OperatorFleet(cluster, tmp_path, history={"dsn": server.create_database(database)})
    try:
        fleet.start()
        fleet.leader()
        create_job(cluster, namespace, "steady", every="2s", jitter="0s")
        wait_for(lambda: len(_history_rows(server, database)) >= 2, timeout=60, what="history rows before the outage")

        server.stop()
        down_at = now()

        def succeeded_during_outage() -> list[dict[str, Any]] | None:
            done = [e for e in _since(cluster, namespace, down_at) if execution_status(e).get("phase") == "Succeeded"]
            return done if len(done) >= 5 else None

        wait_for(succeeded_during_outage, timeout=OUTAGE_SECONDS, what="executions to succeed while it is down")
        time.sleep(max(0.0, OUTAGE_SECONDS - (now() - down_at).total_seconds()))  # the scenario: the outage
        during = _since(cluster, namespace, down_at)
        assert len(during) >= OUTAGE_SECONDS / 2 - 3, f"only {len(during)} fired in a {OUTAGE_SECONDS}s outage"
        unfinished = [e["metadata"]["name"] for e in during[:-3] if execution_status(e).get("phase") != "Succeeded"]
        assert not unfinished, f"executions stalled during the outage: {unfinished}"
        # Those that ended during the outage can have reached the database only after it is back:
        # every one of them must be among its rows below.
        server.start()
        patch_spec(cluster, namespace, "steady", {"suspend": True, "suspendReason": "end of test"})
        wait_all_executions_finished(cluster, namespace, timeout=60)
        finished = executions(cluster, namespace)
        expected = {
            (e["metadata"]["name"], attempt)
            for e in finished
            for attempt in range(1, execution_status(e)["attempt"] + 1)
        }

        def flushed() -> dict[tuple[str, int], int] | None:
            rows = _history_rows(server, database)
            return rows if expected <= set(rows) else None

        rows = wait_for(flushed, timeout=HISTORY_TIMEOUT, what="every execution written to the history")
        assert {key: n for key, n in rows.items() if n != 1} == {}, "an attempt has more than one row"
        assert set(rows) == expected
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)
        server.drop()


RETENTION_RUN = timedelta(minutes=2)
RETENTION = {"succeeded": 3, "failed": 1}
#: Finished Executions beyond the limits a sample may see: those the flusher has not written yet
#: (it runs every 2 s) plus those it wrote since the last pruning (right after each flush); this
#: job ends about one execution a second, so 2 + 1 of each, and garbage collection's pod lag.
PRUNE_LAG = 3 + 3


class ExecutionNames(Follower):
    """The name of every Execution created in one namespace, recorded by a watch."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        self._namespace = namespace
        self.names: set[str] = set()
        super().__init__(cluster.custom.list_cluster_custom_object, GROUP, VERSION, EXECUTIONS)

    def on_event(self, kind: str, obj: Any) -> None:
        if kind == "ADDED" and obj["metadata"]["namespace"] == self._namespace:
            self.names.add(obj["metadata"]["name"])


def _kept(cluster: KubeCluster, namespace: str) -> dict[str, int]:
    """Finished Executions present, by kind; and pods whose Execution is gone."""
    items = executions(cluster, namespace)
    kinds = {"succeeded": 0, "failed": 0}
    for e in items:
        phase = execution_status(e).get("phase")
        if phase in ("Succeeded", "Dead", "Cancelled"):
            kinds["succeeded" if phase == "Succeeded" else "failed"] += 1
    present = {e["metadata"]["name"] for e in items}
    orphans = [p for p in vigil_pods(cluster, namespace) if p.metadata.labels["vigil.dev/execution-id"] not in present]
    return {**kinds, "orphan pods": len(orphans)}


def collecting_garbage(cluster: KubeCluster, namespace: str) -> None:
    """Until the cluster's garbage collector deletes a dependent whose Vigil owner is gone. On a
    control plane just started, it collects nothing of a custom resource's dependents until its
    discovery has found the CRDs and their monitors have synced (up to half a minute), so pods
    whose Executions retention deleted would be counted as its lag, not Vigil's. (Vigil's CRDs
    are installed together: a ScheduledJob's monitor stands for the Execution's.)"""
    owner = create_job(cluster, namespace, "gc-owner", every="1h", suspend=True, suspendReason="a probe")
    reference = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": "gc-owner",
                 "uid": owner["metadata"]["uid"]}  # fmt: skip
    dependent = cluster.core.create_namespaced_config_map(
        namespace, {"metadata": {"generateName": "gc-dependent-", "ownerReferences": [reference]}}
    )
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gc-owner")

    def collected() -> bool:
        return all(c.metadata.name != dependent.metadata.name for c in cluster.core.list_namespaced_config_map(namespace).items)

    wait_for(collected, timeout=120, what="the garbage collector collecting a ScheduledJob's dependent")


def test_retention_keeps_the_newest_finished_executions_while_the_history_keeps_every_attempt(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    collecting_garbage(cluster, namespace)
    fleet.start()
    fleet.leader()
    created = ExecutionNames(cluster, namespace)
    try:
        create_job(
            cluster, namespace, "churn", every="1s", jitter="0s", command='test $(( $(date +%s) % 3 )) -ne 0',
            retry={"maxAttempts": 1}, retention=RETENTION,
        )  # fmt: skip
        peaks = {"succeeded": 0, "failed": 0}
        end = now() + RETENTION_RUN
        while now() < end:  # sampled throughout the run: the scenario's length, not a wait
            kept = _kept(cluster, namespace)
            for kind in peaks:
                peaks[kind] = max(peaks[kind], kept[kind])
            assert kept["orphan pods"] == 0 or kept["orphan pods"] <= PRUNE_LAG, kept
            time.sleep(1)  # the sampling interval
        assert peaks["succeeded"] <= RETENTION["succeeded"] + PRUNE_LAG, peaks
        assert peaks["failed"] <= RETENTION["failed"] + PRUNE_LAG, peaks

        patch_spec(cluster, namespace, "churn", {"suspend": True, "suspendReason": "end of test"})
        wait_all_executions_finished(cluster, namespace, timeout=60)
        settled = {**RETENTION, "orphan pods": 0}
        wait_for(lambda: _kept(cluster, namespace) == settled, timeout=60, what=f"exactly {settled} left")
        assert len(executions(cluster, namespace)) == sum(RETENTION.values())

        dsn = history_dsn(fleet)
        created.check()
        assert len(created.names) >= RETENTION_RUN.total_seconds() * 0.8, len(created.names)
        def written() -> bool:  # the flusher writes every 2 s: the last executions kept may be on their way
            return all(history_states(dsn, n) for n in created.names)

        wait_for(written, timeout=30, what="every execution's history rows")
    finally:
        created.stop()
