"""The executor: the loop that runs a run, its worker context, and the crash points."""

from loopkernel.executor._config import (
    DEFAULT_KEEP_FINISHED,
    DEFAULT_LEASE_S,
    DEFAULT_STORE_RETRY_S,
    ExecutionConfig,
    KernelParts,
    Observer,
    PatchGuard,
)
from loopkernel.executor._context import (
    ModelCaller,
    NeedsApproval,
    TaskContext,
    TaskServices,
    ToolCaller,
    Worker,
)
from loopkernel.executor._kernel import (
    DEFAULT_MAX_EVENTS,
    TOKEN_REQUIRED,
    Kernel,
    RunOutcome,
    StartedRun,
    check_keep_finished,
    hash_token,
)
from loopkernel.executor._timers import ApprovalTimeout

__all__ = [
    "DEFAULT_KEEP_FINISHED",
    "DEFAULT_LEASE_S",
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_STORE_RETRY_S",
    "TOKEN_REQUIRED",
    "ApprovalTimeout",
    "ExecutionConfig",
    "Kernel",
    "KernelParts",
    "ModelCaller",
    "NeedsApproval",
    "Observer",
    "PatchGuard",
    "RunOutcome",
    "StartedRun",
    "TaskContext",
    "TaskServices",
    "ToolCaller",
    "Worker",
    "check_keep_finished",
    "hash_token",
]
