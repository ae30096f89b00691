"""Named SQL in files: one reader for the history's and the queue store's `queries.sql`.

Each store keeps its SQL in one reviewable file of blocks, each opened by a `-- name: NAME`
line; the code asks for a block by name. Comments and blank lines inside a block are dropped,
so what reaches the database is the statement alone.
"""

from __future__ import annotations

from pathlib import Path


def load_blocks(text: str) -> dict[str, str]:
    """Split a file of `-- name: NAME` blocks into {NAME: SQL}, comments and blank lines removed."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("-- name:"):
            current = blocks.setdefault(stripped.removeprefix("-- name:").strip(), [])
        elif current is not None and stripped and not stripped.startswith("--"):
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in blocks.items()}


def load_queries(path: Path) -> dict[str, str]:
    """The named blocks of the SQL file at `path`."""
    return load_blocks(path.read_text(encoding="utf-8"))
