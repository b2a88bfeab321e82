"""What a model may propose for a looplab run with ``--planner llm`` (docs/planner-llm.md).

Apart from the loop itself: the hand-rolled and LangGraph loops of the scoreboard have no
model planner, so the scoreboard's lines row does not count this file (docs/scoreboard.md).
"""

from __future__ import annotations

from loopkernel import AllowedSkill, Allowlist
from loopkernel.planner.llm import Bound, Cite, Derive, Follow, Postconditions, Require

__all__ = ["ALLOW", "MAX_BACKOFF_S"]

_INDEX = {"index": {"type": "integer", "minimum": 1}}
MAX_BACKOFF_S = 2.0
"""The longest wait a model may put before a retry (``backoff_s``)."""
_SKILLS: tuple[AllowedSkill, ...] = (
    AllowedSkill(name="load", description="loads the run's steps", input_schema={}),
    AllowedSkill(
        name="plan",
        description="plans step INDEX, after load or the previous record",
        input_schema={"type": "object", "required": ["index", "step"], "properties": _INDEX},
    ),
    AllowedSkill(
        name="guard",
        description="checks the plan against the policy, after plan",
        input_schema={"type": "object", "required": ["index", "plan"], "properties": _INDEX},
    ),
    AllowedSkill(
        name="act",
        description="acts through an MCP tool, after guard (or a failed verify); a retry "
        f"may wait backoff_s seconds first (0 to {MAX_BACKOFF_S:g}), the model's choice",
        input_schema={
            "type": "object",
            "required": ["index", "attempt", "tool"],
            "properties": {"backoff_s": {"type": "number", "minimum": 0, "maximum": MAX_BACKOFF_S}},
        },
    ),
    AllowedSkill(
        name="verify",
        description="verifies the action, after act",
        input_schema={"type": "object", "required": ["index", "attempt"]},
    ),
    AllowedSkill(
        name="record",
        description="records the verified step, after verify",
        input_schema={"type": "object", "required": ["index", "attempt"]},
    ),
)
ALLOW = Allowlist(
    skills=_SKILLS,
    ops=frozenset({"add", "connect", "cancel", "finish"}),
    finish=frozenset({"succeeded", "failed", "cancelled"}),
    # agree is off: the postconditions judge every proposal. The model's choices: stop
    # the run early (finish failed or cancelled, e.g. before a step the budget cannot pay,
    # or instead of a retry), and retry differently (a retry's act may wait backoff_s
    # first). Every task it adds is the rules' own but for that wait (follow), so every
    # action stays behind its guard with the guard's tool, price and approval, and every
    # retry counts against the verify_stuck tripwire and the budget; a finish succeeded
    # needs the work done and the work's own verdict; no finish passes a pending approval
    # or an escalation (the runtime's rules)
    postconditions=Postconditions(
        # finish succeeded: every loaded step recorded, the verdict's counts the records'
        # and its spend the actions' own
        require=(Require(skill="record", per_item=("load", "steps")),),
        cite=(
            Cite(field="steps_done", skill="record", derive=Derive.COUNT),
            Cite(field="spent_usd", skill="act", derive=Derive.SUM, result_field="cost_usd"),
        ),
        max_tasks=(Bound(skill="load", at_most=1),),
        follow=tuple(
            Follow(skill=skill.name, vary=("backoff_s",) if skill.name == "act" else ())
            for skill in _SKILLS
        ),
    ),
)
"""What a model may propose for a looplab run (``--planner llm``)."""
