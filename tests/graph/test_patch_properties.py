"""Property tests of the patch algebra over random sequences of patches and completions."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from loopkernel import GraphPatch, PatchRejected, TaskSpec, TaskState
from loopkernel.graph import TERMINAL_TASK, GraphState, validate
from loopkernel.ids import RunId, TaskId

SKILLS = {"a", "b"}
IDS = [f"t{i}" for i in range(6)]

ids = st.sampled_from(IDS)
ops = st.one_of(
    st.tuples(st.just("add"), ids, st.sampled_from(["a", "b", "nope"])),
    st.tuples(st.just("connect"), ids, ids),
    st.tuples(st.just("cancel"), ids),
    st.tuples(st.just("wait"), ids),
    st.tuples(st.just("resume"), ids),
    st.tuples(st.just("finish"), st.sampled_from(["succeeded", "failed"])),
)
# A step is a patch (a few ops) or the world moving: a task starts, succeeds or fails.
steps = st.one_of(
    st.tuples(st.just("patch"), st.lists(ops, max_size=4)),
    st.tuples(st.just("world"), ids, st.sampled_from(["start", "succeed", "fail"])),
)


def build(raw: list[tuple[object, ...]]) -> GraphPatch:
    patch = GraphPatch()
    for op in raw:
        match op:
            case ("add", tid, skill):
                patch = patch.add(TaskSpec(task_id=TaskId(str(tid)), skill=str(skill)))
            case ("connect", a, b):
                patch = patch.connect(str(a), str(b))
            case ("cancel", tid):
                patch = patch.cancel(str(tid))
            case ("wait", tid):
                patch = patch.wait(str(tid), "human")
            case ("resume", tid):
                patch = patch.resume(str(tid), {"ok": 1})
            case ("finish", status):
                patch = patch.finish(str(status))  # type: ignore[arg-type]
    return patch


def acyclic(state: GraphState) -> bool:
    indegree = {t: len(state.predecessors(t)) for t in state.tasks}
    queue = [t for t, d in indegree.items() if d == 0]
    seen = 0
    while queue:
        node = queue.pop()
        seen += 1
        for nxt in state.successors(node):
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                queue.append(nxt)
    return seen == len(state.tasks)


def world(state: GraphState, tid: str, move: str) -> None:
    task = state.tasks.get(TaskId(tid))
    if task is None:
        return
    if move == "start" and state.startable(task.task_id):
        state.tasks[task.task_id] = replace(task, state=TaskState.RUNNING)
    elif move in ("succeed", "fail") and task.state is TaskState.RUNNING:
        new = TaskState.SUCCEEDED if move == "succeed" else TaskState.FAILED
        state.tasks[task.task_id] = replace(task, state=new)
        if new is TaskState.SUCCEEDED:
            for p in state.promotions(state.successors(tid), {}):
                state.tasks[p.task_id] = p


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=25))
def test_accepted_patches_keep_the_graph_acyclic_and_terminal_states_fixed(
    script: list[tuple[object, ...]],
) -> None:
    state = GraphState(run_id=RunId("r"), app="t", params=None)
    accepted: list[GraphPatch] = []
    for step in script:
        if step[0] == "world":
            world(state, str(step[1]), str(step[2]))
            continue
        patch = build(step[1])  # type: ignore[arg-type]
        before = {t: v.state for t, v in state.tasks.items()}
        try:
            delta = validate(state, patch, SKILLS)
        except PatchRejected:
            after = {t: v.state for t, v in state.tasks.items()}
            assert before == after  # a rejected patch changes nothing
            continue
        state.apply(delta)
        accepted.append(patch)
        assert acyclic(state)
        for tid, old in before.items():
            if old in TERMINAL_TASK:
                assert state.tasks[tid].state is old
        for tid in state.tasks:
            for p in state.predecessors(tid):
                assert p in state.tasks
        for task in state.tasks.values():
            assert task.skill in SKILLS
            if task.state is TaskState.PENDING:  # pending means: something still to wait for
                preds = state.predecessors(task.task_id)
                assert any(state.tasks[p].state is not TaskState.SUCCEEDED for p in preds)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(ops, max_size=4), max_size=12))
def test_replaying_the_journal_form_rebuilds_the_same_state(
    script: list[list[tuple[object, ...]]],
) -> None:
    live = GraphState(run_id=RunId("r"), app="t", params=None)
    journal = []
    for raw in script:
        patch = build(raw)
        try:
            live.apply(validate(live, patch, SKILLS))
        except PatchRejected:
            continue
        journal.append(patch.to_json())
    replayed = GraphState(run_id=RunId("r"), app="t", params=None)
    for ops_json in journal:
        replayed.apply(validate(replayed, GraphPatch.from_json(ops_json), SKILLS))
    assert replayed.tasks == live.tasks
    assert replayed.preds == live.preds
    assert (replayed.status, replayed.verdict) == (live.status, live.verdict)
