"""LoopKernel: a durable runtime for agentic AI work.

An agent run is a task graph that a planner patches while it runs; every decision is
journaled, so a run survives ``kill -9``, waits for a human across processes, and can be
audited and resumed.

Importing this package loads the kernel and the SQLite store only: the MCP tool layer
(``loopkernel.tools``) and the PostgreSQL store load when first used.
"""

from loopkernel._app import App, AppParts, Param, load_app
from loopkernel.errors import (
    ApprovalRefused,
    LoopKernelError,
    PatchRejected,
    RunError,
    ToolError,
    ToolTimeout,
    ToolUnavailable,
    UsageError,
)
from loopkernel.evidence import Evidence, SourceRef
from loopkernel.executor import (
    DEFAULT_MAX_EVENTS,
    ApprovalTimeout,
    ExecutionConfig,
    Kernel,
    KernelParts,
    NeedsApproval,
    RunOutcome,
    StartedRun,
    TaskContext,
    Worker,
)
from loopkernel.graph import (
    JSON,
    Event,
    EventKind,
    GraphPatch,
    RunStatus,
    Task,
    TaskSpec,
    TaskState,
    Verdict,
    VerdictKind,
)
from loopkernel.ids import RunId, TaskId
from loopkernel.planner import At, BasePlanner, Flow, Planner, Proposal, Snapshot, Step
from loopkernel.planner.llm import AllowedSkill, Allowlist, LLMPlanner, planner_for
from loopkernel.store import Knowledge, NewPassage, Passage, SQLiteStore, Store, open_store

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "JSON",
    "AllowedSkill",
    "Allowlist",
    "App",
    "AppParts",
    "ApprovalRefused",
    "ApprovalTimeout",
    "At",
    "BasePlanner",
    "Event",
    "EventKind",
    "Evidence",
    "ExecutionConfig",
    "Flow",
    "GraphPatch",
    "Kernel",
    "KernelParts",
    "Knowledge",
    "LLMPlanner",
    "LoopKernelError",
    "NeedsApproval",
    "NewPassage",
    "Param",
    "Passage",
    "PatchRejected",
    "Planner",
    "Proposal",
    "RunError",
    "RunId",
    "RunOutcome",
    "RunStatus",
    "SQLiteStore",
    "Snapshot",
    "SourceRef",
    "StartedRun",
    "Step",
    "Store",
    "Task",
    "TaskContext",
    "TaskId",
    "TaskSpec",
    "TaskState",
    "ToolError",
    "ToolTimeout",
    "ToolUnavailable",
    "UsageError",
    "Verdict",
    "VerdictKind",
    "Worker",
    "load_app",
    "open_store",
    "planner_for",
]
