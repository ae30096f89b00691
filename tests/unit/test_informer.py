"""What a watch-fed cache keeps of an object (`vigil.kube.kits.informer.slim`): no write bookkeeping,
no copies of the object, everything else equal, a copy of its own, and the caller's object left
as it was; how much of a LIST it holds at once; which objects it holds packed; and a cache that
keeps only identities while telling its handlers the whole object."""

from __future__ import annotations

import copy
import json
import tracemalloc
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from vigil.kube.kits.informer import COPY_ANNOTATIONS, Informer, always, skeleton, slim, unmanaged


def job(name: str) -> dict[str, Any]:
    text = json.dumps({
        "metadata": {
            "name": name, "namespace": "team-a", "resourceVersion": "42",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "annotations": {**dict.fromkeys(COPY_ANNOTATIONS, "{...the whole object...}"), "team": "a"},
        },
        "spec": {"cron": "17 3 * * *", "payload": {"blob": "x" * 500}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Scheduled"}]},
    })  # fmt: skip
    obj: dict[str, Any] = json.loads(text)  # as the API client decodes it: strings of its own
    return obj


def test_slim_drops_the_bookkeeping_keeps_the_rest_and_leaves_the_object_alone() -> None:
    whole = job("a")
    before = copy.deepcopy(whole)
    kept = slim(whole)
    assert whole == before, "the caller's object was changed"
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["annotations"] == {"team": "a"}
    rest = {**before, "metadata": {k: v for k, v in before["metadata"].items() if k not in ("managedFields", "annotations")}}
    assert {**kept, "metadata": {k: v for k, v in kept["metadata"].items() if k != "annotations"}} == rest


def test_the_slimmed_copy_is_the_caches_own_all_the_way_down() -> None:
    whole = job("a")
    kept = slim(whole)
    whole["status"]["conditions"][0]["reason"] = "ChangedByTheCaller"
    whole["spec"]["payload"]["blob"] = "changed"
    assert kept["status"]["conditions"][0]["reason"] == "Scheduled"
    assert kept["spec"]["payload"]["blob"] == "x" * 500

class Pages:
    """A stand-in for the API server's paged LIST (the informer's list function), recording how
    many objects the cache held when each page was asked for. The integration tests run the
    informer against the real API server; this one counts what a real server cannot show."""

    def __init__(self, informer_of: list[Informer], pages: list[list[dict[str, Any]]]) -> None:
        self.informer_of = informer_of
        self.pages = pages
        self.held_when_asked: list[int] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.held_when_asked.append(len(self.informer_of[0]))
        at = int(kwargs.get("_continue") or 0)
        more = {"continue": str(at + 1)} if at + 1 < len(self.pages) else {}
        body = {"metadata": {"resourceVersion": "99", **more}, "items": self.pages[at]}
        return SimpleNamespace(data=json.dumps(body).encode())


def test_a_relist_puts_each_page_into_the_cache_before_reading_the_next() -> None:
    """The API's whole answer (managedFields and all) is never held at once: page by page it is
    slimmed into the cache, and an object the list no longer has is dropped at the end."""
    holder: list[Informer] = []
    pages = Pages(holder, [[job("a"), job("b")], [job("c")], [job("d")]])
    informer = Informer(pages, what="jobs", label_selector="x=y")
    holder.append(informer)
    informer.observe(job("gone"))
    assert informer._relist() == "99"
    assert pages.held_when_asked == [1, 3, 4]
    assert sorted(obj["metadata"]["name"] for obj in informer.items()) == ["a", "b", "c", "d"]
    assert all("managedFields" not in obj["metadata"] for obj in informer.items())
    assert informer.synced.is_set()


def held_bytes(informer: Informer, objects: list[dict[str, Any]]) -> int:
    """What the cache allocates to hold `objects` (tracemalloc: Python's own allocations)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for obj in objects:
            informer.observe(obj)
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_packed_cache_reads_the_same_objects_and_holds_a_fraction_of_the_memory() -> None:
    objects = [job(f"job-{i:05}") for i in range(2000)]
    for i, obj in enumerate(objects):
        obj["metadata"]["uid"] = f"0b7c6a1e-{i:04}-2222-3333-444455556666"
        obj["metadata"]["labels"] = {"team": f"t{i % 7}"}
        obj["spec"]["payload"] = {"date": "2026-01-01"}  # small, as most are: a cache of many small objects
    index = {"team": lambda o: o["metadata"]["labels"]["team"]}
    plain = Informer(lambda **_: None, what="plain", label_selector="", indexes=index)
    packed = Informer(lambda **_: None, what="packed", label_selector="", indexes=index, packed=always)
    plain_bytes, packed_bytes = held_bytes(plain, objects), held_bytes(packed, objects)
    assert packed_bytes < plain_bytes / 2, (packed_bytes, plain_bytes)
    assert packed.get("team-a", "job-00042") == plain.get("team-a", "job-00042") == slim(objects[42])
    assert packed.get("team-a", "job-00042") is not packed.get("team-a", "job-00042")  # the caller's own
    assert sorted(o["metadata"]["name"] for o in packed.by_index("team", "t3")) == sorted(
        o["metadata"]["name"] for o in plain.by_index("team", "t3")
    )
    newer = copy.deepcopy(objects[3])
    newer["metadata"].update(resourceVersion="43", labels={"team": "t0"})
    packed.observe(newer)
    assert "job-00003" not in {o["metadata"]["name"] for o in packed.by_index("team", "t3")}
    assert packed.get("team-a", "job-00003") == slim(newer)
    packed.observe(objects[3])  # older: ignored
    assert packed.get("team-a", "job-00003") == slim(newer)
    packed.forget("team-a", "job-00003")
    assert packed.get("team-a", "job-00003") is None and len(packed) == 1999


def test_a_cache_packs_only_the_objects_its_predicate_picks() -> None:
    """Executions and pods: the finished ones are packed, the ones in flight stay dicts (read
    many times a second in a burst, they are never decoded)."""
    finished, running = job("done"), job("busy")
    finished["status"]["phase"], running["status"]["phase"] = "Succeeded", "Running"
    cache = Informer(lambda **_: None, what="partly", label_selector="",
                     packed=lambda o: o["status"].get("phase") == "Succeeded")  # fmt: skip
    cache.observe(finished)
    cache.observe(running)
    assert cache.get("team-a", "busy") is cache.get("team-a", "busy")  # held as a dict
    assert cache.get("team-a", "done") is not cache.get("team-a", "done")  # decoded on each read
    assert cache.get("team-a", "done") == slim(finished) and cache.get("team-a", "busy") == slim(running)
    running["metadata"]["resourceVersion"], running["status"]["phase"] = "43", "Succeeded"
    cache.observe(running)  # it finished: packed from now on
    assert cache.get("team-a", "busy") is not cache.get("team-a", "busy")


def test_a_skeleton_cache_keeps_identities_and_tells_its_handlers_the_whole_object() -> None:
    """Workflows: the engine keeps the bodies of those in flight its own way, so the cache keeps
    each one's identity and version only, and tells the handlers the object without its
    managedFields; a deletion found by a relist is told too, and an older version is not."""
    holder: list[Informer] = []
    first, second = job("a"), job("b")
    pages = Pages(holder, [[first, second]])
    cache = Informer(pages, what="workflows", label_selector="", transform=skeleton, announce=unmanaged)
    holder.append(cache)
    told: list[tuple[str, dict[str, Any], bool]] = []
    cache.add_handler(lambda key, obj, deleted: told.append((key[1], obj, deleted)))
    cache._relist()
    assert [(name, deleted) for name, _, deleted in told] == [("a", False), ("b", False)]
    assert told[0][1]["spec"] == first["spec"] and "managedFields" not in told[0][1]["metadata"]
    assert cache.get("team-a", "a") == {"metadata": {"namespace": "team-a", "name": "a", "resourceVersion": "42"}}
    told.clear()
    pages.pages = [[first]]  # b was deleted while no watch ran
    cache._relist()
    assert [(name, deleted) for name, _, deleted in told] == [("a", False), ("b", True)]
    told.clear()
    older = job("a")
    older["metadata"]["resourceVersion"] = "41"
    cache._put(older, announce=True)
    assert told == []


def test_an_object_created_while_the_cache_lists_is_kept_and_its_watch_event_not_ignored() -> None:
    """A new leader fires before its Execution cache has listed: the create's answer reaches the
    cache (`observe`) after the API server took the list's snapshot, so the list lacks it. The
    relist must not drop it as deleted (nor remember it as deleted, which would make the watch's
    ADDED look like a late answer): it stays, and the watch's event for it is applied. An object
    the list lacks and that is no newer than the list is gone."""
    holder: list[Informer] = []
    made_meanwhile = job("made-while-listing")
    made_meanwhile["metadata"]["resourceVersion"] = "100"  # after the list's snapshot at 99
    stale = job("deleted-before-the-list")  # resourceVersion 42

    class CreateDuringList(Pages):
        def __call__(self, **kwargs: Any) -> Any:
            holder[0].observe(made_meanwhile)
            return super().__call__(**kwargs)

    informer = Informer(CreateDuringList(holder, [[job("a")]]), what="executions", label_selector="x=y")
    holder.append(informer)
    informer.observe(stale)
    informer._relist()
    assert sorted(obj["metadata"]["name"] for obj in informer.items()) == ["a", "made-while-listing"]
    updated = job("made-while-listing")
    updated["metadata"]["resourceVersion"] = "101"
    updated["status"] = {"phase": "Succeeded"}
    informer._put(updated, announce=True)  # the watch from version 99 brings it
    assert (informer.get("team-a", "made-while-listing") or {}).get("status") == {"phase": "Succeeded"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.sampled_from(["x", "y", "z", None]), st.booleans()), max_size=40))
def test_an_index_answers_what_a_scan_of_the_cache_would(steps: list[tuple[str, str | None, bool]]) -> None:
    """Whatever objects come, change their indexed value and go, each index value answers exactly
    the objects that have it now (the index keeps one key per value as the key itself, several as a
    set, and must move between the two both ways)."""
    informer = Informer(Pages([], [[]]), what="things", label_selector="", indexes={"by": lambda o: o.get("by")})
    version = 0
    for name, value, remove in steps:
        version += 1
        if remove:
            informer.forget("team-a", name)
            continue
        obj = job(name)
        obj["metadata"]["resourceVersion"] = str(version)
        obj["by"] = value
        informer._put(obj, announce=False)
    for value in ("x", "y", "z"):
        expected = sorted(o["metadata"]["name"] for o in informer.items() if o.get("by") == value)
        assert sorted(o["metadata"]["name"] for o in informer.by_index("by", value)) == expected
