"""A workflow's folded state as data: the checkpoint that lets old history leave the object.

A Workflow lives in one etcd object, and etcd refuses objects past 1.5 MB. Its history grows
with every attempt (200 steps x 100 attempts, each with a 4 KiB failure message or output, is
tens of megabytes), and a status write that no longer fits fails on every pass: the workflow
would be stuck for good. So the history in the status is bounded, like a write-ahead log that
is checkpointed:

* every entry is mirrored to the history database first (the engine counts them in
  ``historyMirrored``); only mirrored entries may leave the status;
* when the entries in the status pass a budget (count or bytes), the oldest mirrored ones are
  folded into a **checkpoint** — the :class:`WorkflowState` they fold into, as data — and
  removed; the fold goes on from the checkpoint (:func:`resume`), so it is exactly the fold of
  the whole history, and a new operator process rebuilds the same state;
* the checkpoint carries ``seq`` (how many entries it folded: the seq of the first entry left
  in the status) and ``digest``, a SHA-256 chained over those entries' JSON, so the copy in
  the database can be checked against what was folded;
* a step's output larger than a few hundred bytes, once its entry is in the checkpoint, leaves
  the state too: only its SHA-256 stays (``output_offloaded``), and whoever needs the output (a
  dependent step's pod) reads entry ``output_seq`` from the database and checks the digest.

Pure: budgets are passed in; no clock, no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.core.workflow import (
    Compensation,
    Definition,
    Reason,
    Record,
    Refusal,
    StepPhase,
    StepState,
    WorkflowPhase,
    WorkflowState,
    fold,
)

#: The checkpoint layout this module writes; another is refused (ValueError).
CHECKPOINT_VERSION = 1


def canonical(data: Any) -> bytes:
    """The one JSON spelling of ``data`` that digests are taken over."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def entry_bytes(record: Record) -> int:
    """How many bytes ``record`` takes as a history entry (its canonical JSON)."""
    return len(canonical(record.to_data()))


def chain(digest: str, records: Sequence[Record]) -> str:
    """The digest after ``records``: each link is SHA-256(previous digest, entry JSON)."""
    for record in records:
        digest = hashlib.sha256(digest.encode() + canonical(record.to_data())).hexdigest()
    return digest


def output_digest(output: Any) -> str:
    return hashlib.sha256(canonical(output)).hexdigest()


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The first ``seq`` entries of a history, folded; ``digest`` is :func:`chain` over them."""

    seq: int
    digest: str
    state: WorkflowState

    def to_data(self) -> dict[str, Any]:
        return {"v": CHECKPOINT_VERSION, "seq": self.seq, "digest": self.digest, "state": state_to_data(self.state)}

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> Checkpoint | None:
        if not data:
            return None
        if data.get("v") != CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint version {data.get('v')!r} is not {CHECKPOINT_VERSION}")
        return cls(seq=int(data["seq"]), digest=str(data["digest"]), state=state_from_data(data["state"]))


def resume(definition: Definition, checkpoint: Checkpoint | None, history: Sequence[Record]) -> WorkflowState:
    """The state of a workflow whose status holds ``checkpoint`` and then ``history``."""
    return fold(definition, history, start=checkpoint.state if checkpoint else None)


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much history the status keeps before the oldest mirrored entries are checkpointed.

    Past ``items`` entries or ``bytes`` of them, entries are moved out until half of each is
    left (so a checkpoint is not rewritten on every pass); outputs over ``inline_output_bytes``
    leave the checkpointed state.
    """

    items: int
    bytes: int
    inline_output_bytes: int


def compact(
    definition: Definition,
    checkpoint: Checkpoint | None,
    history: Sequence[Record],
    *,
    mirrored: int,
    budget: Budget,
) -> tuple[Checkpoint | None, list[Record]]:
    """Move the oldest entries of ``history`` into the checkpoint when it is over ``budget``.

    Only entries already in the history database (absolute seq below ``mirrored``) move; the
    rest stay however many they are. The returned checkpoint and entries fold into exactly
    the state ``checkpoint`` and ``history`` fold into.
    """
    base = checkpoint.seq if checkpoint else 0
    sizes = [entry_bytes(record) for record in history]
    items, total = len(history), sum(sizes)
    if items <= budget.items and total <= budget.bytes:
        return checkpoint, list(history)
    moved = 0
    while (
        moved < len(history)
        and base + moved < mirrored
        and (items - moved > budget.items // 2 or total > budget.bytes // 2)
    ):
        total -= sizes[moved]
        moved += 1
    if moved == 0:
        return checkpoint, list(history)
    folded = history[:moved]
    state = resume(definition, checkpoint, folded)
    _offload_outputs(state, before=base + moved, inline_bytes=budget.inline_output_bytes)
    digest = chain(checkpoint.digest if checkpoint else "", folded)
    return Checkpoint(base + moved, digest, state), list(history[moved:])


def _offload_outputs(state: WorkflowState, *, before: int, inline_bytes: int) -> None:
    """Outputs of entries below seq ``before`` (all in the database) over ``inline_bytes`` leave."""
    for step in state.steps.values():
        if step.output is None or step.output_seq is None or step.output_seq >= before:
            continue
        if len(canonical(step.output)) > inline_bytes:
            step.output_offloaded = output_digest(step.output)
            step.output = None


# --- outputs read back -----------------------------------------------------------------------


class OutputUnavailable(Exception):
    """A step output that left the status cannot be read back from the history database."""


def offloaded_seq(step: StepState) -> int | None:
    """The seq of the history entry to read a step's output back from, when it left the state;
    None when the state holds it (``step.output``)."""
    return step.output_seq if step.output_offloaded is not None else None


def output_source(step_id: str, step: StepState) -> str:
    """Where a step's output that left the state is, for a message."""
    return f"output of step {step_id} (history entry {step.output_seq})"


def read_back_output(step_id: str, step: StepState, entry: Mapping[str, Any] | None) -> Any:
    """A step's output that left the state, from the data of the history entry it came in
    (:func:`offloaded_seq`; None: the database has no such entry). :class:`OutputUnavailable`
    when it is missing or is not the output whose digest the state kept."""
    output = (entry or {}).get("output")
    if entry is None or output_digest(output) != step.output_offloaded:
        raise OutputUnavailable(f"{output_source(step_id, step)}: missing or changed in the history database")
    return output


# --- the state as data ------------------------------------------------------------------------


def _time(value: datetime | None) -> str | None:
    return format_rfc3339(value) if value is not None else None


def _parse_time(value: Any) -> datetime | None:
    return parse_rfc3339(value) if isinstance(value, str) else None


_T = TypeVar("_T", StepState, Compensation)
_STEP_TIMES = ("started_at", "attempt_started_at", "finished_at", "retry_at", "fire_at", "deadline")
_COMPENSATION_TIMES = ("retry_at", "started_at", "finished_at")


def _dataclass_to_data(obj: Any, times: Sequence[str]) -> dict[str, Any]:
    """The fields of ``obj`` that differ from their defaults, as JSON-safe data."""
    data: dict[str, Any] = {}
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        default = field.default if field.default is not dataclasses.MISSING else None
        if value == default or value is None:
            continue
        if field.name in times:
            value = _time(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Compensation):
            value = _dataclass_to_data(value, _COMPENSATION_TIMES)
        data[field.name] = value
    return data


def _dataclass_from_data(cls: type[_T], data: Mapping[str, Any], times: Sequence[str]) -> _T:
    """The inverse of `_dataclass_to_data`: a step's (or compensation's) state from its data."""
    obj = cls()
    for key, value in data.items():
        if key in times:
            value = _parse_time(value)
        elif key == "phase":
            value = StepPhase(value)
        elif key == "approvers":
            value = tuple(value)
        elif key == "compensation":
            value = _dataclass_from_data(Compensation, value, _COMPENSATION_TIMES)
        setattr(obj, key, value)
    return obj


def state_to_data(state: WorkflowState) -> dict[str, Any]:
    """``state`` as JSON-safe data (:func:`state_from_data` reads it back, equal)."""
    return {
        "phase": str(state.phase),
        "steps": {step_id: _dataclass_to_data(step, _STEP_TIMES) for step_id, step in state.steps.items()},
        "requests": sorted(state.requests),
        "refusals": [dataclasses.asdict(refusal) for refusal in state.refusals],
        "startedAt": _time(state.started_at),
        "finishedAt": _time(state.finished_at),
        "reason": state.reason,
        "cancelRequested": state.cancel_requested,
        "cancelledBy": state.cancelled_by,
        "compensateRequested": state.compensate_requested,
        "successOrder": list(state.success_order),
        "seq": state.seq,
    }


def state_from_data(data: Mapping[str, Any]) -> WorkflowState:
    return WorkflowState(
        phase=WorkflowPhase(data["phase"]),
        steps={step_id: _dataclass_from_data(StepState, step, _STEP_TIMES) for step_id, step in (data.get("steps") or {}).items()},
        requests=set(data.get("requests") or ()),
        refusals=[
            Refusal(**{**refusal, "reason": Reason(refusal["reason"])}) for refusal in data.get("refusals") or ()
        ],
        started_at=_parse_time(data.get("startedAt")),
        finished_at=_parse_time(data.get("finishedAt")),
        reason=str(data.get("reason") or ""),
        cancel_requested=bool(data.get("cancelRequested")),
        cancelled_by=data.get("cancelledBy"),
        compensate_requested=bool(data.get("compensateRequested")),
        success_order=list(data.get("successOrder") or ()),
        seq=int(data.get("seq") or 0),
    )
