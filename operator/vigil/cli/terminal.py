"""A tenant's bytes made safe for the viewer's terminal.

A log is whatever the tenant's program printed. Written to a terminal as it is, an escape
sequence in it can move the cursor, rewrite lines already shown, retitle the window or, on some
terminals, answer back as if typed: a log can make itself look other than it is. `Visible` writes
every control character but newline and tab as text instead (`\\x1b`, and `\\u009b` for the C1
controls), and a carriage return too unless a newline follows it. Text, UTF-8 included, passes
unchanged. `kubectl vigil logs` uses it when its output is a terminal, unless `--raw`.
"""

from __future__ import annotations

import re
from typing import Protocol

#: C0 controls but tab and newline, DEL, a carriage return not before a newline, and the C1
#: controls as UTF-8 encodes them (0xC2 0x80-0x9F).
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|\xc2[\x80-\x9f]")


class Sink(Protocol):
    """Where bytes are written: a binary stream, or a `Visible` around one."""

    def write(self, chunk: bytes, /) -> int: ...
    def flush(self) -> None: ...


def _shown(match: re.Match[bytes]) -> bytes:
    found = match.group()
    if len(found) == 2:  # a C1 control
        return b"\\u%04x" % found[1]
    return b"\\x%02x" % found[0]


def visible(data: bytes) -> bytes:
    """`data` with its control characters written out as text."""
    return _CONTROL.sub(_shown, data)


class Visible:
    """A binary stream writing `visible` bytes to `out`, whatever the chunks' boundaries: a chunk
    ending in the first byte of a C1 control or in a carriage return is held until the next."""

    def __init__(self, out: Sink) -> None:
        self._out = out
        self._held = b""

    def write(self, chunk: bytes) -> int:
        data = self._held + chunk
        cut = len(data) - 1 if data[-1:] in (b"\xc2", b"\r") else len(data)
        self._held = data[cut:]
        self._out.write(visible(data[:cut]))
        return len(chunk)

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        """Write what is held (the stream's last byte) and flush."""
        if self._held:
            self._out.write(visible(self._held))
            self._held = b""
        self._out.flush()
