"""A log written to a terminal shows its control characters as text (vigil.cli.terminal)."""

from __future__ import annotations

import io

from vigil.cli.terminal import Visible, visible

HOSTILE = b"\x1b[2J\x1b]0;pwned\x07\x1b[1A\rreal line\xc2\x9b31m\x08\x7f"


def test_escape_sequences_are_shown_not_obeyed() -> None:
    shown = visible(HOSTILE)
    assert b"\x1b" not in shown and b"\x07" not in shown and b"\r" not in shown and b"\x08" not in shown
    assert b"\xc2\x9b" not in shown and b"\x7f" not in shown
    assert shown == b"\\x1b[2J\\x1b]0;pwned\\x07\\x1b[1A\\x0dreal line\\u009b31m\\x08\\x7f"


def test_text_newlines_tabs_and_crlf_pass_unchanged() -> None:
    text = "café\tnaïve ✓ 日本\r\nnext\n".encode()
    assert visible(text) == text


def test_a_control_split_across_chunks_is_still_shown() -> None:
    out = io.BytesIO()
    stream = Visible(out)
    for chunk in (b"a\xc2", b"\x9bb\r", b"\nc\r", b"d"):
        stream.write(chunk)
    stream.close()
    assert out.getvalue() == b"a\\u009bb\r\nc\\x0dd"


def test_the_last_byte_held_is_written_at_the_end() -> None:
    out = io.BytesIO()
    stream = Visible(out)
    stream.write(b"end\r")
    stream.close()
    assert out.getvalue() == b"end\\x0d"
