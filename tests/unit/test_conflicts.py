"""The one conflict retry policy (vigil.core.conflicts, vigil.kube.kits.conflicts).

Covers: a step that loses fewer races than the budget is run again, from its own fresh read,
until it writes; one that loses every race is run exactly `CONFLICT_TRIES` times and its last
Conflict is raised; any other error ends the retries at once; a 409 (and only a 409) becomes the
core's Conflict; and no caller in the package passes a budget of its own, so the one named budget
is the only one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

import vigil
from vigil.core.conflicts import CONFLICT_TRIES, retry_on_conflict
from vigil.core.ports import Conflict
from vigil.kube.kits import conflicts as kube_conflicts
from vigil.kube.kits.conflicts import conflict_from

PACKAGE = Path(vigil.__file__).parent


class Contended:
    """A read-decide-write step that loses `losses` races, then writes."""

    def __init__(self, losses: int) -> None:
        self.runs = 0
        self._losses = losses

    def __call__(self) -> str:
        self.runs += 1
        if self.runs <= self._losses:
            raise Conflict(f"lost race {self.runs}")
        return f"written at run {self.runs}"


@pytest.mark.parametrize("losses", [0, 1, CONFLICT_TRIES - 1], ids=["no-race", "one-lost", "all-but-the-last"])
def test_a_step_that_loses_fewer_races_than_the_budget_writes(losses: int) -> None:
    step = Contended(losses)
    assert retry_on_conflict(step) == f"written at run {losses + 1}"
    assert step.runs == losses + 1


def test_a_step_that_loses_every_race_is_run_the_budget_and_raises_its_last_conflict() -> None:
    step = Contended(losses=10 * CONFLICT_TRIES)
    with pytest.raises(Conflict, match=f"lost race {CONFLICT_TRIES}$"):
        retry_on_conflict(step)
    assert step.runs == CONFLICT_TRIES


def test_any_other_error_ends_the_retries_at_once() -> None:
    runs = 0

    def step() -> None:
        nonlocal runs
        runs += 1
        raise LookupError("gone")

    with pytest.raises(LookupError):
        retry_on_conflict(step)
    assert runs == 1


def test_the_adapters_retry_through_the_same_policy() -> None:
    assert kube_conflicts.retry_on_conflict is retry_on_conflict
    assert kube_conflicts.CONFLICT_TRIES == CONFLICT_TRIES


def test_a_409_becomes_a_conflict_saying_what_changed() -> None:
    with pytest.raises(Conflict, match=r"^bucket b-1$"):
        conflict_from(ApiException(status=409, reason="Conflict"), "bucket b-1")
    with pytest.raises(Conflict, match=r"^Conflict$"):
        conflict_from(ApiException(status=409, reason="Conflict"))


@pytest.mark.parametrize("status", [404, 422, 500])
def test_any_other_status_is_left_to_the_caller(status: int) -> None:
    conflict_from(ApiException(status=status, reason="Other"))  # returns: the caller raises it


def test_no_caller_passes_a_budget_of_its_own() -> None:
    own: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "retry_on_conflict"
                and any(keyword.arg == "tries" for keyword in node.keywords)
            ):
                own.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert own == []
