"""Policy: budgets and tripwires as data, consulted on every patch and before every tool call.

::

    policy = Policy(
        budget=Budget(max_usd=1.0, max_tool_calls=50),
        tripwires=Tripwires(irreversible="approve", verify_stuck_after=3),
    )
    Kernel(store, planner, workers, parts=KernelParts(guard=policy.guard()))   # every patch
    policy.check_call(ToolCall(...), usage)                 # before every tool call

Pure: imports nothing above ``loopkernel.graph``; time comes from an injected clock.
"""

from loopkernel.errors import BudgetExceeded, TripwireFired
from loopkernel.policy._budget import Budget, Usage
from loopkernel.policy._policy import (
    Clock,
    IrreversibleMode,
    Policy,
    PolicyGuard,
    ToolCall,
    Tripwires,
    verify_streak,
)

__all__ = [
    "Budget",
    "BudgetExceeded",
    "Clock",
    "IrreversibleMode",
    "Policy",
    "PolicyGuard",
    "ToolCall",
    "TripwireFired",
    "Tripwires",
    "Usage",
    "verify_streak",
]
