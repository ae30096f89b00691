"""The history checkpoint (vigil.core.checkpoint): old entries leave the status, the fold is unchanged.

Pure. Hypothesis drives random workflows (the orchestrator tests' DAGs and moves), then
checkpoints their histories at random points under random budgets and mirrored counts, and
checks: the checkpoint and the entries left fold into exactly the state of the whole history
(outputs that left are replaced by their digest, nothing else differs); only mirrored entries
leave; the entries left fit the budget whenever enough of them are mirrored; checkpointing
again on top of a checkpoint is the same as once; the state survives its trip through JSON;
the digest chains. Then named cases: outputs over the inline size leave with their digest and
the seq of the entry holding them, and are read back from it only when the digest matches;
nothing moves while the budget holds or nothing is mirrored.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_orchestrator import PROPERTY_SETTINGS, dags, drive
from tests.unit.workflowsim import World, pod
from vigil.core.checkpoint import (
    Budget,
    Checkpoint,
    OutputUnavailable,
    canonical,
    chain,
    compact,
    entry_bytes,
    offloaded_seq,
    output_digest,
    read_back_output,
    resume,
    state_from_data,
    state_to_data,
)
from vigil.core.executions import Backoff, RetryPolicy
from vigil.core.workflow import Definition, StepState, WorkflowState, fold

UID = "0b7c6a52-1f0e-4f4e-9b7e-3a1c2d3e4f50"

budgets = st.builds(
    Budget,
    items=st.integers(2, 40),
    bytes=st.integers(500, 8000),
    inline_output_bytes=st.sampled_from([0, 8, 64, 4096]),
)


def without_offloaded_outputs(state: WorkflowState, like: WorkflowState) -> WorkflowState:
    """``state`` with every output that left ``like`` replaced as it is in ``like``: the digest."""
    copy = state_from_data(state_to_data(state))
    for step_id, step in copy.steps.items():
        if like.steps[step_id].output_offloaded is not None:
            assert like.steps[step_id].output_offloaded == output_digest(step.output)
            step.output, step.output_offloaded = None, like.steps[step_id].output_offloaded
    return copy


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data(), budget=budgets)
def test_a_checkpoint_and_the_entries_left_fold_into_the_whole_historys_state(
    definition: Definition, data: st.DataObject, budget: Budget
) -> None:
    world = World(definition)
    drive(world, data, moves=80)
    history = world.history
    mirrored = data.draw(st.integers(0, len(history)), label="mirrored")
    checkpoint, left = compact(definition, None, history, mirrored=mirrored, budget=budget)
    moved = checkpoint.seq if checkpoint else 0
    assert left == history[moved:] and moved <= mirrored
    whole = fold(definition, history)
    resumed = resume(definition, Checkpoint.from_data(checkpoint.to_data()) if checkpoint else None, left)
    assert without_offloaded_outputs(whole, resumed) == resumed
    if checkpoint is not None:
        assert checkpoint.digest == chain("", history[:moved])
    over = len(left) > budget.items or sum(entry_bytes(r) for r in left) > budget.bytes
    if over:  # only because what remains is not mirrored yet
        assert moved == mirrored


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data(), budget=budgets)
def test_checkpointing_in_two_goes_is_checkpointing_once(
    definition: Definition, data: st.DataObject, budget: Budget
) -> None:
    world = World(definition)
    drive(world, data, moves=80)
    history = world.history
    half = data.draw(st.integers(0, len(history)), label="first pass sees")
    first, left = compact(definition, None, history[:half], mirrored=half, budget=budget)
    second, rest = compact(definition, first, [*left, *history[half:]], mirrored=len(history), budget=budget)
    base = second.seq if second else 0
    assert rest == history[base:]
    if second is not None:
        assert second.digest == chain("", history[:base])
    assert resume(definition, second, rest).phase == fold(definition, history).phase


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data())
def test_the_state_survives_json(definition: Definition, data: st.DataObject) -> None:
    world = World(definition)
    drive(world, data)
    state = world.state
    assert state_from_data(json.loads(canonical(state_to_data(state)))) == state


def retrying() -> Definition:
    retry = RetryPolicy(max_attempts=100, backoff=Backoff(initial=timedelta(seconds=1), max=timedelta(seconds=1)))
    return Definition(UID, (pod("a", retry=retry), pod("b", "a", retry=retry)))


def test_a_large_output_leaves_with_its_digest_and_where_it_is() -> None:
    world = World(retrying())
    big = {"rendition": "x" * 1000}
    world.pod_result("a", output=big)
    output_seq = world.state.steps["a"].output_seq
    assert output_seq is not None and world.history[output_seq].detail["output"] == big
    for _ in range(5):
        world.pod_result("b", ok=False)
        world.run_until_timer()
    budget = Budget(items=4, bytes=100_000, inline_output_bytes=256)
    checkpoint, _ = compact(world.definition, None, world.history, mirrored=len(world.history), budget=budget)
    assert checkpoint is not None
    step = checkpoint.state.steps["a"]
    assert (step.output, step.output_offloaded, step.output_seq) == (None, output_digest(big), output_seq)
    assert "x" * 1000 not in json.dumps(checkpoint.to_data())


def offloaded(big: Any) -> tuple[World, StepState]:
    """A world whose step a's output ``big`` left the checkpointed state."""
    world = World(retrying())
    world.pod_result("a", output=big)
    for _ in range(5):
        world.pod_result("b", ok=False)
        world.run_until_timer()
    budget = Budget(items=4, bytes=100_000, inline_output_bytes=256)
    checkpoint, _ = compact(world.definition, None, world.history, mirrored=len(world.history), budget=budget)
    assert checkpoint is not None
    return world, checkpoint.state.steps["a"]


def test_an_output_that_left_is_read_back_from_its_entry() -> None:
    big = {"rendition": "x" * 1000}
    world, step = offloaded(big)
    seq = offloaded_seq(step)
    assert seq is not None
    assert read_back_output("a", step, world.history[seq].to_data()) == big
    assert offloaded_seq(world.state.steps["a"]) is None  # the whole history's state holds it


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(None, id="no-such-entry"),
        pytest.param({"event": "PodSucceeded"}, id="entry-without-output"),
        pytest.param({"output": {"rendition": "y" * 1000}}, id="output-changed"),
    ],
)
def test_an_output_read_back_must_match_its_digest(entry: dict[str, Any] | None) -> None:
    _, step = offloaded({"rendition": "x" * 1000})
    with pytest.raises(OutputUnavailable, match=r"output of step a \(history entry \d+\): missing or changed"):
        read_back_output("a", step, entry)


@pytest.mark.parametrize(
    ("mirrored", "budget", "moves"),
    [
        pytest.param(10_000, Budget(items=1000, bytes=10**6, inline_output_bytes=256), False, id="within-budget"),
        pytest.param(0, Budget(items=2, bytes=100, inline_output_bytes=256), False, id="nothing-mirrored"),
        pytest.param(10_000, Budget(items=2, bytes=10**6, inline_output_bytes=256), True, id="too-many-entries"),
        pytest.param(10_000, Budget(items=1000, bytes=300, inline_output_bytes=256), True, id="too-many-bytes"),
    ],
)
def test_entries_move_only_when_over_budget_and_mirrored(mirrored: int, budget: Budget, moves: bool) -> None:
    world = World(retrying())
    world.pod_result("a", ok=False)
    world.run_until_timer()
    checkpoint, left = compact(world.definition, None, world.history, mirrored=mirrored, budget=budget)
    assert (checkpoint is not None) is moves
    assert len(left) < len(world.history) if moves else left == world.history


def test_a_checkpoint_of_another_layout_is_refused() -> None:
    state = dataclasses.replace(World(retrying()).state)
    data = Checkpoint(1, "d", state).to_data()
    with pytest.raises(ValueError, match="checkpoint version"):
        Checkpoint.from_data({**data, "v": 99})
    assert Checkpoint.from_data(None) is None
