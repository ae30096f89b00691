"""Named SQL in files: one reader for the history's `queries.sql` and the queue store's `sql/`.

Each store keeps its SQL in reviewable files of blocks, each opened by a `-- name: NAME` line;
the code asks for a block by name. Comments and blank lines inside a block are dropped, so what
reaches the database is the statement alone. A name is a block's only address, so a name given
twice (in one file or across a directory's files) is an error, raised when the SQL is loaded.
"""

from __future__ import annotations

from pathlib import Path


class DuplicateBlock(ValueError):
    """Two blocks with one name: the code could not say which one it means."""


def load_blocks(text: str, *, source: str = "<text>") -> dict[str, str]:
    """Split a file of `-- name: NAME` blocks into {NAME: SQL}, comments and blank lines removed."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("-- name:"):
            name = stripped.removeprefix("-- name:").strip()
            if name in blocks:
                raise DuplicateBlock(f"SQL block {name!r} is named twice in {source}")
            current = blocks[name] = []
        elif current is not None and stripped and not stripped.startswith("--"):
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in blocks.items()}


def load_queries(path: Path) -> dict[str, str]:
    """The named blocks of the SQL file at `path`."""
    return load_blocks(path.read_text(encoding="utf-8"), source=str(path))


def load_query_dir(directory: Path, *, exclude: frozenset[str] = frozenset()) -> dict[str, str]:
    """The named blocks of every `*.sql` file in `directory` (but those named in `exclude`), as one
    mapping; a name found in two files raises DuplicateBlock naming both."""
    queries: dict[str, str] = {}
    where: dict[str, Path] = {}
    for path in sorted(directory.glob("*.sql")):
        if path.name in exclude:
            continue
        for name, sql in load_queries(path).items():
            if name in queries:
                raise DuplicateBlock(f"SQL block {name!r} is named in both {where[name]} and {path}")
            queries[name] = sql
            where[name] = path
    return queries
