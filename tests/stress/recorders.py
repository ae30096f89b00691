"""What happened, recorded from the outside: a watch per kind, and the operator's /proc figures.

A stress run creates thousands of objects, so it never lists them to wait on something. A
`Sightings` watch in a thread keeps, per object uid, when this process first saw it and a
small summary of its latest state: counting uids (not names) also catches an object that
was deleted and created again under the same name, which no final listing could show.

Watch events are parsed as plain JSON (no model classes: they cost milliseconds an object and
the receive time is the lag figure). A dropped watch resumes from the last revision seen; an
expired one (410) lists everything again, and objects first found by such a listing have no
receive time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

WATCH_SECONDS = 10  # each watch request's length: how long stopping a recorder may take
PAGE = 500  # objects per page when listing


class Expired(Exception):
    """The watch's revision is gone from the API server's window (410)."""


@dataclasses.dataclass
class Sighting:
    name: str
    first_seen: float | None  # epoch seconds of the first event; None when found by a re-list
    facts: dict[str, str]  # the summary of its latest state
    deleted: bool = False


class Sightings:
    """Every object one list function returns, followed by a watch from this moment on.

    `list_fn` is a namespaced list call with the namespace already bound (it receives watch,
    resource_version, limit and the like as keywords); `summarise` picks the few fields the
    test checks out of an object, as strings.
    """

    def __init__(
        self,
        list_fn: Callable[..., Any],
        summarise: Callable[[dict[str, Any]], dict[str, str]],
        *,
        label_selector: str | None = None,
    ) -> None:
        self._list_fn = list_fn
        self._summarise = summarise
        self._selector = {"label_selector": label_selector} if label_selector else {}
        self._seen: dict[str, Sighting] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.relists = 0
        self.errors: list[str] = []
        self._version = self._list_all(first_seen=None)
        self._thread = threading.Thread(target=self._run, name="sightings", daemon=True)
        self._thread.start()

    def all(self) -> list[Sighting]:
        with self._lock:
            return [dataclasses.replace(s, facts=dict(s.facts)) for s in self._seen.values()]

    def count(self) -> int:
        with self._lock:
            return len(self._seen)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * WATCH_SECONDS)

    def __enter__(self) -> Sightings:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the watch ------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except Expired:
                self.relists += 1
                self._version = self._list_all(first_seen=None)
            except Exception as error:  # a dropped connection: resume from the last revision
                self.errors.append(f"{type(error).__name__}: {str(error)[:200]}")
                self._stop.wait(0.5)  # not synchronisation: a pause before reconnecting

    def _follow(self) -> None:
        response = self._list_fn(
            watch=True,
            resource_version=self._version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            **self._selector,
        )
        try:
            if response.status == 410:
                raise Expired(response.reason)
            if not 200 <= response.status < 300:
                raise RuntimeError(f"watch refused: {response.status} {response.data[:200]!r}")
            for line in iter_resp_lines(response):
                if not line:
                    continue
                received = time.time()
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise Expired(str(obj.get("message")))
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                self._version = obj["metadata"]["resourceVersion"]
                if event.get("type") != "BOOKMARK":
                    self._note(obj, received, deleted=event.get("type") == "DELETED")
                if self._stop.is_set():
                    return
        finally:
            response.close()
            response.release_conn()

    def _list_all(self, *, first_seen: float | None) -> str:
        """Record every object there is now; the list's revision, to watch from."""
        version = ""
        for page in self._pages():
            version = page["metadata"]["resourceVersion"]
            for obj in page.get("items") or []:
                self._note(obj, first_seen, deleted=False)
        return version

    def _pages(self) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            extra = {"_continue": token} if token else {}
            response = self._list_fn(limit=PAGE, _preload_content=False, **self._selector, **extra)
            if not 200 <= response.status < 300:
                raise RuntimeError(f"list refused: {response.status} {response.data[:200]!r}")
            page: dict[str, Any] = json.loads(response.data)
            yield page
            token = page["metadata"].get("continue")
            if not token:
                return

    def _note(self, obj: dict[str, Any], received: float | None, *, deleted: bool) -> None:
        meta = obj["metadata"]
        facts = self._summarise(obj)
        with self._lock:
            known = self._seen.get(meta["uid"])
            if known is None:
                self._seen[meta["uid"]] = Sighting(meta["name"], received, facts, deleted)
            else:
                known.facts = facts
                known.deleted = known.deleted or deleted


# --- the operator process, from /proc --------------------------------------------------------


def rss_mib(pid: int) -> float:
    """Resident set size of a live process, in MiB (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}: has it exited?")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a live process has used (utime + stime in /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after "(comm)"
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
