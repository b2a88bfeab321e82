"""A run's graph laid out in layers, left to right, for the SVG on the run page.

Pure Python, no I/O: each task goes in the column after its deepest predecessor (longest
path from a source), rows within a column are ordered by the mean row of their
predecessors (a few barycentre sweeps, which untangles most crossings of small graphs),
and edges are cubic curves from the right side of one box to the left side of the next.
A deep graph (more than ``MAX_ACROSS`` layers, like looplab's long chain) wraps like
text: ``MAX_ACROSS`` layers per band, bands one under the other, so it fits the page's
width; an edge into a later band leaves its box at the bottom and enters at the top.
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
BAND_GAP = 36
"""Vertical gap between two bands of a wrapped graph."""
MAX_ACROSS = 5
"""Most layers side by side in one band (about the width of the page)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Box:
    """One task's box."""

    task_id: str
    skill: str
    state: str
    x: float
    y: float
    layer: int
    """Its layer: one more than its deepest predecessor's."""
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
    bands: int = 1
    """How many bands the layers wrap into."""
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
    pos = _positions(columns)
    boxes = [
        Box(
            task_id=n,
            skill=info[n][1],
            state=info[n][2],
            x=pos[n][0],
            y=pos[n][1],
            layer=layer[n],
            late=n in late,
        )
        for n in nodes
    ]
    wires = []
    for src, dst in wires_in:
        if layer[src] // MAX_ACROSS == layer[dst] // MAX_ACROSS:  # same band: left to right
            x1, y1 = pos[src][0] + BOX_W, pos[src][1] + BOX_H / 2
            x2, y2 = pos[dst][0], pos[dst][1] + BOX_H / 2
            bend = max(24.0, (x2 - x1) / 2)
            d = (
                f"M{x1:.0f},{y1:.0f} "
                f"C{x1 + bend:.0f},{y1:.0f} {x2 - bend:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
            )
        else:  # into a later band: down through the gap
            x1, y1 = pos[src][0] + BOX_W / 2, pos[src][1] + BOX_H
            x2, y2 = pos[dst][0] + BOX_W / 2, pos[dst][1]
            bend = max(BAND_GAP, (y2 - y1) / 2)
            d = (
                f"M{x1:.0f},{y1:.0f} "
                f"C{x1:.0f},{y1 + bend:.0f} {x2:.0f},{y2 - bend:.0f} {x2:.0f},{y2:.0f}"
            )
        wires.append(Wire(src=src, dst=dst, d=d, live=info[src][2] == "succeeded"))
    width = max((x for x, _ in pos.values()), default=-BOX_W) + BOX_W + PAD
    height = max((y for _, y in pos.values()), default=-BOX_H) + BOX_H + PAD
    return Layout(
        boxes=boxes,
        wires=wires,
        width=max(width, 0),
        height=max(height, 0),
        bands=max(1, -(-len(columns) // MAX_ACROSS)),
    )


def _positions(columns: list[list[str]]) -> dict[str, tuple[float, float]]:
    """Top-left corners: layers as columns, ``MAX_ACROSS`` to a band, bands stacked; in
    each band every column is centred on the band's tallest."""
    pos: dict[str, tuple[float, float]] = {}
    top = float(PAD)
    for start in range(0, len(columns), MAX_ACROSS):
        band = columns[start : start + MAX_ACROSS]
        tallest = max(len(c) for c in band)
        span = tallest * BOX_H + (tallest - 1) * ROW_GAP
        for c, col in enumerate(band):
            used = len(col) * BOX_H + (len(col) - 1) * ROW_GAP
            y0 = top + (span - used) / 2
            for i, n in enumerate(col):
                pos[n] = (PAD + c * (BOX_W + COL_GAP), y0 + i * (BOX_H + ROW_GAP))
        top += span + BAND_GAP
    return pos
