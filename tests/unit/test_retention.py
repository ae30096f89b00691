"""Retention: each job keeps its newest finished executions by kind; nothing unwritten or active goes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vigil.core.executions import Phase
from vigil.core.retention import Finished, Limits, to_delete

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def ex(name: str, phase: Phase, minute: int | None, *, written: bool = True) -> Finished:
    ended = None if minute is None else T0 + timedelta(minutes=minute)
    return Finished(name=name, phase=phase, ended=ended, history_written=written)


@pytest.mark.parametrize(
    ("executions", "limits", "deleted"),
    [
        pytest.param([ex(f"s{i}", Phase.SUCCEEDED, i) for i in range(5)], Limits(3, 1), ["s0", "s1"], id="oldest successes go"),
        pytest.param(
            [ex("d0", Phase.DEAD, 0), ex("c1", Phase.CANCELLED, 1), ex("d2", Phase.DEAD, 2)],
            Limits(3, 1), ["c1", "d0"], id="dead and cancelled share the failed limit",
        ),
        pytest.param(
            [ex("s0", Phase.SUCCEEDED, 0, written=False), *(ex(f"s{i}", Phase.SUCCEEDED, i) for i in range(1, 5))],
            Limits(1, 1), ["s1", "s2", "s3"], id="an unwritten history stays, however old",
        ),
        pytest.param(
            [ex("r", Phase.RUNNING, None), ex("b", Phase.BACKOFF, None), ex("s", Phase.SUCCEEDED, 1)],
            Limits(0, 0), ["s"], id="active executions never go",
        ),
        pytest.param([ex("s", Phase.SUCCEEDED, 1)], Limits(0, 0), ["s"], id="zero keeps none"),
    ],
)
def test_retention(executions: list[Finished], limits: Limits, deleted: list[str]) -> None:
    assert to_delete(executions, limits) == deleted


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        Limits(succeeded=-1)


phases = st.sampled_from([Phase.SUCCEEDED, Phase.DEAD, Phase.CANCELLED, Phase.RUNNING, Phase.READY])
finished = st.builds(
    lambda i, p, m, w: ex(f"e{i}", p, None if not p.terminal else m, written=w),
    st.integers(0, 10_000), phases, st.integers(0, 1000), st.booleans(),
)


@given(st.lists(finished, unique_by=lambda e: e.name, max_size=40), st.integers(0, 5), st.integers(0, 5))
def test_what_stays_is_the_newest_of_each_kind_plus_everything_unwritten_or_active(
    executions: list[Finished], keep_ok: int, keep_failed: int
) -> None:
    gone = set(to_delete(executions, Limits(keep_ok, keep_failed)))
    by_name = {e.name: e for e in executions}
    assert all(by_name[n].phase.terminal and by_name[n].history_written for n in gone)
    for kind, keep in ((True, keep_ok), (False, keep_failed)):
        same = [e for e in executions if e.phase.terminal and (e.phase is Phase.SUCCEEDED) is kind]
        newest = sorted(same, key=lambda e: (e.ended, e.name), reverse=True)[:keep]
        assert not gone & {e.name for e in newest}, "one of the newest was deleted"
        assert {e.name for e in same if e.history_written} - {e.name for e in newest} <= gone
