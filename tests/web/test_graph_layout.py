"""The run page's graph layout: pure function of tasks and edges."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopkernel.web._graph import BOX_H, BOX_W, MAX_ACROSS, layout


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
