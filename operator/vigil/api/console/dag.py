"""A workflow's DAG laid out for SVG: each step a box in the column of its depth, edges between.

Pure: the steps' ids and `dependsOn` in, boxes and edges with coordinates out; the template
draws them (so every id is escaped by Jinja like any other text). A step's column is the
length of the longest path of dependencies leading to it; within a column steps keep the
order the definition gives, so the same workflow is always drawn the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from vigil.api.console.views import StepRow

BOX_WIDTH, BOX_HEIGHT = 160, 44
COLUMN_GAP, ROW_GAP, MARGIN = 60, 20, 10
#: Characters of a step id shown in its box; the full id is in the box's title.
LABEL_MAX = 20


@dataclasses.dataclass(frozen=True)
class Box:
    id: str
    label: str
    phase: str
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclasses.dataclass(frozen=True)
class Layout:
    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    width: int
    height: int


def depths(steps: Sequence[StepRow]) -> dict[str, int]:
    """Each step's column: 0 for steps without dependencies, else 1 + the deepest dependency's.
    Unknown dependencies count as roots; a cycle (admission refuses them) is cut where met."""
    known = {step.id: step for step in steps}
    found: dict[str, int] = {}

    def depth(step_id: str, seen: frozenset[str]) -> int:
        if step_id in found:
            return found[step_id]
        step = known.get(step_id)
        if step is None or step_id in seen:
            return -1
        value = 1 + max((depth(d, seen | {step_id}) for d in step.depends_on), default=-1)
        found[step_id] = value
        return value

    for step in steps:
        depth(step.id, frozenset())
    return found


def layout(steps: Sequence[StepRow]) -> Layout:
    columns = depths(steps)
    rows_in: dict[int, int] = {}
    where: dict[str, tuple[int, int]] = {}
    boxes = []
    for step in steps:
        column = columns[step.id]
        row = rows_in.get(column, 0)
        rows_in[column] = row + 1
        x = MARGIN + column * (BOX_WIDTH + COLUMN_GAP)
        y = MARGIN + row * (BOX_HEIGHT + ROW_GAP)
        where[step.id] = (x, y)
        label = step.id if len(step.id) <= LABEL_MAX else step.id[: LABEL_MAX - 1] + "…"
        boxes.append(Box(id=step.id, label=label, phase=step.phase, x=x, y=y))
    edges = []
    for step in steps:
        x2, y2 = where[step.id]
        for dependency in step.depends_on:
            if dependency in where:
                x1, y1 = where[dependency]
                edges.append(Edge(x1 + BOX_WIDTH, y1 + BOX_HEIGHT // 2, x2, y2 + BOX_HEIGHT // 2))
    width = MARGIN * 2 + (max(columns.values(), default=0) + 1) * (BOX_WIDTH + COLUMN_GAP)
    height = MARGIN * 2 + max(rows_in.values(), default=1) * (BOX_HEIGHT + ROW_GAP)
    return Layout(tuple(boxes), tuple(edges), width, height)
