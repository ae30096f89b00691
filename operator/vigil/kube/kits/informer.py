"""A watch-fed cache of one kind of object: list once, then follow the watch.

The operator's controllers read Executions and pods from here instead of asking
the API server each time. The label selector is sent to the API server, so only
Vigil's own objects arrive. After the first list the cache follows a watch from
that list's resourceVersion; when the watch's history has expired (410) or the
connection fails, it lists again and carries on. Every change is announced to the
handlers with the object's key, so a controller can queue it.

A writer that has the API server's answer to its own write hands it to
`observe`: the cache keeps whichever of the two versions is newer, so the
writer's next read is not older than its own write even before the watch
delivers the event.

`resync` tells the handlers every object again, as the cache holds it (client-go's resync
period): a controller whose work also depends on time (a time to live, a timer lost with the
previous leader) judges each one again without a request to the API server. A handler may take
the resync its own way (`add_handler(..., on_resync=)`): a controller that skips the versions it
has handled itself does not skip them there. The runtime runs it as a periodic pass.

What the cache keeps is slimmed first (`slim`, or the cache's own `transform`):
the server-side apply bookkeeping (`metadata.managedFields`) and the copies of
the whole object that kubectl (and earlier versions of Vigil) keep are never read from the cache and
would otherwise be most of its memory. What is left is held as a copy of its own, so a
caller that hands its object to `observe` may go on using it.

A cache of many objects that are read one at a time can be `packed`: each object for which
`packed(obj)` is true is then held as its compact JSON text and decoded when read (a new dict
each time, which the caller may keep); the others stay dicts. A dict of a few dozen small
strings costs several times its JSON text in Python objects (10,000 finished Executions: about
75 MiB as dicts), and these caches hold one object per ScheduledJob and per retained
Execution; decoding one costs tens of microseconds. The Execution and pod caches pack only the
finished ones, which retention keeps and hardly anyone reads, so the objects a burst reads many
times a second cost no decoding.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
#: handler(key, obj, deleted): the new object, or the last one known if it was deleted.
Handler = Callable[[Key, "dict[str, Any]", bool], None]
#: list_fn(limit=, _continue=, label_selector=, _preload_content=False, ...) → the API's raw answer;
#: the same function is what the watch calls.
ListFn = Callable[..., Any]
IndexFn = Callable[["dict[str, Any]"], "str | None"]

PAGE = 500
WATCH_SECONDS = 300  # the server ends each watch after this; the cache resumes from its version
RELIST_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)
TOMBSTONES = 10_000  # deleted keys remembered, so a late answer to a write cannot bring one back
#: Annotations holding a copy of the object: kubectl's client-side apply, and the diff base the
#: kopf framework left on objects an earlier version of Vigil handled.
COPY_ANNOTATIONS = (
    "kubectl.kubernetes.io/last-applied-configuration",
    "kopf.vigil.dev/last-handled-configuration",
)


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """A compact copy of the object without what no reader of the cache uses (`obj` is left as it is)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    annotations = meta.get("annotations")
    if annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k not in COPY_ANNOTATIONS}
    # A deep copy of its own, made by the JSON codec in C: a copy made in Python (which also
    # interned every key and short string) cost so much on every watch event that a 150-job
    # burst's pods came 3x the floor's p99 instead of 2x.
    compact: dict[str, Any] = json.loads(json.dumps({**obj, "metadata": meta}))
    return compact


def unmanaged(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without its server-side apply bookkeeping (``metadata.managedFields``); a shallow
    copy, for a reader that keeps the object its own way (it shares the rest with ``obj``)."""
    meta = obj.get("metadata") or {}
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def skeleton(obj: dict[str, Any]) -> dict[str, Any]:
    """What a cache keeps of an object whose readers keep their own copy: the identity and version
    only (enough to tell a newer version and a deletion apart, and to relist)."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("namespace", "name", "uid", "resourceVersion") if k in meta}}


def pack(obj: Mapping[str, Any]) -> bytes:
    """The object as compact JSON: what a cache holds of an object it does not read often (a
    decoded dict costs about four times its JSON)."""
    return json.dumps(obj if isinstance(obj, dict) else dict(obj), separators=(",", ":")).encode()


def unpack(held: bytes) -> dict[str, Any]:
    """A packed object decoded: a copy of its own for the reader."""
    decoded: dict[str, Any] = json.loads(held)
    return decoded


def always(obj: dict[str, Any]) -> bool:
    """`packed=always`: every object of the cache is held packed."""
    return True


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def _version(obj: dict[str, Any] | None) -> int:
    """The object's resourceVersion as a number: etcd's revisions grow, so the larger is newer."""
    if obj is None:
        return -1
    try:
        return int(obj["metadata"].get("resourceVersion") or -1)
    except ValueError:
        return -1


class Informer:
    def __init__(
        self,
        list_fn: ListFn,
        *,
        what: str,
        label_selector: str,
        indexes: dict[str, IndexFn] | None = None,
        request_timeout: float = 60.0,
        transform: Callable[[dict[str, Any]], dict[str, Any]] = slim,
        packed: Callable[[dict[str, Any]], bool] | None = None,
        announce: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self._list = list_fn
        self._transform = transform
        #: What handlers are told of a change: by default the object as the cache keeps it; a cache
        #: that keeps little of each object (only what tells versions and deletions apart) may tell
        #: its handlers more of it, which they keep in their own way.
        self._told = announce
        self._packed = packed
        self._what = what
        self._selector = label_selector
        self._timeout = request_timeout
        self._lock = threading.Lock()
        self._items: dict[Key, Any] = {}  # the slimmed object, or (packed) its compact JSON as bytes
        self._index_fns = dict(indexes or {})
        #: index → value → the one key with that value, or the set of them (most values have one: a
        #: set for each of 10,000 job uids would be about 2 MiB of empty set slots).
        self._indexes: dict[str, dict[str, Key | set[Key]]] = {name: {} for name in self._index_fns}
        self._handlers: list[Handler] = []
        self._resync_handlers: list[Handler] = []
        self._tombstones: OrderedDict[Key, int] = OrderedDict()  # the last version of what was deleted
        self.synced = threading.Event()

    # -- reading ------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            held = self._items.get((namespace, name))
        return None if held is None else self._unpack(held)

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            held = list(self._items.values())
        return [self._unpack(h) for h in held]

    def iter_items(self) -> Iterator[dict[str, Any]]:
        """Every object, decoded one at a time as the caller goes (a packed cache of 10,000 jobs
        read whole would be 10,000 dicts at once): what the cache held when iteration began."""
        with self._lock:
            held = list(self._items.values())
        for h in held:
            yield self._unpack(h)

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        with self._lock:
            found = self._indexes[index].get(value)
            keys = {found} if isinstance(found, tuple) else found or set()
            held = [self._items[k] for k in keys if k in self._items]
        return [self._unpack(h) for h in held]

    def _unpack(self, held: Any) -> dict[str, Any]:
        if isinstance(held, bytes):
            return unpack(held)
        obj: dict[str, Any] = held
        return obj

    def _pack(self, obj: dict[str, Any]) -> Any:
        if self._packed is not None and self._packed(obj):
            return pack(obj)
        return obj

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def add_handler(self, handler: Handler, *, on_resync: Handler | None = None) -> None:
        """`handler` is told every change; `on_resync` (by default `handler`) every object again
        at each `resync`."""
        self._handlers.append(handler)
        self._resync_handlers.append(on_resync or handler)

    def resync(self) -> int:
        """Tell the resync handlers every object the cache holds, decoded one at a time; how many."""
        with self._lock:
            held = list(self._items.items())
        for key, h in held:
            obj = self._unpack(h)
            for handler in self._resync_handlers:
                try:
                    handler(key, obj, False)
                except Exception:
                    log.exception("%s informer: resync handler failed for %s/%s", self._what, *key)
        return len(held)

    # -- writing ------------------------------------------------------------------------------

    def observe(self, obj: dict[str, Any]) -> None:
        """A writer's own result: kept if newer than what the cache holds."""
        self._put(obj, announce=False)

    def forget(self, namespace: str, name: str, *, version: str = "") -> None:
        """A writer deleted it (or moved it out of the selection, at `version`): drop it, and tell
        the handlers, now rather than at the watch's DELETED."""
        self._remove((namespace, name), announce=True, version=_version({"metadata": {"resourceVersion": version}}))

    def _put(self, whole: dict[str, Any], *, announce: bool) -> None:
        obj = self._transform(whole)
        key = key_of(obj)
        packed = self._pack(obj)
        with self._lock:
            held = self._items.get(key)
            old = None if held is None else self._unpack(held)
            if old is not None and _version(old) > _version(obj):
                return
            if old is None and _version(obj) <= self._tombstones.get(key, -1):
                return  # a writer's answer arriving after the object was deleted
            self._unindex(key, old)
            self._items[key] = packed
            for name, fn in self._index_fns.items():
                value = fn(obj)
                if value is not None:
                    self._index_add(self._indexes[name], value, key)
        if announce:
            self._announce(key, obj if self._told is None else self._told(whole), deleted=False)

    def _remove(self, key: Key, *, announce: bool, version: int = -1) -> None:
        with self._lock:
            held = self._items.pop(key, None)
            old = None if held is None else self._unpack(held)
            self._unindex(key, old)
            last = max(_version(old), version)
            if last >= 0:
                self._tombstones[key] = last
                self._tombstones.move_to_end(key)
                while len(self._tombstones) > TOMBSTONES:
                    self._tombstones.popitem(last=False)
        if announce and old is not None:
            self._announce(key, old, deleted=True)

    def _unindex(self, key: Key, old: dict[str, Any] | None) -> None:
        if old is None:
            return
        for name, fn in self._index_fns.items():
            value = fn(old)
            if value is None:
                continue
            index = self._indexes[name]
            keys = index.get(value)
            if keys == key:
                del index[value]
            elif isinstance(keys, set):
                keys.discard(key)
                if len(keys) == 1:
                    index[value] = keys.pop()

    @staticmethod
    def _index_add(index: dict[str, Key | set[Key]], value: str, key: Key) -> None:
        keys = index.get(value)
        if keys is None or keys == key:
            index[value] = key
        elif isinstance(keys, set):
            keys.add(key)
        else:
            index[value] = {keys, key}

    def _announce(self, key: Key, obj: dict[str, Any], *, deleted: bool) -> None:
        for handler in self._handlers:
            try:
                handler(key, obj, deleted)
            except Exception:
                log.exception("%s informer: handler failed for %s/%s", self._what, *key)

    # -- following the API server ---------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                version = self._relist()
                failures = 0
                self._follow(version, stop)
            except Exception as err:  # any failure means: list again, after a pause
                delay = RELIST_BACKOFF_SECONDS[min(failures, len(RELIST_BACKOFF_SECONDS) - 1)]
                failures += 1
                log.warning("%s informer: %s; listing again in %.1fs", self._what, _short(err), delay)
                stop.wait(delay)

    def _relist(self) -> str:
        """List everything, a page at a time: each page goes into the cache (slimmed) before the
        next is read, so the API's whole answer, with its managedFields, is never held at once
        (at 10,000 objects that was the process's high-water mark, and its RSS stayed there)."""
        listed: set[Key] = set()
        version = ""
        for page, at in self._pages():
            version = at
            for obj in page:
                listed.add(key_of(obj))
                self._put(obj, announce=True)
        # Not listed but newer than the list: a writer's own answer (`observe`) to a create made
        # while the list was read. It is not gone, and the watch from the list's version brings
        # its events; dropped here, it would also be tombstoned at that version, the watch's
        # ADDED ignored as a late answer, and the object never seen (an Execution never started).
        snapshot = _version({"metadata": {"resourceVersion": version}})
        with self._lock:
            gone = [
                k
                for k in self._items
                if k not in listed and (snapshot < 0 or _version(self._unpack(self._items[k])) <= snapshot)
            ]
        for key in gone:
            self._remove(key, announce=True)
        self.synced.set()
        log.debug("%s informer: listed %d at version %s", self._what, len(listed), version)
        return version

    def _pages(self) -> Iterator[tuple[list[dict[str, Any]], str]]:
        return list_pages(self._list, label_selector=self._selector, timeout=self._timeout)

    def _follow(self, version: str, stop: threading.Event) -> None:
        """Apply watch events until the watch ends; raises to make `run` list again."""
        while not stop.is_set():
            stream = watch.Watch()
            for event in stream.stream(
                self._list,
                label_selector=self._selector,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                deserialize=False,
                _request_timeout=WATCH_SECONDS + self._timeout,
            ):
                if stop.is_set():
                    stream.stop()
                    return
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message") or "watch error")
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self._remove(key_of(obj), announce=True)
                else:
                    self._put(obj, announce=True)


def list_pages(
    list_fn: ListFn, *, label_selector: str = "", timeout: float = 60.0
) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """A LIST, PAGE objects at a time: each page's objects and the list's resourceVersion. A caller
    that keeps only what it needs of each page never holds the whole answer."""
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"label_selector": label_selector, "limit": PAGE}
        if token:
            kwargs["_continue"] = token
        raw = list_fn(_preload_content=False, _request_timeout=timeout, **kwargs)
        answer = json.loads(raw.data)
        meta = answer.get("metadata") or {}
        yield answer.get("items") or [], str(meta.get("resourceVersion") or "")
        token = meta.get("continue")
        if not token:
            return


def _short(err: Exception) -> str:
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"
