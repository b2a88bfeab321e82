"""The kernel's side of a proposing planner: a ``Proposal`` is applied if the guard and
``validate`` pass it, else its fallback is, and the journal says which and why.

The proposer here is an ordinary planner that returns ``Proposal`` values built by the
same judge the LLM planner uses: no model is needed to check the kernel's contract.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopkernel import (
    BasePlanner,
    Event,
    EventKind,
    ExecutionConfig,
    GraphPatch,
    Kernel,
    KernelParts,
    RunStatus,
    Snapshot,
    TaskContext,
    TaskSpec,
)
from loopkernel.errors import TripwireFired
from loopkernel.graph import GraphState
from loopkernel.ids import RunId
from loopkernel.planner import Proposal
from loopkernel.planner.llm import AllowedSkill, Allowlist, judge
from loopkernel.store import PatchRecord

if TYPE_CHECKING:
    from lk_stores import Backend


class Rules(BasePlanner):
    """start -> a -> finish(a's result)."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="a", skill="work"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        return GraphPatch().finish("succeeded", snapshot.task(event.task_id).result)


ALLOW = Allowlist(skills=(AllowedSkill(name="work"),))


class Proposer:
    """Proposes ``replies[event.kind]`` (a model's raw text), judged; ``Rules`` backs it."""

    def __init__(self, replies: dict[str, str], **preset: Any) -> None:
        self.replies = replies
        self.preset = preset
        self.asked: Counter[int] = Counter()
        self.rules = Rules()

    def plan(self, snapshot: Snapshot, event: Event) -> Proposal:
        assert isinstance(snapshot, GraphState)
        self.asked[event.seq] += 1
        fallback = self.rules.plan(snapshot, event)
        assert isinstance(fallback, GraphPatch)
        if self.preset:
            return Proposal(patch=None, fallback=fallback, **self.preset)
        raw = self.replies.get(event.kind.value, "")  # no reply: the fallback answers
        got = judge(raw, snapshot, ALLOW, fallback=fallback)
        return Proposal(
            patch=got.patch,
            fallback=fallback,
            reason=got.reason,
            detail=got.detail,
            ops=got.ops,
            raw_sha256="h" * 64,
            model="scripted",
            input_tokens=3,
            output_tokens=5,
            latency_ms=1.5,
        )


async def work(ctx: TaskContext) -> Any:
    return {"from": ctx.task_id}


async def execute(
    db: Backend, planner: Any, run_id: str = "r", **kw: Any
) -> tuple[Any, list[PatchRecord]]:
    store = db.store()
    await store.open()
    try:
        max_events = kw.pop("max_events", 1000)
        kernel = Kernel(
            store,
            planner,
            {"work": work},
            config=ExecutionConfig(poll_s=0.02),
            parts=KernelParts(**kw),
        )
        await kernel.start(app="test", run_id=run_id, max_events=max_events)
        outcome = await kernel.run(run_id)
        return outcome, await store.patches(RunId(run_id))
    finally:
        await store.close()


def test_a_valid_proposal_is_applied_as_llm(backend: Backend) -> None:
    replies = {
        "run_started": json.dumps([{"op": "add", "task_id": "b", "skill": "work"}]),
        "task_completed": '[{"op": "finish", "status": "succeeded", "verdict": "model"}]',
    }
    outcome, patches = asyncio.run(execute(backend, Proposer(replies)))
    assert (outcome.status, outcome.verdict) == (RunStatus.SUCCEEDED, "model")
    first = patches[0]
    assert first.planner == "llm" and first.ops[0]["task_id"] == "b"
    assert first.proposal is not None and first.proposal.accepted
    assert (first.proposal.model, first.proposal.output_tokens) == ("scripted", 5)


def test_an_invalid_proposal_never_fails_the_run_the_fallback_answers(backend: Backend) -> None:
    replies = {
        "run_started": '[{"op": "add", "task_id": "x", "skill": "shell"}]',
        "task_completed": "Sure! I think the run is done.",
    }
    outcome, patches = asyncio.run(execute(backend, Proposer(replies)))
    assert (outcome.status, outcome.verdict) == (RunStatus.SUCCEEDED, {"from": "a"})
    assert [(p.planner, p.proposal and p.proposal.reason) for p in patches] == [
        ("fallback", "skill_not_allowed"),
        ("fallback", "bad_json"),
    ]
    assert patches[0].ops == Rules().on_start(None, None).to_json()  # type: ignore[arg-type]
    assert patches[0].proposal is not None and patches[0].proposal.ops is not None


def test_the_kernel_validates_again_with_the_real_registry(backend: Backend) -> None:
    # The allowlist admits "ghost" but no worker has that name: validate refuses it.
    planner = Proposer({})
    lax = Allowlist(skills=(AllowedSkill(name="work"), AllowedSkill(name="ghost")))

    def plan(snapshot: Snapshot, event: Event) -> Proposal:
        fallback = planner.rules.plan(snapshot, event)
        assert isinstance(fallback, GraphPatch) and isinstance(snapshot, GraphState)
        raw = '[{"op": "add", "task_id": "g", "skill": "ghost"}]'
        got = judge(raw, snapshot, lax) if event.kind is EventKind.RUN_STARTED else None
        patch = got.patch if got else None
        return Proposal(patch=patch, fallback=fallback, reason=None if patch else "empty")

    planner.plan = plan  # type: ignore[method-assign]
    outcome, patches = asyncio.run(execute(backend, planner))
    assert outcome.status is RunStatus.SUCCEEDED
    assert patches[0].planner == "fallback"
    assert patches[0].proposal is not None and patches[0].proposal.reason == "unknown_skill"


def test_a_finish_the_policy_refuses_falls_back_instead_of_escalating(backend: Backend) -> None:
    class NoEarlyFinish:
        def check_patch(self, snapshot: Snapshot, event: Event, patch: GraphPatch) -> None:
            if event.kind is EventKind.RUN_STARTED and any(
                op.get("op") == "finish" for op in patch.to_json()
            ):
                raise TripwireFired("finishing before any work", tripwire="early_finish")

    replies = {
        "run_started": '[{"op": "finish", "status": "succeeded", "verdict": "done"}]',
        "task_completed": "no",
    }
    outcome, patches = asyncio.run(execute(backend, Proposer(replies), guard=NoEarlyFinish()))
    assert (outcome.status, outcome.verdict) == (RunStatus.SUCCEEDED, {"from": "a"})
    assert patches[0].planner == "fallback"
    assert patches[0].proposal is not None and patches[0].proposal.reason == "policy"


def test_a_model_error_is_a_named_rejection(backend: Backend) -> None:
    planner = Proposer({}, reason="model_timeout", detail="ModelTimeout: 30 s")
    outcome, patches = asyncio.run(execute(backend, planner))
    assert outcome.status is RunStatus.SUCCEEDED
    assert {(p.planner, p.proposal.reason) for p in patches if p.proposal} == {
        ("fallback", "model_timeout")
    }
    assert all(p.proposal.raw_sha256 is None for p in patches if p.proposal)


def test_a_resumed_run_never_asks_again_for_an_event_that_has_a_patch(backend: Backend) -> None:
    class Gate(Rules):
        def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            return GraphPatch().add(TaskSpec(task_id="a", skill="work")).wait("a", "check")

    async def go() -> tuple[Counter[int], Counter[int], list[PatchRecord]]:
        store = backend.store()
        await store.open()
        first, second = Proposer({}), Proposer({})
        first.rules = second.rules = Gate()
        kernel = Kernel(store, first, {"work": work}, config=ExecutionConfig(poll_s=0.02))
        await kernel.start(app="test", run_id="g")
        assert (await kernel.run("g")).status is RunStatus.WAITING
        await store.add_human_input(RunId("g"), "a", decision="approve", payload=None)  # type: ignore[arg-type]
        kernel = Kernel(store, second, {"work": work}, config=ExecutionConfig(poll_s=0.02))
        assert (await kernel.run("g")).status is RunStatus.SUCCEEDED
        patches = await store.patches(RunId("g"))
        await store.close()
        return first.asked, second.asked, patches

    first, second, patches = asyncio.run(go())
    assert first == Counter({1: 1})
    assert 1 not in second and all(n == 1 for n in second.values())
    assert [p.event_seq for p in patches] == sorted({p.event_seq for p in patches})


REPLIES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(
        [
            "[]",
            '[{"op": "add", "task_id": "b", "skill": "work"}]',
            '[{"op": "add", "task_id": "a", "skill": "work"}]',
            '[{"op": "finish", "status": "succeeded", "verdict": 1}]',
            '[{"op": "finish", "status": "cancelled"}]',
            '[{"op": "cancel", "task_id": "a"}]',
            '[{"op": "connect", "src": "a", "dst": "a"}]',
            '{"ops": [{"op": "add", "task_id": "c", "skill": "work", "input": {"k": 1}}]}',
        ]
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(start=REPLIES, done=REPLIES)
def test_any_reply_is_applied_or_falls_back_and_the_run_ends(
    lite_backend: Backend, start: str, done: str
) -> None:
    # Each example is a whole run through the real kernel on SQLite (10,000 replies go
    # through the judge alone in tests/planner/test_llm_judge.py).
    planner = Proposer({"run_started": start, "task_completed": done})
    run_id = f"r{next(_RUNS)}"
    outcome, patches = asyncio.run(execute(lite_backend, planner, run_id, max_events=30))
    assert outcome.status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.WAITING)
    assert patches
    for p in patches:
        if p.planner == "kernel":  # the runaway guard, not a proposal
            assert p.proposal is None and outcome.verdict["kind"] == "runaway"
        elif p.planner == "llm":
            assert p.proposal is not None and p.proposal.accepted and p.proposal.reason is None
        else:
            assert p.planner == "fallback"
            assert p.proposal is not None and p.proposal.reason and not p.proposal.accepted


_RUNS = itertools.count()
