"""The executor: the loop that runs a run, its worker context, and the crash points."""

from loopkernel.executor._context import (
    ModelCaller,
    NeedsApproval,
    TaskContext,
    ToolCaller,
    Worker,
)
from loopkernel.executor._kernel import (
    DEFAULT_MAX_EVENTS,
    TOKEN_REQUIRED,
    Kernel,
    Observer,
    PatchGuard,
    RunOutcome,
    StartedRun,
    check_keep_finished,
    hash_token,
)
from loopkernel.executor._timers import ApprovalTimeout

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "TOKEN_REQUIRED",
    "ApprovalTimeout",
    "Kernel",
    "ModelCaller",
    "NeedsApproval",
    "Observer",
    "PatchGuard",
    "RunOutcome",
    "StartedRun",
    "TaskContext",
    "ToolCaller",
    "Worker",
    "check_keep_finished",
    "hash_token",
]
