"""vigil.core.queue: what a failure and an expired lease decide, and the worker settings' validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vigil.core.executions import Backoff, RetryPolicy, backoff_cap
from vigil.core.queue import (
    ERROR_MAX_CHARS,
    QueueState,
    after_expiry,
    after_failure,
    bounded_error,
    lease_deadline,
)
from vigil.worker.settings import WorkerSettings

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(backoff=Backoff(initial=timedelta(seconds=1), max=timedelta(seconds=60)))


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "state", "next_attempt"),
    [
        pytest.param(1, 3, QueueState.READY, 2, id="first of three: retried"),
        pytest.param(2, 3, QueueState.READY, 3, id="second of three: retried"),
        pytest.param(3, 3, QueueState.DEAD, 3, id="last: dead letter"),
        pytest.param(1, 1, QueueState.DEAD, 1, id="single attempt: dead letter"),
    ],
)
def test_a_failure_is_retried_until_max_attempts(
    attempt: int, max_attempts: int, state: QueueState, next_attempt: int
) -> None:
    s = after_failure(execution_id="ex-a", attempt=attempt, max_attempts=max_attempts, backoff=POLICY, now=NOW)
    assert (s.state, s.attempt) == (state, next_attempt)
    assert (s.run_after is None) == (state is QueueState.DEAD)


@given(attempt=st.integers(min_value=1, max_value=50), eid=st.text(min_size=1, max_size=20))
def test_the_retry_waits_within_the_cores_backoff_and_every_worker_agrees(attempt: int, eid: str) -> None:
    s = after_failure(execution_id=eid, attempt=attempt, max_attempts=100, backoff=POLICY, now=NOW)
    again = after_failure(execution_id=eid, attempt=attempt, max_attempts=100, backoff=POLICY, now=NOW)
    assert s == again
    assert s.run_after is not None
    assert NOW <= s.run_after <= NOW + backoff_cap(POLICY.backoff, attempt=attempt)


def test_an_expired_lease_is_leasable_at_once_with_the_next_attempt_or_dead() -> None:
    assert after_expiry(attempt=1, max_attempts=2, now=NOW).run_after == NOW
    assert after_expiry(attempt=1, max_attempts=2, now=NOW).attempt == 2
    assert after_expiry(attempt=2, max_attempts=2, now=NOW).state is QueueState.DEAD


def test_lease_deadline_needs_a_positive_lease_and_an_aware_now() -> None:
    assert lease_deadline(NOW, timedelta(seconds=30)) == NOW + timedelta(seconds=30)
    with pytest.raises(ValueError, match="lease"):
        lease_deadline(NOW, timedelta(0))
    with pytest.raises(ValueError, match="naive"):
        lease_deadline(datetime(2026, 12, 1), timedelta(seconds=1))  # noqa: DTZ001 - a naive time on purpose: the call must refuse it


def test_a_long_error_keeps_its_end() -> None:
    text = "x" * 10_000 + "ValueError: the cause"
    kept = bounded_error(text)
    assert len(kept) == ERROR_MAX_CHARS and kept.endswith("the cause")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        pytest.param("concurrency", 0, "concurrency", id="no slots"),
        pytest.param("batch", -1, "batch", id="negative batch"),
        pytest.param("heartbeat", timedelta(seconds=30), "heartbeat", id="heartbeat as long as the lease"),
        pytest.param("lease", timedelta(0), "lease", id="no lease"),
        pytest.param("poll_interval", timedelta(0), "poll_interval", id="no poll interval"),
        pytest.param("ack_batch", 0, "ack_batch", id="no ack batch"),
    ],
)
def test_worker_settings_refuse_what_cannot_work(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WorkerSettings(**{field: value})  # type: ignore[arg-type]  # field and value come from the parameters, typed object; each must be refused


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--queue", "q", "--tasks", "tests.queue.tasks"], "no database", id="no DSN"),
        pytest.param(["--queue", "q", "--tasks", "no_such_module", "--dsn", "x"], "no_such_module", id="unknown module"),
        pytest.param(["--queue", "q", "--tasks", "tests.queue.tasks", "--dsn", "x", "--heartbeat", "40"],
                     "heartbeat", id="heartbeat longer than the lease"),
    ],
)
def test_vigil_worker_refuses_bad_input_with_one_line_and_exit_2(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vigil.__main__ import main

    monkeypatch.delenv("VIGIL_QUEUE_DSN", raising=False)
    assert main(["worker", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
