"""What a model may propose for a looplab run with ``--planner llm`` (docs/planner-llm.md).

Apart from the loop itself: the hand-rolled and LangGraph loops of the scoreboard have no
model planner, so the scoreboard's lines row does not count this file (docs/scoreboard.md).
"""

from __future__ import annotations

from loopkernel import AllowedSkill, Allowlist
from loopkernel.planner.llm import Bound, Cite, Derive, Postconditions, Require

__all__ = ["ALLOW", "MAX_BACKOFF_S"]

_INDEX = {"index": {"type": "integer", "minimum": 1}}
MAX_BACKOFF_S = 2.0
"""The longest wait a model may put before a retry (``backoff_s``)."""
ALLOW = Allowlist(
    skills=(
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
                "properties": {
                    "backoff_s": {"type": "number", "minimum": 0, "maximum": MAX_BACKOFF_S}
                },
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
    ),
    ops=frozenset({"add", "connect", "cancel", "finish"}),
    finish=frozenset({"succeeded", "failed", "cancelled"}),
    # the path is the rules' (every action behind its guard, every retry counted against
    # the verify_stuck tripwire), but for how long a retry waits; a finish is the model's
    # to propose, judged by the postconditions: it may stop the run early, never end it
    # succeeded without the work, past a pending approval or after an escalation
    agree=True,
    free=frozenset({"finish"}),
    # retry differently: a retry's act may wait before it acts; the attempt, the tool, the
    # guard and the price stay the rules' (so the verify_stuck tripwire and the budget
    # count it), and the schema bounds the wait
    vary=frozenset({("act", "backoff_s")}),
    postconditions=Postconditions(
        # finish succeeded: every loaded step recorded, the verdict's counts the records'
        # and its spend the actions' own
        require=(Require(skill="record", per_item=("load", "steps")),),
        cite=(
            Cite(field="steps_done", skill="record", derive=Derive.COUNT),
            Cite(field="spent_usd", skill="act", derive=Derive.SUM, result_field="cost_usd"),
        ),
        max_tasks=(Bound(skill="load", at_most=1),),
    ),
)
"""What a model may propose for a looplab run (``--planner llm``)."""
