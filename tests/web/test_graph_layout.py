"""The run page's graph layout: pure function of tasks and edges."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopkernel.web._graph import (
    BOX_H,
    BOX_W,
    KEEP_LAYERS,
    MAX_ACROSS,
    MAX_LAYERS,
    MAX_ROWS,
    layout,
    natural_key,
)


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return abs(a[0] - b[0]) < BOX_W and abs(a[1] - b[1]) < BOX_H


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, str]]]:
    n = draw(st.integers(1, 14))
    nodes = [f"t{i}" for i in range(n)]
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=20)) if pairs else []
    return nodes, [(nodes[i], nodes[j]) for i, j in chosen]


@settings(max_examples=120, deadline=None)
@given(dags())
def test_boxes_never_overlap_and_edges_point_forward(
    dag: tuple[list[str], list[tuple[str, str]]],
) -> None:
    nodes, edges = dag
    out = layout([(n, "skill", "pending") for n in nodes], edges)
    pos = {b.task_id: (b.x, b.y) for b in out.boxes}
    assert sorted(pos) == sorted(nodes)
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            assert not overlaps(pos[a], pos[b]), (a, b)
    layer = {b.task_id: b.layer for b in out.boxes}
    for src, dst in edges:  # every edge reads forward: rightwards in a band, or downwards
        assert layer[dst] > layer[src]
        if layer[dst] // MAX_ACROSS == layer[src] // MAX_ACROSS:
            assert pos[dst][0] > pos[src][0]
        else:
            assert pos[dst][1] > pos[src][1] + BOX_H
    for x, y in pos.values():
        assert 0 <= x <= out.width - BOX_W and 0 <= y <= out.height - BOX_H


def test_a_long_chain_wraps_into_bands_and_a_fan_stays_in_one() -> None:
    chain = layout(
        [(f"s{i}", "step", "succeeded") for i in range(MAX_ACROSS + 3)],
        [(f"s{i}", f"s{i + 1}") for i in range(MAX_ACROSS + 2)],
    )
    assert chain.bands == 2 and len({b.y for b in chain.boxes}) == 2
    assert chain.width < (MAX_ACROSS + 1) * BOX_W + MAX_ACROSS * 64 + 24
    fan = layout(
        [
            ("plan", "plan", "succeeded"),
            ("r1", "research", "succeeded"),
            ("r2", "research", "cancelled"),
            ("d", "distill", "running"),
        ],
        [("plan", "r1"), ("plan", "r2"), ("r1", "d")],
        late=frozenset({"r2"}),
    )
    assert fan.bands == 1 and fan.width > fan.height
    assert {b.task_id: b.late for b in fan.boxes} == {
        "plan": False,
        "r1": False,
        "r2": True,
        "d": False,
    }
    assert [w.live for w in fan.wires] == [True, True, True]


def test_an_empty_graph_has_no_boxes() -> None:
    out = layout([], [])
    assert out.boxes == [] and out.wires == []


def test_ids_sort_naturally_and_a_wide_fan_out_folds_into_one_group() -> None:
    workers = [f"w{i}" for i in range(300)]
    states = {f"w{i}": "running" for i in (250, 251)}
    out = layout(
        [("plan", "plan", "succeeded")]
        + [(w, "work", states.get(w, "succeeded")) for w in reversed(workers)],
        [("plan", w) for w in workers],
    )
    column = sorted((b for b in out.boxes if b.layer == 1), key=lambda b: b.y)
    assert len(column) == MAX_ROWS
    shown = [b.task_id for b in column if not b.group]
    assert {"w250", "w251"} <= set(shown)  # the running ones are kept, whatever their ids
    assert shown[:3] == ["w0", "w1", "w2"]  # drawn in natural order: not w0, w1, w10, w100
    assert shown == sorted(shown, key=natural_key)
    (group,) = [b for b in column if b.group]
    assert group.count == 300 - (MAX_ROWS - 1)
    assert group.states == {"succeeded": 300 - (MAX_ROWS - 1)}
    assert {(w.src, w.dst) for w in out.wires} >= {("plan", group.key), ("plan", "w0")}


def test_a_long_chain_folds_its_middle_into_one_group() -> None:
    n = 10_000
    out = layout(
        [(f"s{i}", "step", "succeeded" if i < n // 2 else "pending") for i in range(n)],
        [(f"s{i}", f"s{i + 1}") for i in range(n - 1)],
    )
    assert len(out.boxes) == 2 * KEEP_LAYERS + 1 <= MAX_LAYERS
    (middle,) = [b for b in out.boxes if b.group]
    assert middle.count == n - 2 * KEEP_LAYERS
    assert middle.states == {"pending": n // 2 - KEEP_LAYERS, "succeeded": n // 2 - KEEP_LAYERS}
    kept = [b.task_id for b in sorted(out.boxes, key=lambda b: b.layer) if not b.group]
    assert kept == [f"s{i}" for i in range(KEEP_LAYERS)] + [
        f"s{i}" for i in range(n - KEEP_LAYERS, n)
    ]
    assert len(out.wires) == 2 * KEEP_LAYERS  # a path through the group, nothing else
    assert out.height < 2_000
