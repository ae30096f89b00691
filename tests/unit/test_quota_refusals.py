"""Quota refusals in the pure core: how a namespace's quota is made, and what a refused launch records.

A namespace's quota is the chart's default (or the namespace's own grant), lowered by its
TaskQueues' `quota`, the smallest winning, never raised by one (its authors are the namespace's
users). A `task:` ScheduledJob's occurrence that the store refuses with QuotaExceeded settles
Failed with reason QuotaExceeded, once, and the other jobs fire on (tests/queue/test_bounded.py
shows the same on real PostgreSQL for the volume tier's own trigger).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.unit.test_trigger import T0, every_job, world
from vigil.core.chain import Fire
from vigil.core.memory import MemoryLauncher
from vigil.core.ports import Launch
from vigil.core.queue import QueueDeclaration, QuotaExceeded, QuotaLimits, namespace_quotas

DEFAULT = QuotaLimits(max_ready_executions=100, max_payload_bytes=1000)


@pytest.mark.parametrize(
    ("declared", "granted", "expected"),
    [
        pytest.param({}, {}, {}, id="no-taskqueue-no-grant: every namespace takes the default"),
        pytest.param({"a/q": QueueDeclaration()}, {}, {"a": DEFAULT}, id="a-taskqueue-without-quota"),
        pytest.param(
            {"a/q": QueueDeclaration(quota=QuotaLimits(max_ready_executions=10))}, {}, {"a": QuotaLimits(10, 1000)},
            id="a-taskqueue-lowers-one-limit",
        ),
        pytest.param(
            {"a/q": QueueDeclaration(quota=QuotaLimits(10**9, 10**9))}, {}, {"a": DEFAULT},
            id="a-taskqueue-cannot-raise",
        ),
        pytest.param(
            {"a/x": QueueDeclaration(quota=QuotaLimits(30, None)), "a/y": QueueDeclaration(quota=QuotaLimits(20, 900))},
            {}, {"a": QuotaLimits(20, 900)}, id="several-taskqueues: the smallest wins, limit by limit",
        ),
        pytest.param(
            {"big/q": QueueDeclaration(quota=QuotaLimits(5000, None))}, {"big": QuotaLimits(10_000, 1000)},
            {"big": QuotaLimits(5000, 1000)}, id="a-grant-is-the-ceiling-a-taskqueue-lowers",
        ),
        pytest.param({}, {"big": QuotaLimits(10_000, 1000)}, {"big": QuotaLimits(10_000, 1000)}, id="a-grant-alone"),
    ],
)
def test_a_namespaces_quota(
    declared: dict[str, QueueDeclaration], granted: dict[str, QuotaLimits], expected: dict[str, QuotaLimits]
) -> None:
    assert namespace_quotas(declared, default=DEFAULT, granted=granted) == expected


class OverQuota(MemoryLauncher):
    """The store refuses every occurrence of the job named `full`: its namespace is at its quota."""

    def launch(self, fire: Fire) -> Launch:
        if fire.job.name != "full":
            return super().launch(fire)
        error = QuotaExceeded("ns", quota="maxReadyExecutions", limit=1, used=1, wanted=1)
        return Launch(created=False, refused=str(error), refused_reason="QuotaExceeded")


def test_an_occurrence_refused_by_the_quota_settles_failed_with_its_reason_and_others_fire() -> None:
    w = world(launcher=OverQuota())
    for name in ("full", "canary"):
        w.add(every_job(name, every=timedelta(minutes=1), window=timedelta(minutes=1)))
    w.run_until(T0 + timedelta(minutes=10), step=timedelta(seconds=20))
    outcomes = w.ledger.outcomes
    failed = {why for (_, job, _n, o), why in outcomes.items() if job == "full" and o == "Failed"}
    assert failed == {"QuotaExceeded"}
    assert sum(1 for (_, job, _n, o) in outcomes if job == "full" and o == "Failed") >= 8  # each once
    assert sum(1 for (_, job, _n, o) in outcomes if job == "canary" and o == "Fired") >= 8
