"""The tail of an attempt's log, kept in the history database once its pod is gone.

Retention deletes finished pods (and the kubelet their logs) once their history rows are
written, so the log of the run that failed last night is gone by the time anyone looks,
if another failed since. The operator therefore stores the end of each attempt's log —
of every attempt (`LogPolicy.ALL`), of failed ones (`FAILED`, the default) or of none —
beside the attempt's row.

A tenant writes the log, so what is stored is bounded here, whatever the log holds:
at most `limit` bytes (the tail: the end of a log says why it failed), cut at a UTF-8
character boundary, invalid UTF-8 replaced (U+FFFD) and NUL bytes dropped (PostgreSQL's
TEXT cannot hold them). `TailBuffer` keeps that bound while the log streams in, so a
log of gigabytes costs `limit` bytes of memory, never its size.

Pure: no I/O, no clock; the adapters pass the bytes and the times in.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from enum import StrEnum
from typing import Any

#: The bytes of a log's end kept per attempt unless the operator's settings say otherwise.
DEFAULT_TAIL_BYTES = 64 * 1024
#: The fewest and most bytes a tail may be set to keep (a bound a setting cannot lift).
MIN_TAIL_BYTES = 1024
MAX_TAIL_BYTES = 1024 * 1024
_UTF8_CONTINUATION = 0b1100_0000  # the top two bits of a continuation byte are 10
_MAX_CONTINUATIONS = 3  # a UTF-8 character is at most four bytes


class LogPolicy(StrEnum):
    """Which attempts' log tails the operator stores (a job's `spec.logs`)."""

    ALL = "all"
    FAILED = "failed"
    NONE = "none"


DEFAULT_LOG_POLICY = LogPolicy.FAILED


def wanted(policy: LogPolicy, *, failed: bool) -> bool:
    """Is the tail of an attempt that `failed` (or succeeded) stored under `policy`?"""
    return policy is LogPolicy.ALL or (policy is LogPolicy.FAILED and failed)


def _from_char_start(data: bytes) -> bytes:
    """`data` without the continuation bytes a cut left at its front (at most three)."""
    skip = 0
    while skip < min(len(data), _MAX_CONTINUATIONS) and data[skip] & _UTF8_CONTINUATION == 0x80:
        skip += 1
    return data[skip:]


def bounded_text(raw: bytes, *, limit: int, cut: bool = False) -> tuple[str, bool]:
    """The end of `raw` as text of at most `limit` UTF-8 bytes, and whether anything was cut
    off its front (`cut`: the caller cut it already).

    NUL bytes are dropped and invalid UTF-8 replaced, then the last `limit` bytes kept from a
    character's start: a replacement character is three bytes where the invalid byte was one,
    so the bound is applied to the text as it is stored, not to the bytes as they came.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1 byte, not {limit}")
    clean = raw.replace(b"\x00", b"")
    if len(clean) > limit:
        clean, cut = _from_char_start(clean[-limit:]), True
    encoded = clean.decode("utf-8", "replace").encode("utf-8")
    if len(encoded) > limit:
        encoded, cut = _from_char_start(encoded[-limit:]), True
    return encoded.decode("utf-8"), cut


class TailBuffer:
    """The last `limit` bytes (NUL bytes aside) of a stream fed in chunks, and how much it had.

    Memory stays below twice `limit` whatever the stream's length; `text()` gives the bound
    tail as `bounded_text` does.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1 byte, not {limit}")
        self.limit = limit
        self.seen = 0  # every byte fed, NUL bytes included
        self._kept = bytearray()
        self._dropped = False

    def feed(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        self._kept += chunk.replace(b"\x00", b"")
        if len(self._kept) > 2 * self.limit:
            del self._kept[: len(self._kept) - self.limit]
            self._dropped = True

    def text(self) -> tuple[str, bool]:
        """The tail as text of at most `limit` bytes, and whether the stream's front was cut."""
        return bounded_text(bytes(self._kept), limit=self.limit, cut=self._dropped)


@dataclasses.dataclass(frozen=True)
class LogTail:
    """The stored end of one attempt's log (main container), or why there is none (`note`)."""

    execution_id: str
    attempt: int
    namespace: str
    job: str
    pod: str
    scheduled_for: datetime
    captured_at: datetime
    text: str
    truncated: bool = False  # the log was longer than the tail kept: its front is not stored
    log_bytes: int = 0  # how long the log read was, in bytes
    note: str = ""  # non-empty when the log could not be read: why (the text is then empty)


def log_tail_to_json(tail: LogTail) -> dict[str, Any]:
    """The HTTP API's form of a stored tail (what `kubectl vigil logs` reads)."""
    return {
        "executionId": tail.execution_id,
        "attempt": tail.attempt,
        "namespace": tail.namespace,
        "job": tail.job,
        "pod": tail.pod,
        "scheduledFor": tail.scheduled_for.isoformat(),
        "capturedAt": tail.captured_at.isoformat(),
        "truncated": tail.truncated,
        "logBytes": tail.log_bytes,
        "note": tail.note,
        "text": tail.text,
    }


def log_tail_from_json(item: dict[str, Any]) -> LogTail:
    """`log_tail_to_json`'s inverse; KeyError/ValueError/TypeError when malformed."""

    def aware(name: str) -> datetime:
        value = datetime.fromisoformat(str(item[name]))
        if value.tzinfo is None:
            raise ValueError(f"{name} has no time zone")
        return value

    return LogTail(
        execution_id=str(item["executionId"]), attempt=int(item["attempt"]), namespace=str(item["namespace"]),
        job=str(item["job"]), pod=str(item["pod"]), scheduled_for=aware("scheduledFor"),
        captured_at=aware("capturedAt"), text=str(item["text"]), truncated=bool(item["truncated"]),
        log_bytes=int(item.get("logBytes") or 0), note=str(item.get("note") or ""),
    )  # fmt: skip
