"""`kubectl vigil timeline` of a deleted workflow: its mirrored history folded, and the client that reads it.

The pure part: a workflow's history entries from the history database, folded over the
definition entry 0 carries, give the same step table and `--events` list as the Workflow object
did (its details in the API server's order, whatever order the database keeps keys in) — the same states when the object had checkpointed its older entries, and the details of
those entries too (the database has them all) —
under a first line saying it is FROM history and why: deleted after it finished (its
ttlAfterFinished), or before. A history without a definition (mirrored before it was kept)
lists its entries with `--events` and says why it has no steps; an unreadable entry is
BadInput naming the workflow. The client: the operator's real HTTP API (the history and the
reviews stood in for, as in test_httpapi_workflow_history.py) paged to the end, a name without
history as None, and a refusal, an API without the route and a history with a gap each one line.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.test_cli_workflows import UID, VIDEO, encoded, history, object_of, pinned, world_of
from tests.unit.test_httpapi_workflow_history import History, api, reviewer
from tests.unit.workflowsim import World
from vigil.api.router import ApiServer
from vigil.api.transport import Serving
from vigil.cli.errors import BadInput
from vigil.cli.operatorapi import (
    HistoryNotShown,
    OperatorApi,
    WorkflowHistory,
    workflow_history_from_json,
)
from vigil.cli.timeline import events_lines, mirrored_lines, timeline_lines
from vigil.core.checkpoint import Budget, compact
from vigil.core.history import MAX_PAGE_SIZE
from vigil.core.workflow import Event


def finished(world: World) -> World:
    """encode (one retry), review approved by alice, cool waited out: Succeeded."""
    encoded(world)
    world.request(Event.APPROVED, "review", request="r-1", by="alice", byGroups=["editors"], reason="ok")
    world.tick(2)
    world.run_until_timer()
    assert world.state.finished
    return world


def mirrored(world: World) -> WorkflowHistory:
    """What the operator mirrored of the world's workflow: every entry, its keys in an order of the
    database's own (here: reversed), and its definition on entry 0."""
    entries = [dict(reversed(entry.items())) for entry in history(world)]
    return WorkflowHistory(uid=UID, definition=pinned(VIDEO), entries=entries)


def served(world: World) -> dict[str, Any]:
    """The Workflow as the API server served it: every object's keys sorted."""
    loaded: dict[str, Any] = json.loads(json.dumps(object_of(world, VIDEO), sort_keys=True))
    return loaded


def shown(found: WorkflowHistory, *, events: bool = False, now: Any) -> list[str]:
    return mirrored_lines(found, namespace="media", name="video-1", events=events, now=now)


# --- folding the mirrored history -----------------------------------------------------------------


def test_a_workflow_deleted_after_it_finished_shows_the_steps_it_showed_under_a_from_history_line() -> None:
    world = finished(world_of(VIDEO))
    now = world.now + timedelta(hours=3)

    lines = shown(mirrored(world), now=now)

    count = len(world.history)
    assert lines[0] == f"FROM history: the Workflow was deleted (ttlAfterFinished); {count} history entries from the history database"
    assert lines[1:] == timeline_lines(served(world), now=now)
    assert lines[1].startswith("workflow media/video-1: Succeeded, started 2026-11-01T12:00:00Z")
    assert [line.split()[:3] for line in lines[4:]] == [
        ["encode", "pod", "Succeeded"], ["review", "approval", "Succeeded"], ["cool", "wait", "Succeeded"],
    ]  # fmt: skip
    assert "approved by alice: ok" in lines[5]


def test_its_events_are_every_entry_as_they_were_listed() -> None:
    world = finished(world_of(VIDEO))

    lines = shown(mirrored(world), events=True, now=world.now)

    assert lines[0].startswith("FROM history: the Workflow was deleted (ttlAfterFinished)")
    assert lines[1:] == events_lines(served(world), now=world.now)
    assert "by=alice byGroups=[\"editors\"] reason=ok request=r-1" in "\n".join(lines)  # as the API server ordered them
    assert len(lines) == 1 + 3 + len(world.history)


def test_the_whole_history_folds_into_the_state_the_object_resumed_from_its_checkpoint() -> None:
    world = finished(world_of(VIDEO))
    obj = served(world)
    checkpoint, kept = compact(
        world_of(VIDEO).definition, None, world.history, mirrored=len(world.history),
        budget=Budget(items=4, bytes=1 << 20, inline_output_bytes=256),
    )  # fmt: skip
    assert checkpoint is not None and checkpoint.seq > 0
    obj["status"] = {**obj["status"], "checkpoint": checkpoint.to_data(), "history": [r.to_data() for r in kept]}

    live, gone = timeline_lines(obj, now=world.now), shown(mirrored(world), now=world.now)

    assert f"{checkpoint.seq} older history entries in the history database" in live[0]
    assert [row.split()[:6] for row in gone[4:]] == [row.split()[:6] for row in live[3:]]
    # And the details of the records that left the status are there again.
    assert "last failure (attempt 1): ExitCode1" in gone[4] and "last failure" not in live[3]


def test_a_workflow_deleted_before_it_finished_says_so() -> None:
    world = world_of(VIDEO)
    encoded(world)

    lines = shown(mirrored(world), now=world.now)

    assert lines[0] == (
        f"FROM history: the Workflow was deleted before it finished; {len(world.history)} history entries "
        "from the history database (any recorded after them are lost)"
    )
    assert lines[1].startswith("workflow media/video-1: Running")


def test_without_its_definition_the_entries_are_listed_and_the_steps_are_not() -> None:
    world = finished(world_of(VIDEO))
    found = dataclasses.replace(mirrored(world), definition=None)

    steps, events = shown(found, now=world.now), shown(found, events=True, now=world.now)

    why = "workflow media/video-1: its definition was not kept (mirrored before the history database kept definitions)"
    assert steps[0] == f"FROM history: the Workflow was deleted; {len(world.history)} history entries from the history database"
    assert steps[1] == f"{why}, so its steps cannot be folded; --events lists its entries" and len(steps) == 2
    assert events[1] == f"{why}, so its steps cannot be folded"
    assert events[2:] == events_lines(served(world), now=world.now)[1:]


def test_an_unreadable_entry_or_definition_is_bad_input_naming_the_workflow() -> None:
    world = finished(world_of(VIDEO))
    found = mirrored(world)
    bad_entry = dataclasses.replace(found, entries=[*found.entries, {"event": "Exploded", "at": "2026-11-01T12:00:00Z"}])
    bad_definition = dataclasses.replace(found, definition={"steps": [{"type": "pod"}]})

    for bad in (bad_entry, bad_definition):
        with pytest.raises(BadInput, match=r'the history of workflow "video-1" in namespace "media" cannot be read'):
            shown(bad, now=world.now)


# --- the pages as the API answers them --------------------------------------------------------------


def page(*seqs: int, **fields: Any) -> dict[str, Any]:
    return {"uid": "uid-1", "entries": [{"seq": seq, "entry": {"seq": seq}} for seq in seqs], **fields}


def test_pages_join_into_one_history_and_a_gap_or_a_bad_definition_is_refused() -> None:
    found = workflow_history_from_json([page(0, 1, definition={"steps": []}, **{"continue": "x"}), page(2)])
    assert found == WorkflowHistory("uid-1", {"steps": []}, [{"seq": 0}, {"seq": 1}, {"seq": 2}])
    assert workflow_history_from_json([page(0)]).definition is None
    with pytest.raises(ValueError, match="entry 2 is missing"):
        workflow_history_from_json([page(0, 1), page(3)])
    with pytest.raises(ValueError, match="not a JSON object"):
        workflow_history_from_json([page(0, definition=["steps"])])


# --- the client against the real HTTP API -------------------------------------------------------------


@pytest.fixture
def serve() -> Iterator[Any]:
    """Serve an ApiServer on a free port; its URL."""
    servers: list[Serving] = []

    def start(server: ApiServer) -> str:
        servers.append(server.serve(0))
        return f"http://127.0.0.1:{servers[-1].server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_the_whole_history_is_read_page_after_page(serve: Any) -> None:
    rows = History(2 * MAX_PAGE_SIZE + 3)
    url = serve(api(rows, reviewer()))

    found = OperatorApi(url, "t-alice").workflow_history("ns", "etl")

    assert found is not None and found.uid == "uid-1" and found.definition == rows.rows[0].definition
    assert found.entries == [dict(row.data) for row in rows.rows]
    assert [(limit, after is not None) for _, _, limit, after in rows.asked] == [(MAX_PAGE_SIZE, False), (MAX_PAGE_SIZE, True), (MAX_PAGE_SIZE, True)]


def test_a_name_without_history_is_none_and_a_refusal_is_one_line(serve: Any) -> None:
    url = serve(api(History(3), reviewer()))

    assert OperatorApi(url, "t-alice").workflow_history("ns", "missing") is None
    with pytest.raises(HistoryNotShown) as refused:
        OperatorApi(url, "t-bob").workflow_history("ns", "etl")
    assert str(refused.value) == (
        f"the operator's API at {url} answered 403: bob may not get workflows.vigil.dev etl in namespace ns"
    )
    with pytest.raises(HistoryNotShown, match="did not accept your token"):
        OperatorApi(url, "forged").workflow_history("ns", "etl")


def test_an_api_without_the_route_is_named_so_not_taken_for_no_history(serve: Any) -> None:
    url = serve(ApiServer(leader=lambda: None, find_execution=lambda _id: None, timeline=lambda _id: []))

    with pytest.raises(HistoryNotShown, match=r"does not serve /namespaces/ns/workflows/etl/history"):
        OperatorApi(url, "t-alice").workflow_history("ns", "etl")


def test_an_entry_missing_from_the_pages_is_one_line(serve: Any) -> None:
    rows = History(4)
    rows.rows = [row for row in rows.rows if row.seq != 2]
    url = serve(api(rows, reviewer()))

    with pytest.raises(HistoryNotShown, match="cannot read: entry 2 is missing"):
        OperatorApi(url, "t-alice").workflow_history("ns", "etl")
