"""The execution state machine: transitions, retries with backoff, dead letters, concurrency.

Covers each transition as a named scenario (success, retry, dead letter, cancellation, manual
retry), the transitions that must be refused, the idempotence of repeated observations, the
backoff delay (full jitter within its cap, whole milliseconds, deterministic, pinned against
drift, spread over the whole range), the concurrency-policy decision, the dispatch views, and
the stored form (camelCase, millisecond RFC 3339). Property tests drive random sequences of
transitions and check that the execution id never changes, attempts never exceed the policy
(plus manual retries), and every state survives a round trip through its stored form.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vigil.core.dispatch import Priority, Running
from vigil.core.executions import (
    MESSAGE_MAX_CHARS,
    AttemptOutcome,
    AttemptResult,
    Backoff,
    ConcurrencyPolicy,
    Execution,
    ExecutionReason,
    InvalidTransition,
    Phase,
    RetryPolicy,
    as_candidate,
    backoff_cap,
    backoff_delay,
    cancel,
    concurrency,
    execution_from_dict,
    execution_to_dict,
    finish,
    format_time,
    is_retry_due,
    manual_retry,
    new_execution,
    next_wakeup,
    retry_due,
    running_counts,
    start,
)
from vigil.core.ids import ExecutionId

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
EX_ID = ExecutionId("ex-aaaaaaaaaaaaaaaa")
POLICY = RetryPolicy()  # 3 attempts, backoff 10 s x2 up to 10 m
SPREAD_SAMPLE = 2_000


def fresh(
    execution_id: ExecutionId = EX_ID,
    *,
    namespace: str = "team-a",
    priority: Priority = Priority.NORMAL,
    now: datetime = T0,
) -> Execution:
    return new_execution(
        execution_id,
        namespace=namespace,
        job="nightly",
        scheduled_for=T0,
        now=now,
        priority=priority,
    )


def running(ex: Execution | None = None, *, at: datetime = T0) -> Execution:
    ex = ex or fresh()
    return start(ex, pod=f"{ex.execution_id}-{ex.attempt}", now=at)


def failed(attempt: int, reason: str = "ExitCode3", *, message: str = "") -> AttemptResult:
    return AttemptResult(
        attempt=attempt, outcome=AttemptOutcome.FAILED, reason=reason, message=message, exit_code=3
    )


def succeeded(attempt: int) -> AttemptResult:
    return AttemptResult(
        attempt=attempt, outcome=AttemptOutcome.SUCCEEDED, reason="Completed", exit_code=0
    )


def fail_once(ex: Execution, *, at: datetime) -> Execution:
    """Run the current attempt and fail it at `at`."""
    return finish(running(ex, at=at), failed(ex.attempt), policy=POLICY, now=at)


def dead(ex: Execution | None = None) -> Execution:
    """Fail every allowed attempt, retrying as soon as each is due."""
    ex = ex or fresh()
    at = T0
    while ex.phase is not Phase.DEAD:
        ex = fail_once(ex, at=at)
        if ex.phase is Phase.BACKOFF:
            assert ex.retry_at is not None
            at = ex.retry_at
            ex = retry_due(ex, now=at)
    return ex


# --- transitions ------------------------------------------------------------------------------


def test_new_execution_is_ready_for_its_first_attempt() -> None:
    ex = fresh(now=T0 + timedelta(microseconds=1_234_567))
    assert (ex.phase, ex.attempt, ex.reason) == (Phase.READY, 1, ExecutionReason.SCHEDULED)
    assert ex.ready_since == T0 + timedelta(seconds=1, milliseconds=234)  # kept to the millisecond
    assert ex.attempts == () and ex.retry_at is None and ex.pod is None


def test_start_records_the_pod_and_the_start() -> None:
    ex = running(at=T0 + SECOND)
    assert (ex.phase, ex.pod, ex.started_at, ex.reason) == (
        Phase.RUNNING,
        f"{EX_ID}-1",
        T0 + SECOND,
        ExecutionReason.STARTED,
    )


def test_success_ends_the_execution() -> None:
    ex = finish(running(), succeeded(1), policy=POLICY, now=T0 + 5 * SECOND)
    assert (ex.phase, ex.reason, ex.finished_at) == (
        Phase.SUCCEEDED,
        "Completed",
        T0 + 5 * SECOND,
    )
    assert [r.outcome for r in ex.attempts] == [AttemptOutcome.SUCCEEDED]


def test_failure_with_attempts_left_waits_in_backoff_for_the_next_attempt() -> None:
    now = T0 + 5 * SECOND
    ex = finish(running(), failed(1, "OOMKilled"), policy=POLICY, now=now)
    assert (ex.phase, ex.attempt, ex.reason) == (Phase.BACKOFF, 2, "OOMKilled")
    assert ex.retry_at == now + backoff_delay(POLICY, attempt=1, execution_id=EX_ID)
    assert now <= ex.retry_at <= now + POLICY.backoff.initial
    assert ex.pod is None and ex.started_at is None and ex.finished_at is None


def test_retry_becomes_ready_when_due_and_counts_its_age_from_the_retry_time() -> None:
    waiting = fail_once(fresh(), at=T0)
    assert waiting.retry_at is not None
    noticed = waiting.retry_at + timedelta(minutes=3)  # e.g. the operator was restarting
    assert not is_retry_due(waiting, waiting.retry_at - timedelta(milliseconds=1))
    ready = retry_due(waiting, now=noticed)
    assert (ready.phase, ready.attempt, ready.ready_since, ready.retry_at) == (
        Phase.READY,
        2,
        waiting.retry_at,
        None,
    )
    assert ready.reason == ExecutionReason.RETRY_DUE


def test_retry_before_its_time_is_refused() -> None:
    waiting = fail_once(fresh(), at=T0)
    assert waiting.retry_at is not None
    with pytest.raises(InvalidTransition, match="retry is due at"):
        retry_due(waiting, now=waiting.retry_at - timedelta(milliseconds=1))


def test_last_failure_dead_letters_the_execution() -> None:
    ex = dead()
    assert (ex.phase, ex.attempt, ex.reason) == (Phase.DEAD, POLICY.max_attempts, "ExitCode3")
    assert [r.attempt for r in ex.attempts] == [1, 2, 3]
    assert ex.finished_at is not None and ex.retry_at is None


def test_a_single_attempt_policy_dead_letters_on_the_first_failure() -> None:
    ex = finish(running(), failed(1), policy=RetryPolicy(max_attempts=1), now=T0)
    assert (ex.phase, ex.attempt) == (Phase.DEAD, 1)


def test_a_cancelled_outcome_is_never_retried() -> None:
    result = AttemptResult(attempt=1, outcome=AttemptOutcome.CANCELLED, reason="Replaced")
    ex = finish(running(), result, policy=POLICY, now=T0)
    assert (ex.phase, ex.reason, ex.retry_at) == (Phase.CANCELLED, "Replaced", None)


def test_a_pod_that_ends_before_its_start_was_recorded_still_counts() -> None:
    ex = finish(fresh(), failed(1), policy=POLICY, now=T0)
    assert (ex.phase, ex.attempt) == (Phase.BACKOFF, 2)


def test_finish_fills_in_the_finish_time_and_bounds_the_message() -> None:
    long = "x" * (MESSAGE_MAX_CHARS * 2)
    ex = finish(running(), failed(1, message=long), policy=POLICY, now=T0 + SECOND)
    kept = ex.attempts[0]
    assert kept.finished_at == T0 + SECOND and kept.started_at == T0
    assert len(kept.message) == MESSAGE_MAX_CHARS and kept.message.endswith("…")


@pytest.mark.parametrize(
    "phase_of",
    [
        pytest.param(lambda: fresh(), id="ready"),
        pytest.param(lambda: running(), id="running"),
        pytest.param(lambda: fail_once(fresh(), at=T0), id="backoff"),
    ],
)
def test_cancel_from_every_waiting_or_running_phase(phase_of: Callable[[], Execution]) -> None:
    ex = phase_of()
    cancelled = cancel(ex, reason=ExecutionReason.CANCELLED_BY_USER, now=T0 + SECOND)
    assert (cancelled.phase, cancelled.reason, cancelled.finished_at, cancelled.retry_at) == (
        Phase.CANCELLED,
        "CancelledByUser",
        T0 + SECOND,
        None,
    )
    assert cancel(cancelled, reason="Again", now=T0 + 2 * SECOND) == cancelled


def test_cancelling_a_running_attempt_records_it_so_its_pod_ending_later_changes_nothing() -> None:
    ex = cancel(running(), reason=ExecutionReason.REPLACED, now=T0 + SECOND, message="newer run")
    assert ex.attempts == (
        AttemptResult(
            attempt=1,
            outcome=AttemptOutcome.CANCELLED,
            reason="Replaced",
            message="newer run",
            started_at=T0,
            finished_at=T0 + SECOND,
        ),
    )
    assert finish(ex, failed(1, "PodDeleted"), policy=POLICY, now=T0 + 9 * SECOND) == ex


def test_manual_retry_gives_a_dead_letter_exactly_one_more_attempt() -> None:
    letter = dead()
    again = manual_retry(letter, now=T0 + timedelta(hours=1))
    assert (again.phase, again.attempt, again.reason, again.execution_id) == (
        Phase.READY,
        4,
        ExecutionReason.MANUAL_RETRY,
        EX_ID,
    )
    assert again.ready_since == T0 + timedelta(hours=1) and again.finished_at is None
    assert fail_once(again, at=T0 + timedelta(hours=2)).phase is Phase.DEAD
    assert (
        finish(running(again), succeeded(4), policy=POLICY, now=T0 + timedelta(hours=2)).phase
        is Phase.SUCCEEDED
    )


def test_repeated_observations_change_nothing() -> None:
    ex = running()
    assert start(ex, pod=f"{EX_ID}-1", now=T0 + SECOND) == ex
    backoff = finish(ex, failed(1), policy=POLICY, now=T0)
    assert finish(backoff, failed(1), policy=POLICY, now=T0 + SECOND) == backoff
    assert finish(backoff, succeeded(1), policy=POLICY, now=T0 + SECOND) == backoff  # first wins


@pytest.mark.parametrize(
    ("make", "transition", "message"),
    [
        pytest.param(
            lambda: running(),
            lambda ex: start(ex, pod="another-pod", now=T0),
            "cannot start an execution in phase Running",
            id="start-with-another-pod",
        ),
        pytest.param(
            lambda: fail_once(fresh(), at=T0),
            lambda ex: start(ex, pod="p", now=T0),
            "cannot start an execution in phase Backoff",
            id="start-during-backoff",
        ),
        pytest.param(
            lambda: fail_once(fresh(), at=T0),
            lambda ex: finish(ex, failed(2), policy=POLICY, now=T0),
            "cannot finish an execution in phase Backoff",
            id="finish-an-attempt-not-started",
        ),
        pytest.param(
            lambda: running(),
            lambda ex: finish(ex, failed(2), policy=POLICY, now=T0),
            "attempt 2 does not match the current attempt 1",
            id="finish-another-attempt",
        ),
        pytest.param(
            lambda: running(),
            lambda ex: retry_due(ex, now=T0),
            "cannot retry_due an execution in phase Running",
            id="retry-while-running",
        ),
        pytest.param(
            lambda: finish(running(), succeeded(1), policy=POLICY, now=T0),
            lambda ex: cancel(ex, reason="X", now=T0),
            "cannot cancel an execution in phase Succeeded",
            id="cancel-a-success",
        ),
        pytest.param(
            lambda: finish(running(), succeeded(1), policy=POLICY, now=T0),
            lambda ex: manual_retry(ex, now=T0),
            "cannot manual_retry an execution in phase Succeeded",
            id="retry-a-success",
        ),
        pytest.param(
            lambda: fresh(),
            lambda ex: manual_retry(ex, now=T0),
            "cannot manual_retry an execution in phase Ready",
            id="retry-a-ready-one",
        ),
        pytest.param(
            lambda: fresh(),
            lambda ex: start(ex, pod="", now=T0),
            "needs the pod's name",
            id="start-without-a-pod",
        ),
    ],
)
def test_invalid_transitions_are_refused_clearly(
    make: Callable[[], Execution], transition: Callable[[Execution], Execution], message: str
) -> None:
    ex = make()
    with pytest.raises(ValueError, match=message):
        transition(ex)


def test_next_wakeup_is_the_earliest_retry() -> None:
    first = fail_once(fresh(ExecutionId("ex-one")), at=T0)
    second = fail_once(fresh(ExecutionId("ex-two")), at=T0 + timedelta(minutes=1))
    assert next_wakeup([second, running(), first]) == first.retry_at
    assert next_wakeup([fresh(), running()]) is None
    assert next_wakeup([]) is None


def test_an_execution_refuses_inconsistent_fields() -> None:
    with pytest.raises(ValueError, match="retry_at is set exactly in phase Backoff"):
        Execution(
            execution_id=EX_ID,
            namespace="n",
            job="j",
            priority=Priority.LOW,
            scheduled_for=T0,
            attempt=1,
            phase=Phase.READY,
            ready_since=T0,
            reason="",
            retry_at=T0,
        )
    with pytest.raises(ValueError, match="attempt must be at least 1"):
        Execution(
            execution_id=EX_ID,
            namespace="n",
            job="j",
            priority=Priority.LOW,
            scheduled_for=T0,
            attempt=0,
            phase=Phase.READY,
            ready_since=T0,
            reason="",
        )


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        start(fresh(), pod="p", now=datetime(2026, 1, 1))  # noqa: DTZ001 - a naive time on purpose: the call must refuse it


# --- backoff ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "cap"),
    [
        pytest.param(1, timedelta(seconds=10), id="after-first"),
        pytest.param(2, timedelta(seconds=20), id="after-second"),
        pytest.param(6, timedelta(seconds=320), id="after-sixth"),
        pytest.param(7, timedelta(minutes=10), id="capped-at-max"),
        pytest.param(100_000, timedelta(minutes=10), id="far-past-any-float"),
    ],
)
def test_backoff_cap_grows_exponentially_up_to_max(attempt: int, cap: timedelta) -> None:
    assert backoff_cap(POLICY.backoff, attempt=attempt) == cap


def test_backoff_delay_is_pinned_so_it_never_drifts_between_versions() -> None:
    # sha256("ex-pinned|1")[:8] as a fraction of the 10,001 whole milliseconds in [0, 10 s].
    assert backoff_delay(POLICY, attempt=1, execution_id="ex-pinned") == timedelta(milliseconds=719)
    assert backoff_delay(POLICY, attempt=7, execution_id="ex-pinned") == timedelta(
        minutes=8, seconds=26, milliseconds=834
    )
    digest = hashlib.sha256(b"ex-pinned|1").digest()
    assert (int.from_bytes(digest[:8], "big") * 10_001) >> 64 == 719


def test_backoff_delay_uses_the_whole_range_full_jitter() -> None:
    cap = backoff_cap(POLICY.backoff, attempt=1)
    shares = [
        backoff_delay(POLICY, attempt=1, execution_id=f"ex-{index}") / cap
        for index in range(SPREAD_SAMPLE)
    ]
    assert min(shares) < 0.01 and max(shares) > 0.99
    assert 0.45 < statistics.fmean(shares) < 0.55


def test_backoff_needs_a_positive_attempt() -> None:
    with pytest.raises(ValueError, match="attempt must be at least 1"):
        backoff_delay(POLICY, attempt=0, execution_id="x")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(
            lambda: Backoff(initial=timedelta(seconds=-1)), "must not be negative", id="negative"
        ),
        pytest.param(lambda: Backoff(factor=0.5), "factor must be at least 1", id="shrinking"),
        pytest.param(
            lambda: Backoff(initial=timedelta(minutes=5), max=timedelta(minutes=1)),
            "must not be shorter than initial",
            id="max-below-initial",
        ),
        pytest.param(
            lambda: RetryPolicy(max_attempts=0), "max_attempts must be at least 1", id="no-attempts"
        ),
    ],
)
def test_bad_policies_are_refused(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


backoffs = st.builds(
    lambda initial_ms, factor, extra_ms: Backoff(
        initial=timedelta(milliseconds=initial_ms),
        factor=factor,
        max=timedelta(milliseconds=initial_ms + extra_ms),
    ),
    st.integers(0, 600_000),
    st.floats(1.0, 10.0),
    st.integers(0, 3_600_000),
)


@settings(max_examples=300, deadline=None)
@given(
    backoff=backoffs,
    attempt=st.integers(1, 200),
    execution_id=st.text(min_size=1, max_size=40),
)
def test_backoff_delay_is_within_its_cap_whole_milliseconds_and_deterministic(
    backoff: Backoff, attempt: int, execution_id: str
) -> None:
    policy = RetryPolicy(backoff=backoff)
    delay = backoff_delay(policy, attempt=attempt, execution_id=execution_id)
    assert delay == backoff_delay(policy, attempt=attempt, execution_id=execution_id)
    assert delay % timedelta(milliseconds=1) == timedelta(0)
    try:
        grown = backoff.initial.total_seconds() * backoff.factor ** (attempt - 1)
    except OverflowError:
        grown = float("inf")
    assert 0 <= delay.total_seconds() <= min(backoff.max.total_seconds(), grown)


# --- concurrency ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "active", "start_new", "replace", "reason"),
    [
        pytest.param("Forbid", [], True, (), "NoActiveExecution", id="nothing-active"),
        pytest.param(
            "Forbid", ["succeeded"], True, (), "NoActiveExecution", id="only-finished-ones"
        ),
        pytest.param("Allow", ["running"], True, (), "ConcurrencyAllow", id="allow"),
        pytest.param("Forbid", ["running"], False, (), "ConcurrencyForbid", id="forbid-running"),
        pytest.param(
            "Forbid", ["backoff"], False, (), "ConcurrencyForbid", id="forbid-waiting-to-retry"
        ),
        pytest.param(
            "Replace",
            ["running", "backoff", "succeeded"],
            True,
            ("ex-running", "ex-backoff"),
            "ConcurrencyReplace",
            id="replace-every-one-in-flight",
        ),
    ],
)
def test_concurrency_policy(
    policy: str, active: list[str], start_new: bool, replace: tuple[str, ...], reason: str
) -> None:
    states = {
        "running": lambda: running(fresh(ExecutionId("ex-running"))),
        "backoff": lambda: fail_once(fresh(ExecutionId("ex-backoff")), at=T0),
        "succeeded": lambda: finish(
            running(fresh(ExecutionId("ex-done"))), succeeded(1), policy=POLICY, now=T0
        ),
    }
    decision = concurrency(ConcurrencyPolicy(policy), [states[name]() for name in active])
    assert (decision.start, decision.replace, decision.reason) == (start_new, replace, reason)


@pytest.mark.parametrize("policy", list(ConcurrencyPolicy))
def test_a_repeated_firing_never_skips_or_cancels_itself(policy: ConcurrencyPolicy) -> None:
    itself = running()
    decision = concurrency(policy, [itself], incoming=itself.execution_id)
    assert (decision.start, decision.replace, decision.reason) == (
        True,
        (),
        ExecutionReason.ALREADY_CREATED,
    )


def test_unknown_concurrency_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="Sometimes"):
        concurrency("Sometimes", [])  # type: ignore[arg-type]  # the wrong type on purpose: it must be refused


# --- dispatch views ---------------------------------------------------------------------------


def test_dispatch_views() -> None:
    high = fresh(ExecutionId("ex-high"), namespace="b", priority=Priority.HIGH)
    ready = fresh(ExecutionId("ex-ready"), now=T0 + SECOND)
    executions = [running(high), running(fresh(ExecutionId("ex-low"))), ready, dead()]
    assert running_counts(executions) == Running(
        total=2, high=1, by_namespace={"b": 1, "team-a": 1}
    )
    candidate = as_candidate(ready)
    assert (candidate.execution_id, candidate.namespace, candidate.priority) == (
        "ex-ready",
        "team-a",
        Priority.NORMAL,
    )
    assert candidate.ready_since == T0 + SECOND
    with pytest.raises(InvalidTransition, match="as_candidate"):
        as_candidate(running())


# --- stored form ------------------------------------------------------------------------------


def test_stored_form_is_camel_case_with_millisecond_times() -> None:
    waiting = finish(
        running(at=T0 + SECOND), failed(1, message="boom"), policy=POLICY, now=T0 + 2 * SECOND
    )
    assert execution_to_dict(waiting) == {
        "executionId": EX_ID,
        "namespace": "team-a",
        "job": "nightly",
        "priority": "normal",
        "scheduledFor": "2026-03-01T12:00:00Z",
        "attempt": 2,
        "phase": "Backoff",
        "readySince": "2026-03-01T12:00:00Z",
        "reason": "ExitCode3",
        "retryAt": format_time(waiting.retry_at or T0),
        "attempts": [
            {
                "attempt": 1,
                "outcome": "Failed",
                "reason": "ExitCode3",
                "message": "boom",
                "exitCode": 3,
                "startedAt": "2026-03-01T12:00:01Z",
                "finishedAt": "2026-03-01T12:00:02Z",
            }
        ],
    }


def test_stored_form_holds_plain_strings_not_enums() -> None:
    stored = execution_to_dict(cancel(running(), reason=ExecutionReason.REPLACED, now=T0))
    assert stored["reason"] == "Replaced" and type(stored["reason"]) is str
    assert type(stored["attempts"][0]["reason"]) is str and type(stored["phase"]) is str


def test_time_format_keeps_milliseconds_only_when_there_are_some() -> None:
    assert format_time(T0) == "2026-03-01T12:00:00Z"
    assert format_time(T0 + timedelta(microseconds=250_999)) == "2026-03-01T12:00:00.250Z"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"phase": "Sleeping"}, "'Sleeping' is not a valid Phase", id="phase"),
        pytest.param({"attempt": "2"}, "attempt must be an integer", id="attempt-type"),
        pytest.param({"readySince": "yesterday"}, "readySince: invalid RFC 3339", id="time"),
        pytest.param({"priority": "urgent"}, "'urgent' is not a valid Priority", id="priority"),
        pytest.param({"job": None}, "job must be a string", id="missing-job"),
    ],
)
def test_a_malformed_stored_execution_is_refused_naming_the_key(
    change: dict[str, object], message: str
) -> None:
    data = {**execution_to_dict(fresh()), **change}
    with pytest.raises(ValueError, match=message):
        execution_from_dict(data)


# --- properties over random histories ---------------------------------------------------------

OPERATIONS = ("start", "succeed", "fail", "cancelled", "retry", "cancel", "manual", "wait")


def apply(ex: Execution, operation: str, *, now: datetime, policy: RetryPolicy) -> Execution:
    """One observation or command; InvalidTransition when the phase does not allow it."""
    if operation == "start":
        return start(ex, pod=f"{ex.execution_id}-{ex.attempt}", now=now)
    if operation in ("succeed", "fail", "cancelled"):
        outcome = {
            "succeed": AttemptOutcome.SUCCEEDED,
            "fail": AttemptOutcome.FAILED,
            "cancelled": AttemptOutcome.CANCELLED,
        }[operation]
        result = AttemptResult(attempt=ex.attempt, outcome=outcome, reason="Observed")
        return finish(ex, result, policy=policy, now=now)
    if operation == "retry":
        return retry_due(ex, now=now)
    if operation == "cancel":
        return cancel(ex, reason=ExecutionReason.CANCELLED_BY_USER, now=now)
    if operation == "manual":
        return manual_retry(ex, now=now)
    return ex


@settings(max_examples=300, deadline=None)
@given(
    max_attempts=st.integers(1, 5),
    steps=st.lists(
        st.tuples(st.sampled_from(OPERATIONS), st.integers(0, 900_000)), min_size=1, max_size=40
    ),
    priority=st.sampled_from(list(Priority)),
)
def test_random_histories_keep_the_invariants(
    max_attempts: int, steps: list[tuple[str, int]], priority: Priority
) -> None:
    policy = RetryPolicy(max_attempts=max_attempts)
    ex = fresh(priority=priority)
    now, manual_retries = T0, 0
    for operation, wait_ms in steps:
        now += timedelta(milliseconds=wait_ms)
        try:
            after = apply(ex, operation, now=now, policy=policy)
        except InvalidTransition:
            continue
        manual_retries += operation == "manual"
        assert after.execution_id == EX_ID
        assert after.attempt <= max_attempts + manual_retries
        assert [r.attempt for r in after.attempts] == sorted({r.attempt for r in after.attempts})
        if after.phase is Phase.BACKOFF and ex.phase is not Phase.BACKOFF:  # just failed
            assert after.retry_at is not None and after.retry_at >= now
        assert execution_from_dict(execution_to_dict(after)) == after
        assert execution_to_dict(execution_from_dict(execution_to_dict(after))) == (
            execution_to_dict(after)
        )
        ex = after
