"""The schedule store on the API server: ScheduleBucket objects, one per (minute, shard).

Reads are by minute label, so a trigger pass fetches only the minutes it
visits. A bucket holds at most `max_per_bucket` entries and `BUCKET_BYTE_BUDGET`
bytes of them (with their future markers), far below etcd's 1.5 MB object
limit; a hot minute overflows into more shards. Inserts are read-modify-write on the spec with the object's
resourceVersion (a conflict re-reads and tries again), group-committed: the
inserts that wait while one is written go together in the next write, one read
(from the cache, on the leader) and one write per bucket touched, the buckets written side by side. One writer thread makes every bucket insert; callers
queue an entry and get a future (`insert_later`), so a caller that does not block
a thread while it waits — the job controller, which goes on to the next new job and
writes the status when the future is done — lets thousands of first occurrences go in with a few writes. Fired markers live in the
status subresource and are written with a merge patch that carries the
resourceVersion read — the API server refuses it with 409 if anything changed in
between, which is what makes marking single-fire without any lock. A merge patch
would replace a marker already there, so `mark` first drops every key the bucket
has already marked: the first writer wins.

On the leader the reads come from a watch-fed cache of the pending buckets (`bucket_cache`,
label-selected on `pending=true`, so only buckets with work left are held): a trigger pass four
times a second reads its minute without a request. The store's own writes go into the cache as
the API server answered them, so what this process wrote it reads back at once; a copy the
cache holds that is older than the bucket only costs a Conflict at the mark, which reads the
bucket and puts it in the cache before the trigger reads it again. The writer reads the buckets
it inserts into from the cache too (a bucket of 2,000 entries is most of a megabyte, and a GET of
it before each write doubled what ten thousand new jobs cost the API server); a stale copy is a
Conflict at the write, and the retry reads the API server. Until the cache has listed once, and
without one (tools, tests), every read goes to the API server.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.buckets import (
    BUCKET_BYTE_BUDGET,
    Bucket,
    BucketEntry,
    Mark,
    Outcome,
    bucket_name,
    minute_label,
    minute_of,
    parse_minute_label,
    shard_candidates,
)
from vigil.core.ports import Conflict
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.kube.kits.conflicts import conflict_from, retry_on_conflict
from vigil.kube.kits.informer import Informer
from vigil.kube.kits.loops import Drain
from vigil.model import GROUP, VERSION
from vigil.model.names import LABEL_MINUTE, SCHEDULE_BUCKETS
from vigil.model.names import LABEL_PENDING as LABEL_PENDING  # re-exported for the watchdog's facts

log = logging.getLogger(__name__)


class _Insert:
    """One caller's entry in a group commit; its future says which bucket took it, or why none did."""

    def __init__(self, entry: BucketEntry) -> None:
        self.entry = entry
        self.future: Future[str] = Future()
        self.bucket: str | None = None
        self.error: Exception | None = None


WRITE_CONCURRENCY = 8  # buckets one group commit writes at once (a minute has `shards` of them, or more)
BY_MINUTE = "minute"  # the bucket cache's index: the minute label
PARSED_MINUTES = 4  # the minutes read last whose parsed buckets are kept for reuse


def bucket_cache(api: client.ApiClient, *, namespace: str) -> Informer:
    """The leader's cache of the pending ScheduleBuckets in the operator's namespace, by minute."""
    custom = client.CustomObjectsApi(api)

    def list_fn(**kwargs: Any) -> Any:
        return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, SCHEDULE_BUCKETS, **kwargs)

    return Informer(
        list_fn,
        what=SCHEDULE_BUCKETS,
        label_selector=f"{LABEL_PENDING}=true",
        indexes={BY_MINUTE: lambda obj: (obj["metadata"].get("labels") or {}).get(LABEL_MINUTE)},
    )


def format_millis(at: datetime) -> str:
    """RFC 3339 UTC with milliseconds: jittered fire times are finer than a second."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def entry_to_dict(entry: BucketEntry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "key": entry.key,
        "namespace": entry.namespace,
        "name": entry.name,
        "uid": entry.uid,
        "generation": entry.generation,
        "scheduleHash": entry.schedule_hash,
        "nominal": format_millis(entry.nominal),
        "fireAt": format_millis(entry.fire_at),
    }
    if entry.resume:
        out["resume"] = True
    return out


def entry_from_dict(raw: Mapping[str, Any]) -> BucketEntry:
    return BucketEntry(
        key=raw["key"],
        namespace=raw["namespace"],
        name=raw["name"],
        uid=raw["uid"],
        generation=int(raw.get("generation", 0)),
        schedule_hash=raw.get("scheduleHash", ""),
        nominal=parse_rfc3339(raw["nominal"]),
        fire_at=parse_rfc3339(raw["fireAt"]),
        resume=bool(raw.get("resume", False)),
    )


def mark_to_dict(mark: Mark) -> dict[str, Any]:
    out: dict[str, Any] = {"outcome": str(mark.outcome), "at": format_millis(mark.at)}
    if mark.execution_id:
        out["executionId"] = mark.execution_id
    if mark.reason:
        out["reason"] = mark.reason
    return out


def mark_from_dict(raw: Mapping[str, Any]) -> Mark:
    return Mark(
        outcome=Outcome(raw["outcome"]),
        at=parse_rfc3339(raw["at"]),
        execution_id=raw.get("executionId"),
        reason=raw.get("reason", ""),
    )


def _reused(known: Bucket | None, obj: Mapping[str, Any]) -> Bucket:
    """`known` while the object is still at its version, else the object parsed (Bucket is frozen,
    and its marks are never written in place)."""
    if known is not None and known.version == obj["metadata"]["resourceVersion"]:
        return known
    return bucket_from_object(obj)


def bucket_from_object(obj: Mapping[str, Any]) -> Bucket:
    spec = obj.get("spec") or {}
    fired = (obj.get("status") or {}).get("fired") or {}
    return Bucket(
        name=obj["metadata"]["name"],
        minute=parse_rfc3339(spec["minute"]),
        entries=tuple(entry_from_dict(o) for o in spec.get("occurrences") or ()),
        marks={k: mark_from_dict(v) for k, v in fired.items()},
        version=obj["metadata"]["resourceVersion"],
    )


class KubeBucketStore:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        shards: int,
        max_per_bucket: int,
        max_bytes: int = BUCKET_BYTE_BUDGET,
        cache: Informer | None = None,
    ) -> None:
        self._api = client.CustomObjectsApi(api)
        self.cache = cache
        self._namespace = namespace
        self._shards = shards
        self._max = max_per_bucket
        self._max_bytes = max_bytes
        self._lock = threading.Lock()  # one writer per process: the trigger and handlers share it
        #: Inserts waiting for the writer (see insert_later): each batch is every one queued meanwhile.
        self._inserts: Drain[_Insert] = Drain("bucket insert", self._write_batch)
        self._writes = ThreadPoolExecutor(max_workers=WRITE_CONCURRENCY, thread_name_prefix="bucket-write")
        self._inserted: set[datetime] = set()  # minutes inserted into since `inserted_minutes` last said
        self._inserted_lock = threading.Lock()
        #: The buckets of the minutes read last from the cache, parsed, by minute and name: each is
        #: reused while its resourceVersion holds. The trigger reads the current minute on every
        #: pass, and parsing each entry's times anew was a tenth of the operator's CPU at 20
        #: occurrences/s (it grows with entries x passes). Only the buckets a read found are kept.
        self._parsed: dict[datetime, dict[str, Bucket]] = {}
        self._parsed_lock = threading.Lock()

    # --- reads ---

    def _cached(self) -> Informer | None:
        return self.cache if self.cache is not None and self.cache.synced.is_set() else None

    def read_minute(self, minute: datetime) -> list[Bucket]:
        cache = self._cached()
        if cache is None:
            items = self._api.list_namespaced_custom_object(
                GROUP, VERSION, self._namespace, SCHEDULE_BUCKETS, label_selector=f"{LABEL_MINUTE}={minute_label(minute)}"
            )["items"]
            return sorted((bucket_from_object(o) for o in items), key=lambda b: b.name)
        # a completed bucket has left the cache: it holds nothing due
        objects = cache.by_index(BY_MINUTE, minute_label(minute))
        with self._parsed_lock:
            known = self._parsed.pop(minute, {})
        parsed = {o["metadata"]["name"]: _reused(known.get(o["metadata"]["name"]), o) for o in objects}
        with self._parsed_lock:
            self._parsed[minute] = parsed  # the minute read last goes last
            while len(self._parsed) > PARSED_MINUTES:
                del self._parsed[next(iter(self._parsed))]
        return sorted(parsed.values(), key=lambda b: b.name)

    def pending_objects(self) -> list[dict[str, Any]]:
        """Every bucket labelled pending: from the cache once it has listed, else paged from the API server."""
        cache = self._cached()
        if cache is not None:
            return cache.items()
        found: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"label_selector": f"{LABEL_PENDING}=true", "limit": 500}
            if token:
                kwargs["_continue"] = token
            page = self._api.list_namespaced_custom_object(GROUP, VERSION, self._namespace, SCHEDULE_BUCKETS, **kwargs)
            found.extend(page["items"])
            token = page["metadata"].get("continue")
            if not token:
                return found

    def pending_minutes(self, *, until: datetime) -> list[datetime]:
        minutes: set[datetime] = set()
        for obj in self.pending_objects():
            minute = parse_minute_label(obj["metadata"]["labels"][LABEL_MINUTE])
            # the label is cleared only by complete(): a bucket fully marked since still has it
            if minute <= until and bucket_from_object(obj).pending():
                minutes.add(minute)
        return sorted(minutes)

    def _get(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self._api.get_namespaced_custom_object(
                GROUP, VERSION, self._namespace, SCHEDULE_BUCKETS, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        self._observe(obj)
        return obj

    def _read_cached(self, name: str) -> dict[str, Any] | None:
        """The bucket as the cache holds it, else from the API server (None: there is none)."""
        cache = self._cached()
        found = cache.get(self._namespace, name) if cache is not None else None
        return found if found is not None else self._get(name)

    def _observe(self, obj: dict[str, Any]) -> None:
        """The API server's answer to this store goes into the cache (kept if newer), or out of
        it once the bucket is no longer pending. Nothing here changes an object it has read
        (`_changed` builds a new one)."""
        if self.cache is None:
            return
        meta = obj["metadata"]
        if (meta.get("labels") or {}).get(LABEL_PENDING) == "true":
            self.cache.observe(obj)
        else:
            self.cache.forget(self._namespace, meta["name"], version=str(meta.get("resourceVersion") or ""))

    # --- writes ---

    def insert(self, entry: BucketEntry) -> str:
        """Insert one entry; the bucket's name. Concurrent callers share writes (group commit).

        In a hot minute the trigger's workers insert a thousand next occurrences into the same
        few buckets, so this turns a thousand serial read-modify-writes of an ever-larger object
        into a few.
        """
        return self.insert_later(entry).result()

    def insert_later(self, entry: BucketEntry) -> Future[str]:
        """Queue one entry for the writer; the future gives the bucket's name (or the error).

        The writer takes every entry queued while it wrote the last batch: one read and one
        conditional write per bucket touched, however many entries arrived.
        """
        waiter = _Insert(entry)
        self._inserts.put(waiter)
        self._inserts.start("bucket-writer")  # at the first insert: a store that only reads has no writer
        return waiter.future

    def _write_batch(self, batch: list[_Insert]) -> None:
        """Write one batch; every caller in it hears, through its future, where its entry went
        or why it went nowhere (no batch outlives its write: the last one would keep every
        caller's entry)."""
        try:
            with self._lock:
                self._insert_batch(batch)
        except Exception as error:  # the writer must outlive any batch: its callers hear of it
            for waiter in batch:
                waiter.error = waiter.error or error
        for waiter in batch:
            if waiter.error is None and waiter.bucket is None:
                waiter.error = RuntimeError(f"entry {waiter.entry.key} was not placed")
            if waiter.error is not None:
                waiter.future.set_exception(waiter.error)
            else:
                assert waiter.bucket is not None
                waiter.future.set_result(waiter.bucket)

    def _insert_batch(self, batch: list[_Insert]) -> None:
        by_minute: dict[datetime, list[_Insert]] = {}
        for waiter in batch:
            by_minute.setdefault(minute_of(waiter.entry.fire_at), []).append(waiter)
        for minute, waiters in by_minute.items():
            try:
                group = functools.partial(self._insert_group, minute, waiters, itertools.count())
                retry_on_conflict(group)
            except Exception as error:  # every caller of this minute hears of it
                for waiter in waiters:
                    waiter.error = error

    def _insert_group(self, minute: datetime, waiters: list[_Insert], tries: Iterator[int]) -> None:
        """Place each entry in its first shard with room (or where its key already is); write
        each touched bucket once. A conflict leaves what was written: a retry finds those keys.
        The first of the ``tries`` reads the buckets from the cache where it holds them (it has
        this store's own last write, and the write is conditional on the version read, so a stale
        one is a conflict); a retry reads them from the API server."""
        group = _Group(read=self._read_cached if next(tries) == 0 else self._get)
        for waiter in waiters:
            waiter.bucket = self._place(minute, waiter.entry, group)

        def write(name: str, entries: list[BucketEntry]) -> None:
            obj = group.objects[name]
            if obj is None:
                self._create(name, minute, group.shards[name], entries)
            else:
                occurrences = [*(obj["spec"].get("occurrences") or []), *(entry_to_dict(e) for e in entries)]
                self._replace(name, _changed(obj, occurrences))
            with self._inserted_lock:
                self._inserted.add(minute)

        self._side_by_side([functools.partial(write, name, entries) for name, entries in group.added.items() if entries])

    def _side_by_side(self, writes: list[Callable[[], None]]) -> None:
        """Run writes of different buckets at once; once all have ended, raise what one raised (an
        error before a conflict: a conflict is retried, an error is for the callers)."""
        if len(writes) <= 1:
            for write in writes:
                write()
            return
        errors = [error for error in (f.exception() for f in [self._writes.submit(w) for w in writes]) if error]
        for error in sorted(errors, key=lambda error: isinstance(error, Conflict)):
            raise error

    def _place(self, minute: datetime, entry: BucketEntry, group: _Group) -> str:
        for shard in shard_candidates(entry.uid, self._shards):
            name = bucket_name(minute, shard)
            group.shards[name] = shard
            if name not in group.objects:
                group.objects[name] = group.read(name)
            obj = group.objects[name]
            present = (obj["spec"].get("occurrences") or []) if obj is not None else []
            queued = group.added.setdefault(name, [])
            if name not in group.keys:
                group.keys[name] = {o["key"] for o in present}
            keys = group.keys[name]
            if entry.key in keys:
                return name
            if len(present) + len(queued) >= self._max:
                continue
            if name not in group.weights:
                group.weights[name] = sum(entry_from_dict(o).weight for o in present)
            if group.weights[name] + entry.weight > self._max_bytes:
                continue
            group.weights[name] += entry.weight
            queued.append(entry)
            keys.add(entry.key)
            return name
        raise RuntimeError(f"minute {minute.isoformat()} is full in every shard")

    def _create(self, name: str, minute: datetime, shard: int, entries: list[BucketEntry]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ScheduleBucket",
            "metadata": {
                "name": name,
                "namespace": self._namespace,
                "labels": {LABEL_MINUTE: minute_label(minute), LABEL_PENDING: "true"},
            },
            "spec": {
                "minute": format_rfc3339(minute),
                "shard": shard,
                "occurrences": [entry_to_dict(entry) for entry in entries],
            },
        }
        try:
            self._observe(self._api.create_namespaced_custom_object(GROUP, VERSION, self._namespace, SCHEDULE_BUCKETS, body))
        except ApiException as err:
            conflict_from(err, f"bucket {name} created concurrently")
            raise

    def _replace(self, name: str, obj: dict[str, Any]) -> None:
        try:
            self._observe(self._api.replace_namespaced_custom_object(GROUP, VERSION, self._namespace, SCHEDULE_BUCKETS, name, obj))
        except ApiException as err:
            conflict_from(err, f"bucket {name} changed concurrently")
            raise

    def mark(self, bucket: str, marks: Mapping[str, Mark], *, version: str) -> Bucket:
        cached = self._cached_bucket(bucket)
        if cached is not None and cached["metadata"]["resourceVersion"] != version:
            # The cache holds every answer this store had and only moves forward: the version
            # is stale, and the caller reads the bucket again from it (no GET of a large object).
            raise Conflict(f"bucket {bucket}: version {version} is stale")
        current = cached or self._get(bucket)  # _get puts a newer one in the cache
        if current is None:
            raise Conflict(f"bucket {bucket} no longer exists")
        if current["metadata"]["resourceVersion"] != version:
            raise Conflict(f"bucket {bucket}: version {version} is stale")
        marked = (current.get("status") or {}).get("fired") or {}
        fresh = {key: mark for key, mark in marks.items() if key not in marked}
        if not fresh:
            return bucket_from_object(current)
        body = {
            "metadata": {"resourceVersion": version},  # the precondition: 409 if it moved since the read
            "status": {"fired": {key: mark_to_dict(mark) for key, mark in fresh.items()}},
        }
        try:
            obj = self._api.patch_namespaced_custom_object_status(
                GROUP, VERSION, self._namespace, SCHEDULE_BUCKETS, bucket, body
            )
        except ApiException as err:
            conflict_from(err, f"bucket {bucket}: version {version} is stale")
            raise
        self._observe(obj)
        return bucket_from_object(obj)

    def _cached_bucket(self, bucket: str) -> dict[str, Any] | None:
        """The bucket as the cache holds it (a pending one), else None."""
        cache = self._cached()
        return cache.get(self._namespace, bucket) if cache is not None else None

    def complete(self, bucket: str, *, version: str) -> None:
        # the precondition: an insert that landed since the read (it labels the bucket pending
        # again) must not be labelled away with it, or its entry would leave every scan
        body = {"metadata": {"resourceVersion": version, "labels": {LABEL_PENDING: "false"}}}
        try:
            obj = self._api.patch_namespaced_custom_object(GROUP, VERSION, self._namespace, SCHEDULE_BUCKETS, bucket, body)
        except ApiException as err:
            conflict_from(err, f"bucket {bucket}: version {version} is stale")
            raise
        self._observe(obj)

    def inserted_minutes(self) -> list[datetime]:
        with self._inserted_lock:
            minutes, self._inserted = sorted(self._inserted), set()
        return minutes

    def remove(self, bucket: str, key: str) -> None:
        def remove_once() -> None:
            obj = self._get(bucket)
            if obj is None:
                return
            self._replace(bucket, _changed(obj, [o for o in obj["spec"].get("occurrences") or [] if o["key"] != key]))

        with self._lock:
            retry_on_conflict(remove_once)


@dataclasses.dataclass
class _Group:
    """One minute's inserts as they are placed: the buckets read (None: none yet), the entries
    each gets, its shard, and the bytes and keys each holds, present and queued."""

    read: Callable[[str], dict[str, Any] | None]
    objects: dict[str, dict[str, Any] | None] = dataclasses.field(default_factory=dict)
    added: dict[str, list[BucketEntry]] = dataclasses.field(default_factory=dict)
    shards: dict[str, int] = dataclasses.field(default_factory=dict)
    weights: dict[str, int] = dataclasses.field(default_factory=dict)
    keys: dict[str, set[str]] = dataclasses.field(default_factory=dict)


def _changed(obj: Mapping[str, Any], occurrences: list[dict[str, Any]]) -> dict[str, Any]:
    """A new bucket object with these occurrences, labelled pending; `obj` (perhaps the cache's) is left as it is."""
    meta = obj["metadata"]
    return {
        **obj,
        "metadata": {**meta, "labels": {**(meta.get("labels") or {}), LABEL_PENDING: "true"}},
        "spec": {**obj["spec"], "occurrences": occurrences},
    }
