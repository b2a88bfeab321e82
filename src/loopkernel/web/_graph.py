"""A run's graph laid out in layers, left to right, for the SVG on the run page.

Pure Python, no I/O: each task goes in the column after its deepest predecessor (longest
path from a source), rows within a column are ordered by the mean row of their
predecessors (a few barycentre sweeps, which untangles most crossings of small graphs),
and edges are cubic curves from the right side of one box to the left side of the next.
A deep graph (more than ``MAX_ACROSS`` layers, like looplab's long chain) is drawn top to
bottom instead, so that it fits the page's width.
The template draws it; every text in it is escaped there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Box", "Layout", "Wire", "layout"]

BOX_W = 168
BOX_H = 46
COL_GAP = 64
ROW_GAP = 16
PAD = 12
ROW_STEP = 28
"""Vertical gap between layers when drawn top to bottom."""
MAX_ACROSS = 6
"""Most layers drawn left to right."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Box:
    """One task's box."""

    task_id: str
    skill: str
    state: str
    x: float
    y: float
    late: bool
    """A result arrived after the task was cancelled and was discarded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Wire:
    """One edge, as an SVG path."""

    src: str
    dst: str
    d: str
    """The path data."""
    live: bool
    """The source succeeded, so the edge carried its result."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """Boxes, wires and the drawing's size."""

    boxes: list[Box]
    wires: list[Wire]
    width: float
    height: float
    vertical: bool = False
    """Layers top to bottom (a deep graph) rather than left to right."""
    box_w: int = BOX_W
    box_h: int = BOX_H


def _layers(nodes: list[str], preds: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Longest-path layering; the graph is acyclic (patches that would close a cycle are
    rejected), so this terminates: iterative, no recursion limit on long chains."""
    layer: dict[str, int] = {}
    for start in nodes:
        if start in layer:
            continue
        stack = [start]
        while stack:
            node = stack[-1]
            todo = [p for p in preds.get(node, ()) if p not in layer]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            layer[node] = 1 + max((layer[p] for p in preds.get(node, ())), default=-1)
    return layer


def layout(
    tasks: Iterable[tuple[str, str, str]],
    edges: Iterable[tuple[str, str]],
    late: frozenset[str] = frozenset(),
) -> Layout:
    """Lay out ``tasks`` (``task_id, skill, state``, in the order the run added them) and
    ``edges`` (``src, dst``)."""
    info = {t[0]: t for t in tasks}
    nodes = list(info)
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    succs: dict[str, list[str]] = {n: [] for n in nodes}
    wires_in: list[tuple[str, str]] = []
    for src, dst in edges:
        if src in info and dst in info:
            preds[dst].append(src)
            succs[src].append(dst)
            wires_in.append((src, dst))
    layer = _layers(nodes, preds)
    columns: list[list[str]] = [[] for _ in range(1 + max(layer.values(), default=-1))]
    for n in nodes:
        columns[layer[n]].append(n)
    row = {n: float(i) for col in columns for i, n in enumerate(col)}
    for sweep in range(4):  # down then up, twice: barycentres of neighbours
        order = columns[1:] if sweep % 2 == 0 else columns[-2::-1]
        for col in order:
            near = preds if sweep % 2 == 0 else succs

            def key(n: str, near: dict[str, list[str]] = near) -> tuple[float, float]:
                ns = near[n]
                return (sum(row[m] for m in ns) / len(ns) if ns else row[n], row[n])

            col.sort(key=key)
            for i, n in enumerate(col):
                row[n] = float(i)
    vertical = len(columns) > MAX_ACROSS
    pos = _positions(columns, vertical)
    boxes = [
        Box(
            task_id=n,
            skill=info[n][1],
            state=info[n][2],
            x=pos[n][0],
            y=pos[n][1],
            late=n in late,
        )
        for n in nodes
    ]
    wires = []
    for src, dst in wires_in:
        if vertical:
            x1, y1 = pos[src][0] + BOX_W / 2, pos[src][1] + BOX_H
            x2, y2 = pos[dst][0] + BOX_W / 2, pos[dst][1]
            bend = max(12.0, (y2 - y1) / 2)
            d = (
                f"M{x1:.0f},{y1:.0f} "
                f"C{x1:.0f},{y1 + bend:.0f} {x2:.0f},{y2 - bend:.0f} {x2:.0f},{y2:.0f}"
            )
        else:
            x1, y1 = pos[src][0] + BOX_W, pos[src][1] + BOX_H / 2
            x2, y2 = pos[dst][0], pos[dst][1] + BOX_H / 2
            bend = max(24.0, (x2 - x1) / 2)
            d = (
                f"M{x1:.0f},{y1:.0f} "
                f"C{x1 + bend:.0f},{y1:.0f} {x2 - bend:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
            )
        wires.append(Wire(src=src, dst=dst, d=d, live=info[src][2] == "succeeded"))
    width = max((x for x, _ in pos.values()), default=-BOX_W) + BOX_W + PAD
    height = max((y for _, y in pos.values()), default=-BOX_H) + BOX_H + PAD
    return Layout(
        boxes=boxes,
        wires=wires,
        width=max(width, 0),
        height=max(height, 0),
        vertical=vertical,
    )


def _positions(columns: list[list[str]], vertical: bool) -> dict[str, tuple[float, float]]:
    """Top-left corners: layers as columns (left to right) or as rows (top to bottom),
    each layer centred across the widest one."""
    across = BOX_W + COL_GAP if not vertical else BOX_H + ROW_STEP
    along, size = (BOX_H + ROW_GAP, BOX_H) if not vertical else (BOX_W + ROW_GAP, BOX_W)
    widest = max((len(c) for c in columns), default=0)
    span = widest * along - (along - size) if widest else 0
    pos: dict[str, tuple[float, float]] = {}
    for c, col in enumerate(columns):
        used = len(col) * along - (along - size)
        start = PAD + (span - used) / 2
        for i, n in enumerate(col):
            a, b = PAD + c * across, start + i * along
            pos[n] = (b, a) if vertical else (a, b)
    return pos
