"""A run's graph laid out in layers, left to right, for the SVG on the run page.

Pure Python, no I/O: each task goes in the column after its deepest predecessor (longest
path from a source), rows within a column are ordered by the mean row of their
predecessors (a few barycentre sweeps, which untangles most crossings of small graphs),
and edges are cubic curves from the right side of one box to the left side of the next.
A deep graph (more than ``MAX_ACROSS`` layers, like looplab's long chain) wraps like
text: ``MAX_ACROSS`` layers per band, bands one under the other, so it fits the page's
width; an edge into a later band leaves its box at the bottom and enters at the top.

A big graph is drawn bounded: ids sort naturally (``w2`` before ``w10``); a layer wider
than ``MAX_ROWS`` keeps its ``MAX_ROWS - 1`` most telling tasks (running, waiting, failed
first) and folds the rest into one **group** box that counts them by state; a graph deeper
than ``MAX_LAYERS`` keeps its first and last ``KEEP_LAYERS`` layers and folds the middle
into one group box. So a 300-wide fan-out is one column of 16 boxes and a 10,000-task
chain is 13 boxes, whatever the run's size. The template draws it; every text in it is
escaped there.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Box", "Layout", "Wire", "layout", "natural_key"]

BOX_W = 168
BOX_H = 46
COL_GAP = 64
ROW_GAP = 16
PAD = 12
BAND_GAP = 36
"""Vertical gap between two bands of a wrapped graph."""
MAX_ACROSS = 5
"""Most layers side by side in one band (about the width of the page)."""
MAX_ROWS = 16
"""Most boxes in one layer; the rest of a wider layer is one group box."""
MAX_LAYERS = 15
"""Most layers drawn; the middle of a deeper graph is one group box."""
KEEP_LAYERS = 6
"""Layers kept at each end of a graph deeper than ``MAX_LAYERS``."""
_URGENT = {"running": 0, "waiting": 1, "failed": 2, "ready": 3}


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digit runs by value: ``w2`` before ``w10``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part
    )


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
    key: str = ""
    """Stable name of the box in the drawing: the task id, or ``group:...``."""
    count: int = 1
    """Tasks in the box: more than one for a group."""
    states: dict[str, int] = field(default_factory=dict)
    """A group's tasks by state."""

    @property
    def group(self) -> bool:
        return self.count > 1 or self.key.startswith("group:")


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
    """Lay out ``tasks`` (``task_id, skill, state``) and ``edges`` (``src, dst``); a big
    graph is folded into group boxes (see the module docstring)."""
    info = {t[0]: t for t in tasks}
    nodes = sorted(info, key=natural_key)
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    pairs: list[tuple[str, str]] = []
    for src, dst in edges:
        if src in info and dst in info:
            preds[dst].append(src)
            pairs.append((src, dst))
    layer = _layers(nodes, preds)
    depth = 1 + max(layer.values(), default=-1)
    rep: dict[str, str] = {n: n for n in nodes}
    drawn_layer: dict[str, int] = {}
    if depth > MAX_LAYERS:  # fold the middle layers into one box
        cut = depth - KEEP_LAYERS
        for n in nodes:
            if KEEP_LAYERS <= layer[n] < cut:
                rep[n] = "group:middle"
                drawn_layer[n] = KEEP_LAYERS
            elif layer[n] >= cut:
                drawn_layer[n] = layer[n] - (cut - KEEP_LAYERS) + 1
            else:
                drawn_layer[n] = layer[n]
    else:
        drawn_layer = dict(layer)
    by_layer: dict[int, list[str]] = {}
    for n in nodes:
        if rep[n] == n:
            by_layer.setdefault(drawn_layer[n], []).append(n)
    for i, col in by_layer.items():  # fold the rest of a wide layer into one box
        if len(col) > MAX_ROWS:
            col.sort(key=lambda n: (_URGENT.get(info[n][2], 9), natural_key(n)))
            for n in col[MAX_ROWS - 1 :]:
                rep[n] = f"group:layer{i}"
    members: dict[str, list[str]] = {}
    for n in nodes:
        members.setdefault(rep[n], []).append(n)
    kinds = {k: drawn_layer[ms[0]] for k, ms in members.items()}
    columns: list[list[str]] = [[] for _ in range(1 + max(kinds.values(), default=-1))]
    for k in members:  # natural order, a group box last in its layer
        columns[kinds[k]].append(k)
    for col in columns:
        col.sort(key=lambda k: (k.startswith("group:"), natural_key(k)))
    rpreds: dict[str, list[str]] = {k: [] for k in members}
    rsuccs: dict[str, list[str]] = {k: [] for k in members}
    wires_in: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for src, dst in pairs:
        a, b = rep[src], rep[dst]
        if a != b and (a, b) not in seen:
            seen.add((a, b))
            rpreds[b].append(a)
            rsuccs[a].append(b)
            wires_in.append((a, b))
    row = {n: float(i) for col in columns for i, n in enumerate(col)}
    for sweep in range(4):  # down then up, twice: barycentres of neighbours
        order = columns[1:] if sweep % 2 == 0 else columns[-2::-1]
        for col in order:
            near = rpreds if sweep % 2 == 0 else rsuccs

            def key(n: str, near: dict[str, list[str]] = near) -> tuple[bool, float, float]:
                ns = near[n]
                mean = sum(row[m] for m in ns) / len(ns) if ns else row[n]
                return (n.startswith("group:"), mean, row[n])

            col.sort(key=key)
            for i, n in enumerate(col):
                row[n] = float(i)
    pos = _positions(columns)
    boxes = []
    state_of: dict[str, str] = {}
    for k, ms in members.items():
        if k.startswith("group:"):
            states = dict(sorted(Counter(info[m][2] for m in ms).items()))
            state = min(states, key=lambda s: (_URGENT.get(s, 9), s))
            skills = sorted({info[m][1] for m in ms})
            skill = skills[0] if len(skills) == 1 else f"{len(skills)} skills"
            box = Box(
                task_id=f"{len(ms)} tasks",
                skill=skill,
                state=state,
                x=pos[k][0],
                y=pos[k][1],
                layer=kinds[k],
                late=any(m in late for m in ms),
                key=k,
                count=len(ms),
                states=states,
            )
        else:
            box = Box(
                task_id=k,
                skill=info[k][1],
                state=info[k][2],
                x=pos[k][0],
                y=pos[k][1],
                layer=kinds[k],
                late=k in late,
                key=k,
            )
        state_of[k] = box.state
        boxes.append(box)
    wires = []
    for src, dst in wires_in:
        if kinds[src] // MAX_ACROSS == kinds[dst] // MAX_ACROSS:  # same band: left to right
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
        wires.append(Wire(src=src, dst=dst, d=d, live=state_of[src] == "succeeded"))
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
