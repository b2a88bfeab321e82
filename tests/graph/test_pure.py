"""graph/ does no I/O: its ``TaskTable`` knows no evicted task; the executor supplies the
table that reads evicted tasks back from an archive (``executor/_spill.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import loopkernel.graph
from loopkernel.executor._spill import ArchivedTasks, SpillArchive, evict
from loopkernel.graph import GraphPatch, GraphState, TaskSpec, TaskState, TaskTable, validate
from loopkernel.ids import RunId, TaskId

GRAPH = Path(loopkernel.graph.__file__).parent


def test_no_graph_module_names_an_archive_or_imports_a_store() -> None:
    for path in sorted(GRAPH.rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert not {n for n in names if "archive" in n.lower()}, path
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith(("loopkernel.store", "sqlite3")), path
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith(("sqlite3", "psycopg")) for a in node.names)
    assert not hasattr(loopkernel.graph, "Archive")


def _state() -> GraphState:
    """a -> b -> c, a and b succeeded, c ready."""
    state = GraphState(run_id=RunId("r"), app="x", params=None)
    patch = (
        GraphPatch()
        .add(TaskSpec(task_id="a", skill="s"))
        .add(TaskSpec(task_id="b", skill="s"), after=["a"])
        .add(TaskSpec(task_id="c", skill="s"), after=["b"])
    )
    state.apply(validate(state, patch, {"s"}))
    for tid in ("a", "b"):
        task = state.tasks[TaskId(tid)]
        done = task.evolve(state=TaskState.READY).evolve(state=TaskState.RUNNING)
        state.tasks[task.task_id] = done.evolve(state=TaskState.SUCCEEDED, result={"t": tid})
    return state


def test_the_graph_alone_cannot_evict_and_the_executor_supplies_what_reads_back() -> None:
    state = _state()
    with pytest.raises(TypeError, match="reads evicted tasks back"):
        state.evict([TaskId("a")])  # a plain dict: the tasks would be lost
    state.tasks = TaskTable(state.tasks)
    with pytest.raises(TypeError, match="reads evicted tasks back"):
        state.evict([TaskId("a")])  # the graph's own table reads nothing back
    assert TaskTable().evicted_task(TaskId("a")) is None
    spill = SpillArchive()
    try:
        state = _state()
        gone = [TaskId("a"), TaskId("b")]
        spill.keep((state.tasks[t] for t in gone), state.preds, state.succs)
        evict(state, gone, spill)
        assert isinstance(state.tasks, ArchivedTasks) and state.tasks.evicted == 2
        assert [t.task_id for t in state.resident()] == ["c"]
        # Read back through the table the executor supplied, the same as before.
        assert state.task("a").result == {"t": "a"} and "b" in state.tasks
        assert len(state.tasks) == 3 and sorted(state.tasks) == ["a", "b", "c"]
        assert state.predecessors("b") == ["a"] and state.successors("b") == ["c"]
        assert state.ancestors(TaskId("c")) == {"a", "b"}
        # A patch that connects an evicted task reads it back into memory.
        later = GraphPatch().add(TaskSpec(task_id="d", skill="s"), after=["a"])
        state.apply(validate(state, later, {"s"}))
        assert state.tasks.evicted == 1 and state.successors("a") == ["b", "d"]
    finally:
        spill.close()
