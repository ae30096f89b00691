"""The BucketStore contract, run against every implementation.

The in-memory twin (`vigil.core.memory.MemoryBucketStore`) and the API-server
adapter (`vigil.kube.stores.buckets.KubeBucketStore`, ScheduleBucket objects in a
namespace of the test's own, read from the API server or, as the leader reads them, from its
watch-fed cache) must agree on: idempotent inserts by key; the
minute an entry lands in; reads confined to one minute; overflow of a hot minute
into more shards; conditional marks (a stale version is a Conflict) where the
first marker written for a key stays; which minutes are pending; complete(), conditional on
the version read; the minutes inserted into, said once; and remove().
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from vigil.core.buckets import MINUTE, Bucket, BucketEntry, Mark, Outcome, entry_key
from vigil.core.memory import MemoryBucketStore
from vigil.core.ports import BucketStore, Conflict
from vigil.model import GROUP, VERSION
from vigil.model.names import SCHEDULE_BUCKETS

SHARDS = 2
MAX_PER_BUCKET = 5
MINUTE_0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
SCHEDULE_HASH = "abc123"
JOB_UID = "6f1c2a9e-0000-4000-8000-000000000001"
OTHER_UID = "6f1c2a9e-0000-4000-8000-000000000002"
MARKED_AT = datetime(2026, 5, 1, 12, 5, 0, 125_000, tzinfo=UTC)  # millisecond precision survives every store


def make_store(request: pytest.FixtureRequest, **limits: int) -> BucketStore:
    if request.param == "memory":
        return MemoryBucketStore(shards=SHARDS, **limits)
    from vigil.kube.stores.buckets import KubeBucketStore, bucket_cache

    cluster = request.getfixturevalue("cluster")
    namespace = request.getfixturevalue("namespace")
    if request.param == "kube":
        return KubeBucketStore(cluster.api, namespace=namespace, shards=SHARDS, **limits)
    # The leader's store: reads from its watch-fed cache of the pending buckets.
    cache = bucket_cache(cluster.api, namespace=namespace)
    stop = threading.Event()
    threading.Thread(target=cache.run, args=(stop,), daemon=True).start()
    request.addfinalizer(stop.set)
    assert cache.synced.wait(30), "the bucket cache never listed"
    return KubeBucketStore(cluster.api, namespace=namespace, shards=SHARDS, cache=cache, **limits)


IMPLEMENTATIONS = [
    "memory",
    pytest.param("kube", marks=pytest.mark.integration),
    pytest.param("kube-cached", marks=pytest.mark.integration),
]


@pytest.fixture(params=IMPLEMENTATIONS)
def store(request: pytest.FixtureRequest) -> BucketStore:
    return make_store(request, max_per_bucket=MAX_PER_BUCKET)


#: Entries of a job whose namespace and name take the longest names Kubernetes allows.
LONG_NAMES = {"namespace": "n" * 63, "name": "j" * 253}


@pytest.fixture(params=IMPLEMENTATIONS)
def three_long_entries_per_bucket(request: pytest.FixtureRequest) -> BucketStore:
    """A store whose byte budget holds three long-named entries, and whose count limit never binds."""
    weight = dataclasses.replace(entry(MINUTE_0), **LONG_NAMES).weight
    return make_store(request, max_per_bucket=1000, max_bytes=3 * weight)


def entry(nominal: datetime, *, uid: str = JOB_UID, fire_at: datetime | None = None) -> BucketEntry:
    return BucketEntry(
        key=entry_key(uid, nominal, SCHEDULE_HASH),
        namespace="team-a",
        name=f"job-{uid[-1]}",
        uid=uid,
        generation=3,
        schedule_hash=SCHEDULE_HASH,
        nominal=nominal,
        fire_at=fire_at or nominal,
    )


def fired(execution_id: str) -> Mark:
    return Mark(outcome=Outcome.FIRED, at=MARKED_AT, execution_id=execution_id)


def keys(buckets: list[Bucket]) -> set[str]:
    return {e.key for b in buckets for e in b.entries}


def only_bucket(store: BucketStore, minute: datetime) -> Bucket:
    buckets = store.read_minute(minute)
    assert len(buckets) == 1, buckets
    return buckets[0]


def insert_all(store: BucketStore, *entries: BucketEntry) -> list[str]:
    return [store.insert(e) for e in entries]


def test_insert_is_idempotent_by_key(store: BucketStore) -> None:
    occurrence = entry(MINUTE_0 + timedelta(seconds=30))

    first = store.insert(occurrence)
    second = store.insert(occurrence)

    assert first == second
    bucket = only_bucket(store, MINUTE_0)
    assert bucket.name == first
    assert bucket.entries == (occurrence,)


def test_an_entry_lands_in_the_minute_of_its_fire_at_not_its_nominal(store: BucketStore) -> None:
    jittered = entry(MINUTE_0 + timedelta(seconds=50), fire_at=MINUTE_0 + timedelta(minutes=1, seconds=10.25))

    store.insert(jittered)

    assert store.read_minute(MINUTE_0) == []
    bucket = only_bucket(store, MINUTE_0 + MINUTE)
    assert bucket.minute == MINUTE_0 + MINUTE
    assert bucket.entries == (jittered,)


def test_read_minute_returns_only_that_minutes_buckets(store: BucketStore) -> None:
    last_ms_before = entry(MINUTE_0 - timedelta(milliseconds=1))
    first_instant = entry(MINUTE_0, uid=OTHER_UID)
    last_ms = entry(MINUTE_0 + timedelta(seconds=59.999))
    next_minute = entry(MINUTE_0 + MINUTE, uid=OTHER_UID)
    insert_all(store, last_ms_before, first_instant, last_ms, next_minute)

    buckets = store.read_minute(MINUTE_0)

    assert keys(buckets) == {first_instant.key, last_ms.key}
    assert {b.minute for b in buckets} == {MINUTE_0}
    assert keys(store.read_minute(MINUTE_0 - MINUTE)) == {last_ms_before.key}
    assert keys(store.read_minute(MINUTE_0 + MINUTE)) == {next_minute.key}


def test_a_hot_minute_overflows_into_more_shards_and_reads_back_whole(store: BucketStore) -> None:
    # One `every: 2s` job: 23 occurrences due in one minute, all with the same home shard.
    hot = [entry(MINUTE_0 + timedelta(seconds=2 * i)) for i in range(23)]

    names = insert_all(store, *hot)

    buckets = store.read_minute(MINUTE_0)
    assert keys(buckets) == {e.key for e in hot}
    assert sum(len(b.entries) for b in buckets) == len(hot)
    assert len(buckets) == math.ceil(len(hot) / MAX_PER_BUCKET) == len(set(names))
    assert sorted((len(b.entries) for b in buckets), reverse=True) == [5, 5, 5, 5, 3]
    assert max(int(b.name.rsplit("-", 1)[1]) for b in buckets) >= SHARDS  # past the configured shards


def test_a_bucket_is_budgeted_in_bytes_not_only_in_entries(three_long_entries_per_bucket: BucketStore) -> None:
    store = three_long_entries_per_bucket
    long = [dataclasses.replace(entry(MINUTE_0 + timedelta(seconds=i)), **LONG_NAMES) for i in range(7)]

    insert_all(store, *long)

    buckets = store.read_minute(MINUTE_0)
    assert keys(buckets) == {e.key for e in long}
    assert sorted((len(b.entries) for b in buckets), reverse=True) == [3, 3, 1]
    assert all(sum(e.weight for e in b.entries) <= 3 * long[0].weight for b in buckets)


def test_mark_with_the_current_version_succeeds_and_a_stale_version_conflicts(store: BucketStore) -> None:
    first, second = entry(MINUTE_0), entry(MINUTE_0 + timedelta(seconds=1))
    insert_all(store, first, second)
    read = only_bucket(store, MINUTE_0)

    marked = store.mark(read.name, {first.key: fired("exec-1")}, version=read.version)

    assert marked.marks == {first.key: fired("exec-1")}
    assert marked.version != read.version
    assert only_bucket(store, MINUTE_0).marks == {first.key: fired("exec-1")}
    with pytest.raises(Conflict):
        store.mark(read.name, {second.key: fired("exec-2")}, version=read.version)
    assert only_bucket(store, MINUTE_0).marks == {first.key: fired("exec-1")}


def test_an_insert_after_the_read_makes_that_version_stale(store: BucketStore) -> None:
    early = entry(MINUTE_0)
    store.insert(early)
    read = only_bucket(store, MINUTE_0)
    store.insert(entry(MINUTE_0 + timedelta(seconds=5)))

    with pytest.raises(Conflict):
        store.mark(read.name, {early.key: fired("exec-1")}, version=read.version)


def test_a_marker_is_never_overwritten_the_first_writer_wins(store: BucketStore) -> None:
    occurrence, other = entry(MINUTE_0), entry(MINUTE_0 + timedelta(seconds=1))
    insert_all(store, occurrence, other)
    read = only_bucket(store, MINUTE_0)
    store.mark(read.name, {occurrence.key: fired("exec-first")}, version=read.version)

    # A second writer that re-read (fresh version) and marks the same key, plus one more.
    fresh = only_bucket(store, MINUTE_0)
    missed = Mark(outcome=Outcome.MISSED, at=MARKED_AT, reason="second writer")
    result = store.mark(fresh.name, {occurrence.key: missed, other.key: fired("exec-other")}, version=fresh.version)

    expected = {occurrence.key: fired("exec-first"), other.key: fired("exec-other")}
    assert result.marks == expected
    assert only_bucket(store, MINUTE_0).marks == expected


def test_pending_minutes_lists_past_minutes_with_unmarked_entries_oldest_first(store: BucketStore) -> None:
    until = MINUTE_0 + 2 * MINUTE
    unmarked = entry(MINUTE_0)
    fully_marked = entry(MINUTE_0 + MINUTE)
    half_marked = [entry(until), entry(until + timedelta(seconds=1))]
    future = entry(until + MINUTE)
    insert_all(store, unmarked, fully_marked, *half_marked, future)
    for minute, done in ((MINUTE_0 + MINUTE, fully_marked), (until, half_marked[0])):
        bucket = only_bucket(store, minute)
        store.mark(bucket.name, {done.key: fired(f"exec-{minute:%M}")}, version=bucket.version)

    assert store.pending_minutes(until=until) == [MINUTE_0, until]
    assert store.pending_minutes(until=until + MINUTE) == [MINUTE_0, until, until + MINUTE]
    assert store.pending_minutes(until=MINUTE_0 - MINUTE) == []


def test_a_completed_minute_is_no_longer_pending_until_a_new_entry_arrives(store: BucketStore) -> None:
    done = entry(MINUTE_0)
    store.insert(done)
    bucket = only_bucket(store, MINUTE_0)
    store.mark(bucket.name, {done.key: fired("exec-1")}, version=bucket.version)

    marked = only_bucket(store, MINUTE_0)
    store.complete(marked.name, version=marked.version)

    assert store.pending_minutes(until=MINUTE_0 + MINUTE) == []
    store.inserted_minutes()
    late = entry(MINUTE_0 + timedelta(seconds=30))
    assert store.insert(late) == bucket.name
    assert store.pending_minutes(until=MINUTE_0 + MINUTE) == [MINUTE_0]
    assert store.inserted_minutes() == [MINUTE_0]  # said once
    assert store.inserted_minutes() == []


def test_a_completion_on_a_stale_version_is_a_conflict_and_the_late_entry_stays_pending(store: BucketStore) -> None:
    done = entry(MINUTE_0)
    store.insert(done)
    bucket = only_bucket(store, MINUTE_0)
    marked = store.mark(bucket.name, {done.key: fired("exec-1")}, version=bucket.version)
    late = entry(MINUTE_0 + timedelta(seconds=50))
    assert store.insert(late) == bucket.name  # lands after the trigger read the bucket all marked

    with pytest.raises(Conflict):
        store.complete(marked.name, version=marked.version)

    assert store.pending_minutes(until=MINUTE_0 + MINUTE) == [MINUTE_0]
    assert [e.key for e in only_bucket(store, MINUTE_0).pending()] == [late.key]


def test_remove_deletes_exactly_one_entry(store: BucketStore) -> None:
    kept, removed = entry(MINUTE_0), entry(MINUTE_0 + timedelta(seconds=10))
    name = insert_all(store, kept, removed)[1]

    store.remove(name, removed.key)

    assert only_bucket(store, MINUTE_0).entries == (kept,)
    store.remove(name, removed.key)  # removing what is gone is a no-op
    assert only_bucket(store, MINUTE_0).entries == (kept,)


def test_concurrent_inserts_each_land_once_and_report_their_bucket(store: BucketStore) -> None:
    # Eight threads, as the trigger's workers insert next occurrences in a hot minute (the Kubernetes
    # store then writes them together); some entries are inserted twice.
    uids = [f"0000-{i:04d}-{i % 7}" for i in range(40)]
    entries = [entry(MINUTE_0 + timedelta(seconds=i % 60), uid=uid) for i, uid in enumerate(uids)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        names = list(pool.map(store.insert, [*entries, *entries[:10]]))
    buckets = store.read_minute(MINUTE_0)
    assert sorted(e.key for b in buckets for e in b.entries) == sorted(e.key for e in entries)
    where = {e.key: b.name for b in buckets for e in b.entries}
    assert names == [where[e.key] for e in [*entries, *entries[:10]]]
    assert all(len(b.entries) <= MAX_PER_BUCKET for b in buckets)


@pytest.fixture(params=[p for p in IMPLEMENTATIONS if p != "memory"])
def group_committing(request: pytest.FixtureRequest) -> BucketStore:
    return make_store(request, max_per_bucket=MAX_PER_BUCKET)


def test_the_writer_keeps_nothing_of_a_batch_once_written(group_committing: BucketStore) -> None:
    # At onboarding a batch is thousands of entries, and each caller's future holds its own
    # callback (the job's pending status): the writer must not keep the last batch while it waits.
    from vigil.kube.stores.buckets import KubeBucketStore

    assert isinstance(group_committing, KubeBucketStore)
    futures = [group_committing.insert_later(entry(MINUTE_0 + timedelta(seconds=i), uid=f"0000-{i}")) for i in range(6)]
    assert len({f.result(timeout=60) for f in futures}) >= 1
    refs = [weakref.ref(f) for f in futures]
    del futures
    gc.collect()
    assert [r for r in refs if r() is not None] == []


@pytest.mark.integration
def test_an_insert_read_from_a_stale_cache_conflicts_and_lands_beside_the_other_writers_entry(
    request: pytest.FixtureRequest,
) -> None:
    """The leader's store reads a bucket from its cache before writing it; a cache left behind by
    another writer's change (its watch never runs here) makes the conditional write a conflict, and
    the retry reads the API server: every entry lands once, none overwritten."""
    from tests.integration.conftest import KubeCluster
    from vigil.kube.stores.buckets import KubeBucketStore, bucket_cache

    cluster: KubeCluster = request.getfixturevalue("cluster")
    namespace: str = request.getfixturevalue("namespace")
    cache = bucket_cache(cluster.api, namespace=namespace)
    cache._relist()  # listed once and never followed: it learns only the store's own writes
    cached = KubeBucketStore(cluster.api, namespace=namespace, shards=1, max_per_bucket=MAX_PER_BUCKET, cache=cache)
    other = KubeBucketStore(cluster.api, namespace=namespace, shards=1, max_per_bucket=MAX_PER_BUCKET)
    first, second, third = (entry(MINUTE_0 + timedelta(seconds=s)) for s in (0, 10, 20))
    name = cached.insert(first)
    assert other.insert(second) == name  # the cache does not know of it
    assert cached.insert(third) == name
    assert keys(cached.read_minute(MINUTE_0)) == {first.key, second.key, third.key}
    assert keys(other.read_minute(MINUTE_0)) == {first.key, second.key, third.key}


@pytest.mark.integration
def test_the_cached_store_parses_a_bucket_once_per_version(request: pytest.FixtureRequest) -> None:
    """The trigger reads the current minute on every pass: from the cache a bucket is parsed once
    per resourceVersion (the same Bucket comes back), and once written (a marker) it is read anew;
    only the buckets of the last minutes read are kept."""
    from vigil.kube.stores.buckets import PARSED_MINUTES, KubeBucketStore, bucket_cache

    cluster = request.getfixturevalue("cluster")
    namespace: str = request.getfixturevalue("namespace")
    cache = bucket_cache(cluster.api, namespace=namespace)
    cache._relist()  # listed once and never followed: it learns the store's own writes
    cached = KubeBucketStore(cluster.api, namespace=namespace, shards=1, max_per_bucket=MAX_PER_BUCKET, cache=cache)
    first, second = entry(MINUTE_0), entry(MINUTE_0 + timedelta(seconds=10))
    insert_all(cached, first, second)
    read = only_bucket(cached, MINUTE_0)
    assert only_bucket(cached, MINUTE_0) is read  # the same version: parsed once
    marked = cached.mark(read.name, {first.key: fired("exec-1")}, version=read.version)
    again = only_bucket(cached, MINUTE_0)
    assert again is not read and again.version == marked.version != read.version
    assert again.marks == {first.key: fired("exec-1")} and keys([again]) == {first.key, second.key}
    later = [MINUTE_0 + m * MINUTE for m in range(1, PARSED_MINUTES + 2)]  # more minutes than are kept
    for minute in later:
        cached.insert(entry(minute))
        only_bucket(cached, minute)
    assert list(cached._parsed) == later[-PARSED_MINUTES:]  # kept: the buckets of the minutes read last


@pytest.mark.integration
def test_what_the_api_server_tracks_of_a_bucket_does_not_grow_with_its_entries(request: pytest.FixtureRequest) -> None:
    """Every write of a bucket makes the API server rebuild its managedFields. Tracked per entry
    and per marker, a bucket of 250 entries carried 75 kB of them (a mark took 2.5 times as long
    as without); the list and the markers are each one field, so 60 entries marked one at a time
    leave what they left after the first."""
    from kubernetes import client

    from tests.integration.conftest import KubeCluster
    from vigil.kube.stores.buckets import KubeBucketStore

    cluster: KubeCluster = request.getfixturevalue("cluster")
    namespace: str = request.getfixturevalue("namespace")
    store = KubeBucketStore(cluster.api, namespace=namespace, shards=1, max_per_bucket=1000)
    custom = client.CustomObjectsApi(cluster.api)

    def tracked() -> int:
        [obj] = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, SCHEDULE_BUCKETS)["items"]
        return len(json.dumps(obj["metadata"].get("managedFields")))

    entries = [entry(MINUTE_0 + timedelta(milliseconds=i), uid=f"{JOB_UID[:-3]}{i:03}") for i in range(60)]
    store.insert(entries[0])
    bucket = only_bucket(store, MINUTE_0)
    bucket = store.mark(bucket.name, {entries[0].key: fired("ex-0")}, version=bucket.version)
    after_one = tracked()
    for i, e in enumerate(entries[1:], start=1):
        store.insert(e)
        bucket = only_bucket(store, MINUTE_0)
        bucket = store.mark(bucket.name, {e.key: fired(f"ex-{i}")}, version=bucket.version)
    assert len(bucket.marks) == 60
    assert tracked() == after_one
