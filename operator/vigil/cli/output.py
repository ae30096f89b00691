"""`-o table|json|yaml`: what a verb printed for people, as data for programs.

A verb that prints builds its result as plain data (dicts, lists, strings,
numbers, RFC 3339 times) and hands it to `emit` with the text it prints for a
person; `-o json` or `-o yaml` prints the data instead, and nothing else on
stdout, so `kubectl vigil … -o json | jq` always parses. Notes meant for a
person (a next-page token, a warning) stay on stderr in every format.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import Enum
from typing import Any

import yaml

from vigil.core.timeparse import format_rfc3339

FORMATS = ("table", "json", "yaml")


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """-o/--output: table (the default, for people), json or yaml."""
    parser.add_argument(
        "-o", "--output", choices=FORMATS, default="table", help="table (default), json or yaml"
    )


def plain(value: Any) -> Any:
    """`value` as JSON-ready data: dataclasses and mappings as dicts, times as RFC 3339, enums as values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, datetime):
        whole_utc = value.tzinfo is not None and value.microsecond == 0
        return format_rfc3339(value) if whole_utc else value.isoformat()
    if isinstance(value, Enum):
        return value.value
    return value


def render(data: Any, output: str) -> str:
    """The data in `output`'s format (json or yaml)."""
    if output == "yaml":
        return yaml.safe_dump(plain(data), sort_keys=False, default_flow_style=False).rstrip("\n")
    return json.dumps(plain(data), indent=2)


def emit(args: argparse.Namespace, data: Any, text: str | Callable[[], str]) -> int:
    """Print `text` for `-o table`, else `data` as JSON or YAML; exit code 0."""
    return emit_as(getattr(args, "output", "table"), data, text)


def emit_as(output: str, data: Any, text: str | Callable[[], str]) -> int:
    """Print `text` when `output` is table, else `data` in that format; exit code 0."""
    if output == "table":
        print(text() if callable(text) else text)
    else:
        print(render(data, output))
    return 0


def column_key(header: str) -> str:
    """A table column's header as a data key: "PERIOD START" -> "periodStart"."""
    first, *rest = header.lower().replace("-", " ").replace("(", " ").replace(")", " ").split()
    return first + "".join(word.capitalize() for word in rest)


def table_data(headers: list[str], rows: list[list[object]]) -> list[dict[str, Any]]:
    """A table's rows as data, one dict per row keyed by its columns (`column_key`)."""
    keys = [column_key(header) for header in headers]
    return [dict(zip(keys, row, strict=True)) for row in rows]
