"""The four looplab scenarios as data: shared by the tool server, the LoopKernel app and the
benchmark's hand-rolled and LangGraph loops, so all of them run the very same work.

Each step has a price (what its action costs), whether its action is irreversible, and the
attempt at which its verification passes (``None``: never). Every scenario runs under the
same policy (``POLICY``): at most 1.00 USD, irreversible actions wait for a human, three
failed verifications in a row stop the run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EXPECTED", "POLICY", "SCENARIOS", "step"]


def step(
    name: str, price: float, *, irreversible: bool = False, passes_at: int | None = 1
) -> dict[str, Any]:
    return {
        "name": name,
        "price_usd": price,
        "irreversible": irreversible,
        "passes_at": passes_at,
    }


SCENARIOS: dict[str, list[dict[str, Any]]] = {
    # every step completes; "transform" needs one retry
    "baseline": [step("fetch", 0.10), step("transform", 0.20, passes_at=2), step("report", 0.15)],
    # "deploy" is irreversible: the run halts before it until a human approves
    "irreversible": [
        step("fetch", 0.10),
        step("transform", 0.20),
        step("deploy", 0.25, irreversible=True),
    ],
    # 0.30 + 0.40 spent; "train" (0.50) would pass 1.00: escalated before it
    "overspend": [step("fetch", 0.30), step("transform", 0.40), step("train", 0.50)],
    # "transform" never verifies: escalated after the third failure in a row
    "verify_stuck": [step("fetch", 0.10), step("transform", 0.20, passes_at=None)],
}

POLICY: dict[str, Any] = {
    "max_usd": 1.0,
    "max_tool_calls": None,
    "max_tasks": None,
    "max_wall_seconds": None,
    "irreversible": "approve",
    "verify_stuck_after": 3,
}

EXPECTED: dict[str, dict[str, Any]] = {
    "baseline": {"status": "succeeded", "spent_usd": 0.65, "steps_done": 3},
    "irreversible": {"status": "succeeded", "spent_usd": 0.55, "steps_done": 3},
    "overspend": {"status": "escalated", "spent_usd": 0.70, "steps_done": 2},
    "verify_stuck": {"status": "escalated", "spent_usd": 0.70, "steps_done": 1},
}
"""What every implementation must reach (the irreversible one after one approval)."""
