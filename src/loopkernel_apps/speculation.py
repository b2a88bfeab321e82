"""Speculation: three researchers race; at a quorum of two the third is cancelled in flight.

::

    plan --> r1 --.
         --> r2 ---+--> distill (evidence_scope: ancestors) --> finish
         --> r3 --'   (cancelled at quorum; its late result is discarded)

The distiller sees only its ancestors, so the straggler's partial findings can never leak
into the answer. Researcher delays are parameters, so a test can make the straggler slow.

``--planner llm``: a model proposes each patch; the allowlist (``allow_for``) admits the
three skills with their input schemas and the ops add/connect/cancel/finish, and the
postconditions judge every proposal (``agree`` is off): the model picks the angles and how
many researchers (at least the quorum, at most the run's), but a ``finish succeeded``
needs a quorum of researchers and the distiller done with the verdict its answer, the
distiller sees only its ancestors, and the ids are the rules' own so they can carry on.
Anything else is refused by name and the rules answer (docs/planner-llm.md).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from dataclasses import replace

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
from loopkernel.planner.llm import Bound, Cite, Name, Postconditions, Require, Scope
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
)
"""What a model may propose for a speculation run (``--planner llm``), before the run's
own bounds (``allow_for``)."""


def postconditions(researchers: int) -> Postconditions:
    """What any proposal must respect in a run of ``researchers`` researchers."""
    return Postconditions(
        # finish succeeded: a quorum of researchers and the distiller done, the answer the
        # distiller's own
        require=(Require(skill="research", at_least_param="quorum"), Require(skill="distill")),
        cite=(Cite(field="answer", skill="distill", result_field="answer"),),
        # the model picks the angles and how many researchers: at least the quorum, at
        # most the run's researchers, under the ids the rules know (r1 .. rN)
        max_tasks=(
            Bound(skill="plan", at_most=1),
            Bound(skill="research", at_most=researchers, at_least_param="quorum"),
            Bound(skill="distill", at_most=1),
        ),
        names=(
            Name(skill="plan", pattern="plan"),
            Name(skill="research", pattern=f"r[1-{researchers}]"),
            Name(skill="distill", pattern="distill"),
        ),
        # the distiller never sees a straggler's partial notes
        scopes=(Scope(skill="distill", evidence_scope="ancestors"),),
    )


def allow_for(params: Mapping[str, JSON]) -> Allowlist:
    """The allowlist of one run: ``agree`` off, the postconditions judge every proposal."""
    delays = params["delays"]
    n = len(delays) if isinstance(delays, list) else len(ANGLES)
    return replace(ALLOW, postconditions=postconditions(n))


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
        planner=planner_for(params, rules=planner(params), allow=allow_for(params)),
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
