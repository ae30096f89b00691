"""`kubectl vigil logs` and `describe`'s word on pods, with fake pod and stored-log sources:
a live pod's log is streamed (and not the stored tail); a pod that is gone — or goes before a
byte came — gives the stored tail with a line saying so; no tail, a note that the log could
not be read, or a history that cannot be asked each end with one line and exit 1; the
attempt asked must exist; `describe` names the pod only while it exists, else points at the
stored log.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.unit.test_cli_executions import DAY1, NOW, as_object, failed, fresh
from vigil.cli.errors import BadInput
from vigil.cli.executions import describe_lines
from vigil.cli.logs import EXIT_NO_LOG, Target, latest_attempt, newest, show, target_of_execution
from vigil.cli.operatorapi import HistoryNotShown
from vigil.core.logtail import LogTail
from vigil.model.names import LABEL_ATTEMPT

T0 = datetime(2026, 12, 6, 2, 0, tzinfo=UTC)


class Pods:
    def __init__(self, logs: dict[str, list[bytes]], *, vanish: bool = False) -> None:
        self.logs = logs
        self.vanish = vanish
        self.followed: list[bool] = []

    def container(self, namespace: str, pod: str) -> str | None:
        return "main" if pod in self.logs else None

    def stream(self, namespace: str, pod: str, container: str, *, follow: bool) -> Iterator[bytes]:
        self.followed.append(follow)
        if self.vanish:
            raise ApiException(status=404, reason="Not Found")
        yield from self.logs[pod]


class Stored:
    def __init__(self, tail: LogTail | None = None, *, down: bool = False) -> None:
        self.tail = tail
        self.down = down
        self.asked: list[tuple[str, str, int | None]] = []

    def attempt_log(self, namespace: str, execution: str, *, attempt: int | None = None) -> LogTail | None:
        self.asked.append((namespace, execution, attempt))
        if self.down:
            raise HistoryNotShown("cannot reach the operator's API at http://x: refused")
        return self.tail


def tail(**changes: Any) -> LogTail:
    fields: dict[str, Any] = {
        "execution_id": "ex", "attempt": 2, "namespace": "shop", "job": "nightly", "pod": "ex-2",
        "scheduled_for": T0, "captured_at": T0 + timedelta(minutes=1), "text": "Traceback\nboom\n",
        "truncated": True, "log_bytes": 200_000,
    }  # fmt: skip
    return LogTail(**(fields | changes))


def run(target: Target, pods: Pods, stored: Stored, *, follow: bool = False) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    code = show(target, pods=pods, stored=lambda: stored, follow=follow, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_a_live_pods_log_is_streamed_and_the_store_not_asked() -> None:
    pods, stored = Pods({"ex-2": [b"one\n", b"two\n"]}), Stored(tail())
    code, out, err = run(Target("shop", "ex", 2), pods, stored, follow=True)

    assert (code, out, err) == (0, b"one\ntwo\n", "")
    assert pods.followed == [True] and stored.asked == []


def test_a_gone_pod_gives_the_stored_tail_and_says_so() -> None:
    stored = Stored(tail())
    code, out, err = run(Target("shop", "ex", 2), Pods({}), stored)

    assert (code, out) == (0, b"Traceback\nboom\n")
    assert "pod ex-2 (execution ex, attempt 2) is gone" in err and "the last 15 of its 200000 bytes" in err
    assert stored.asked == [("shop", "ex", 2)]


def test_a_pod_deleted_before_its_log_came_gives_the_stored_tail() -> None:
    code, out, _ = run(Target("shop", "ex", 2), Pods({"ex-2": []}, vanish=True), Stored(tail()))

    assert (code, out) == (0, b"Traceback\nboom\n")


@pytest.mark.parametrize(
    ("stored", "says"),
    [
        pytest.param(Stored(None), "has no pod any more, and no log of it is stored", id="none stored"),
        pytest.param(Stored(tail(text="", note="the log could not be read: timed out")), "could not be read", id="a note"),
        pytest.param(Stored(down=True), "cannot be asked: cannot reach", id="history down"),
    ],
)
def test_no_log_to_show_is_one_line_and_exit_1(stored: Stored, says: str) -> None:
    code, out, err = run(Target("shop", "ex", None), Pods({}), stored)

    assert (code, out) == (EXIT_NO_LOG, b"")
    assert says in err


def test_the_attempt_asked_must_exist_and_defaults_to_the_current_one() -> None:
    ex = failed(fresh(DAY1), at=DAY1)

    assert target_of_execution(ex, attempt=None).attempt == ex.attempt
    with pytest.raises(BadInput, match="attempts 1 to"):
        target_of_execution(ex, attempt=ex.attempt + 1)


def test_a_jobs_newest_execution_is_the_latest_occurrence() -> None:
    older, newer = fresh(DAY1), fresh(DAY1 + timedelta(days=1))
    assert newest([newer, older]) == newer
    assert newest([]) is None


def test_describe_points_at_the_stored_log_once_the_pod_is_gone() -> None:
    ex = failed(fresh(DAY1), at=DAY1)
    obj = as_object(ex, nominal=DAY1)
    pod = f"{ex.execution_id}-{ex.attempt}"

    here = "\n".join(describe_lines(obj, now=NOW, pods=[pod]))
    gone = "\n".join(describe_lines(obj, now=NOW, pods=[]))

    assert f"Pod:           {pod} (kubectl vigil logs {ex.execution_id})" in here.splitlines()
    assert "Pod:           gone" in gone and f"kubectl vigil logs {ex.execution_id} --attempt {ex.attempt}" in gone
    assert pod not in gone.replace(ex.execution_id + " --attempt", "")


def test_a_pod_that_has_no_log_to_give_says_why_when_nothing_is_stored() -> None:
    class Waiting(Pods):
        def stream(self, namespace: str, pod: str, container: str, *, follow: bool) -> Iterator[bytes]:
            error = ApiException(status=400, reason="Bad Request")
            error.body = '{"message": "container \\"main\\" in pod \\"ex-2\\" is waiting to start: ContainerCreating"}'
            raise error

    code, out, err = run(Target("shop", "ex", 2), Waiting({"ex-2": []}), Stored(None))

    assert (code, out) == (EXIT_NO_LOG, b"")
    assert 'the log of pod ex-2 cannot be read (400: container "main" in pod "ex-2" is waiting to start' in err


def test_a_steps_latest_attempt_is_its_greatest_pods() -> None:
    def pod(attempt: str) -> dict[str, Any]:
        return {"metadata": {"labels": {LABEL_ATTEMPT: attempt}}}

    assert latest_attempt({"items": [pod("1"), pod("3"), pod("2"), pod("x")]}) == 3
    assert latest_attempt({"items": []}) is None
