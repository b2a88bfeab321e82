"""Speculation: three researchers race; at a quorum of two the third is cancelled in flight.

::

    plan --> r1 --.
         --> r2 ---+--> distill (evidence_scope: ancestors) --> finish
         --> r3 --'   (cancelled at quorum; its late result is discarded)

The distiller sees only its ancestors, so the straggler's partial findings can never leak
into the answer. Researcher delays are parameters, so a test can make the straggler slow.

``--planner llm``: a model proposes each patch; the allowlist (``ALLOW``) admits the three
skills with their input schemas, the ops add/connect/cancel/finish, and only a proposal
whose effect on the graph is the rules' own (``agree``). So the run ends exactly as with
``--planner rules`` (same status, same digest) whatever the model says; what changes is
who planned each event, in the journal (docs/models.md).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping

from loopkernel import (
    JSON,
    AllowedSkill,
    Allowlist,
    App,
    AppParts,
    Param,
    TaskContext,
    UsageError,
    planner_for,
)
from loopkernel.planner import Flow, Step, quorum
from loopkernel.testing import trace

ANGLES = ("prior work", "counter-evidence", "first principles", "benchmarks", "failure reports")


ALLOW = Allowlist(
    skills=(
        AllowedSkill(
            name="plan",
            description="lists the angles the researchers take",
            input_schema={
                "type": "object",
                "properties": {"researchers": {"type": "integer", "minimum": 1, "maximum": 5}},
                "required": ["researchers"],
                "additionalProperties": False,
            },
        ),
        AllowedSkill(
            name="research",
            description="researches one angle, after plan",
            input_schema={
                "type": "object",
                "properties": {"angle": {"type": "string"}, "delay": {"type": "number"}},
                "required": ["angle", "delay"],
                "additionalProperties": False,
            },
        ),
        AllowedSkill(
            name="distill",
            description="writes the answer from the winning researchers (evidence: ancestors)",
            input_schema={
                "type": "object",
                "properties": {"quorum": {"type": "integer"}, "delay": {"type": "number"}},
                "required": ["quorum", "delay"],
                "additionalProperties": False,
            },
        ),
    ),
    ops=frozenset({"add", "connect", "cancel", "finish"}),
    finish=frozenset({"succeeded", "failed"}),
    agree=True,
)
"""What a model may propose for a speculation run (``--planner llm``)."""


def planner(params: Mapping[str, JSON]) -> Flow:
    """plan, then a quorum of researchers, then the distiller over the winners only."""
    delays = [float(d) for d in params["delays"]]

    def researcher(i: int, delay: float) -> Step:
        return Step(
            f"r{i}",
            "research",
            input=lambda at: {"angle": at.result("plan")["angles"][i - 1], "delay": delay},
        )

    return Flow(
        Step("plan", input={"researchers": len(delays)}),
        quorum(int(params["quorum"]), of=[researcher(i, d) for i, d in enumerate(delays, 1)]),
        Step(
            "distill",
            input={"quorum": int(params["quorum"]), "delay": float(params["distill_delay"])},
            evidence_scope="ancestors",
        ),
        verdict=lambda at: {"answer": at.result("distill")["answer"]},
    )


async def plan(ctx: TaskContext) -> JSON:
    trace("start", ctx.task_id)
    n = int(ctx.input["researchers"])
    result = {"angles": list(ANGLES[:n])}
    trace("done", ctx.task_id)
    return result


async def research(ctx: TaskContext) -> JSON:
    trace("start", ctx.task_id)
    angle = str(ctx.input["angle"])
    try:
        await asyncio.sleep(float(ctx.input["delay"]))
    except asyncio.CancelledError:
        # A researcher that is stopped writes up what it has and hands it back anyway:
        # the kernel must journal it as a late result and never let it reach the answer.
        trace("cancelled", ctx.task_id)
        await asyncio.sleep(0.01)
        return {"angle": angle, "partial": True, "claims": [f"unfinished notes on {angle}"]}
    digest = hashlib.sha256(angle.encode()).hexdigest()[:8]
    result = {"angle": angle, "partial": False, "claims": [f"{angle}: finding {digest}"]}
    trace("done", ctx.task_id)
    return result


async def distill(ctx: TaskContext) -> JSON:
    trace("start", ctx.task_id)
    await asyncio.sleep(float(ctx.input["delay"]))
    sources = sorted(
        tid for tid, r in ctx.evidence.items() if isinstance(r, dict) and "claims" in r
    )
    claims = [claim for tid in sources for claim in ctx.evidence[tid]["claims"]]
    result = {"answer": " | ".join(claims), "sources": sources}
    trace("done", ctx.task_id)
    return result


def build(params: Mapping[str, JSON]) -> AppParts:
    delays = params["delays"]
    if not isinstance(delays, list) or not 1 <= len(delays) <= len(ANGLES):
        raise UsageError(f"delays must be a list of 1..{len(ANGLES)} numbers")
    if not 1 <= int(params["quorum"]) <= len(delays):
        raise UsageError("quorum must be between 1 and the number of researchers")
    return AppParts(
        planner=planner_for(params, rules=planner(params), allow=ALLOW),
        workers={"plan": plan, "research": research, "distill": distill},
    )


app = App(
    name="speculation",
    description="three researchers race; a quorum of two wins, the third is cancelled in flight",
    build=build,
    parameters={
        "delays": Param(
            kind="list",
            minimum=1,
            maximum=len(ANGLES),
            items=Param(kind="number", minimum=0, maximum=3600),
            help="seconds each researcher takes",
            default=[0.3, 0.6, 5.0],
        ),
        "quorum": Param(kind="int", minimum=1, maximum=len(ANGLES), default=2),
        "distill_delay": Param(kind="number", minimum=0, maximum=3600, default=0.2),
        "planner": Param(
            kind="str",
            choices=("rules", "llm"),
            help="who plans (docs/planner-llm.md)",
            default="rules",
        ),
    },
    scenarios={
        "fast": {"delays": [0.01, 0.02, 2.0], "distill_delay": 0.05},
        "demo": {"delays": [0.4, 0.9, 6.0]},
    },
)
