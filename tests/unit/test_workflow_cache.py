"""The workflow engine's cache and status writer, without an API server.

What the Workflow cache keeps (`vigil.kube.controllers.workflowapi.held`): a workflow that may need a pass
whole (without its write bookkeeping), a finished one whose history is all in the database only
as what its time to live reads; a resync then judges both as a pass over the whole object would
(`WorkflowTtl.due`, `needs_pass`). The informer's resync tells every held object again, to the
resync handler a controller gave. The status writer compares as the model: a status that says
the same is not written, one that differs is written once and goes into the cache.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.core.workflowpass import needs_pass
from vigil.kube.controllers.workflowapi import WorkflowApi, held, kept_whole, workflow_cache
from vigil.kube.controllers.workflowstatus import WorkflowStatusWriter, typed
from vigil.kube.controllers.workflowttl import WorkflowTtl
from vigil.kube.kits.informer import Informer, Key

FINISHED = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def workflow(phase: str, *, mirrored: int, entries: int = 3, ttl: str | None = "1h") -> dict[str, Any]:
    spec: dict[str, Any] = {"steps": [{"id": "hold", "type": "wait", "wait": {"duration": "1s"}}]}
    if ttl is not None:
        spec["ttlAfterFinished"] = ttl
    status: dict[str, Any] = {
        "observedGeneration": 1,
        "phase": phase,
        "definition": {"steps": spec["steps"]},
        "history": [{"seq": n, "event": "Started"} for n in range(entries)],
        "historyMirrored": mirrored,
        "steps": {"hold": {"phase": "Succeeded", "attempts": 1}},
        "conditions": [
            {"type": "Stuck", "status": "False", "reason": "OnTime", "message": "", "observedGeneration": 1,
             "lastTransitionTime": "2026-12-06T11:00:00Z"},
        ],
    }  # fmt: skip
    if phase == "Succeeded":
        status["finishedAt"] = "2026-12-06T12:00:00Z"
    meta = {
        "namespace": "team", "name": "w", "uid": "u1", "resourceVersion": "7", "generation": 1,
        "managedFields": [{"manager": "vigil"}],
    }  # fmt: skip
    return {"metadata": meta, "spec": spec, "status": status}


def edited(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` after a spec change no pass has seen yet."""
    return {**obj, "metadata": {**obj["metadata"], "generation": 2}}


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(workflow("Running", mirrored=0), id="running"),
        pytest.param(workflow("Succeeded", mirrored=1), id="finished-not-all-mirrored"),
        pytest.param(edited(workflow("Succeeded", mirrored=3)), id="finished-spec-changed"),
    ],
)
def test_a_workflow_that_may_need_a_pass_is_held_whole(obj: dict[str, Any]) -> None:
    kept = held(copy.deepcopy(obj))
    assert "managedFields" not in kept["metadata"]
    assert {**kept, "metadata": {}} == {**obj, "metadata": {}}
    assert kept_whole(kept)  # so a pass reads it from the cache, without a GET


def test_a_summary_is_never_taken_for_the_whole() -> None:
    """What a pass would read from the cache instead of the API server must be the whole
    workflow: a summary (its history gone) reads as one, held again as one."""
    kept = held(copy.deepcopy(workflow("Succeeded", mirrored=3)))
    assert "history" not in kept["status"]
    assert not kept_whole(kept)
    assert held(copy.deepcopy(kept)) == kept


@pytest.mark.parametrize("ttl", ["1h", None])
@pytest.mark.parametrize("after", [timedelta(minutes=59), timedelta(hours=1)])
def test_a_finished_mirrored_workflow_is_held_as_its_ttl_and_judged_the_same(ttl: str | None, after: timedelta) -> None:
    obj = workflow("Succeeded", mirrored=3, ttl=ttl)
    kept = held(copy.deepcopy(obj))
    assert "history" not in kept["status"] and "definition" not in kept["status"]
    rule = WorkflowTtl(None, default=timedelta(hours=2))  # no API: `due` makes no call
    now = FINISHED + after
    assert rule.due(kept, now) == rule.due(obj, now)
    assert needs_pass(kept["status"], mirroring=True, expired=False) is False


def test_resync_tells_every_held_object_to_the_resync_handler() -> None:
    cache = workflow_cache(None)
    told: list[tuple[str, Key]] = []
    cache.add_handler(lambda key, obj, deleted: told.append(("change", key)),
                      on_resync=lambda key, obj, deleted: told.append(("resync", key)))  # fmt: skip
    other = Informer(lambda **kw: None, what="x", label_selector="")
    other.add_handler(lambda key, obj, deleted: told.append(("default", key)))
    for name in ("a", "b"):
        obj = workflow("Running", mirrored=0)
        obj["metadata"]["name"] = name
        cache.observe(obj)
        other.observe(obj)
    assert cache.resync() == 2 and other.resync() == 2
    assert sorted(told) == [("default", ("team", "a")), ("default", ("team", "b")),
                            ("resync", ("team", "a")), ("resync", ("team", "b"))]  # fmt: skip


class Writes(WorkflowApi):
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def write_status(self, obj: Any, status: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(status)
        meta = {**obj["metadata"], "resourceVersion": str(int(obj["metadata"]["resourceVersion"]) + 1)}
        return {**obj, "metadata": meta, "status": status}


def test_the_status_writer_writes_a_difference_once_and_the_cache_has_it() -> None:
    api, cache = Writes(), workflow_cache(None)
    writer = WorkflowStatusWriter(api, cache=cache)
    obj = workflow("Running", mirrored=0)
    same = {**obj["status"], "conditions": [dict(reversed(list(obj["status"]["conditions"][0].items())))]}
    assert writer.write(obj, typed(same)) is None  # says what the one read says
    changed = typed({**obj["status"], "historyMirrored": 3})
    written = writer.write(obj, changed)
    assert written is not None and api.sent == [{**obj["status"], "historyMirrored": 3}]
    assert writer.writes == 1
    cached = cache.get("team", "w")
    assert cached is not None and cached["metadata"]["resourceVersion"] == "8"
    assert writer.write(written, changed) is None
