"""What a model may propose for a looplab run with ``--planner llm`` (docs/planner-llm.md).

Apart from the loop itself: the hand-rolled and LangGraph loops of the scoreboard have no
model planner, so the scoreboard's lines row does not count this file (docs/scoreboard.md).
"""

from __future__ import annotations

from loopkernel import AllowedSkill, Allowlist

__all__ = ["ALLOW"]

_INDEX = {"index": {"type": "integer", "minimum": 1}}
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
            description="acts through an MCP tool, after guard (or a failed verify)",
            input_schema={"type": "object", "required": ["index", "attempt", "tool"]},
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
    agree=True,
)
"""What a model may propose for a looplab run (``--planner llm``)."""
