"""Every error LoopKernel raises, in one tree.

::

    LoopKernelError                 root; carries a stable ``code`` and keyword attributes
    ├── UsageError                  the caller misused the API or the CLI (bad input, unknown run)
    │   ├── RunNotFound
    │   ├── IncompatibleVersion     this version of the app refuses to resume the run
    │   └── ApprovalRefused         a forged, replayed or late approval
    ├── PatchRejected               a GraphPatch broke a rule; nothing of it was applied
    ├── StoreError                  the store cannot serve the request
    │   ├── NotADatabase            missing, foreign, corrupt or unreadable database
    │   ├── SchemaTooNew            the database was written by a newer LoopKernel
    │   ├── ReplayDivergence        a replayed step does not match the journal
    │   ├── LeaseLost               another executor owns the run now (fencing)
    │   ├── RunHeld                 another executor holds the run's lease; nothing was written
    │   └── StoreUnavailable        the database could not be reached or written; retry
    └── RunError                    something stopped a run; ``verdict()`` is what the store keeps
        ├── ToolError               bad arguments, bad output, or the tool's handler raised
        ├── ToolTimeout             the client deadline passed; the request was cancelled
        ├── ToolUnavailable         the tool server would not start, died, or spoke no MCP
        ├── TransientFault          a fault that may pass outlasted its retries; the run
        │                           was left running, resumable
        ├── ModelError              the model gateway refused the call or the reply was unusable
        ├── ModelTimeout            the model call passed its deadline
        ├── ModelUnavailable        the gateway or its provider could not be reached; retry
        ├── BudgetExceeded          a budget limit would be passed
        ├── TripwireFired           a tripwire stopped the run
        └── RunawayRun              the run passed its ``max_events``

Errors are data: keyword attributes only, picklable, and ``str(err)`` names the fix where
there is one.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "ApprovalRefused",
    "BudgetExceeded",
    "IncompatibleVersion",
    "LeaseLost",
    "LoopKernelError",
    "ModelError",
    "ModelTimeout",
    "ModelUnavailable",
    "NotADatabase",
    "PatchRejected",
    "ReplayDivergence",
    "RunError",
    "RunHeld",
    "RunNotFound",
    "RunawayRun",
    "SchemaTooNew",
    "StoreError",
    "StoreUnavailable",
    "ToolError",
    "ToolTimeout",
    "ToolUnavailable",
    "TransientFault",
    "TripwireFired",
    "UsageError",
]


class LoopKernelError(Exception):
    """Root of every LoopKernel error."""

    code: ClassVar[str] = "loopkernel_error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        self.message = message
        self.attrs = attrs
        for name, value in attrs.items():
            setattr(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.attrs))

    def verdict(self) -> dict[str, Any]:
        """The JSON verdict a run keeps when this error stops it."""
        return {
            "kind": self.code,
            "type": type(self).__name__,
            "message": self.message,
            **{k: v for k, v in self.attrs.items() if isinstance(v, str | int | float | bool)},
        }


def _rebuild(cls: type[LoopKernelError], message: str, attrs: dict[str, Any]) -> LoopKernelError:
    return cls(message, **attrs)


class UsageError(LoopKernelError):
    code = "usage_error"


class RunNotFound(UsageError):
    code = "run_not_found"


class IncompatibleVersion(UsageError):
    """The run was started by another version of its app, and this one cannot safely go on
    with it: the app declares itself incompatible (``App(compatible_with=...)``), or a task
    still to run names a skill this version no longer registers. Nothing was journaled; the
    run stays resumable by a version that can (``run_version``, ``app_version``)."""

    code = "incompatible_version"


class ApprovalRefused(UsageError):
    code = "approval_refused"


class PatchRejected(LoopKernelError):
    """A patch broke a rule. ``op`` is the index of the offending op, ``rule`` its name."""

    code = "patch_rejected"


class StoreError(LoopKernelError):
    code = "store_error"


class NotADatabase(StoreError):
    """The path or URL holds no usable LoopKernel database: nothing there, a directory,
    another application's file, a corrupt or unreadable one. Nothing was written to it."""

    code = "not_a_database"


class SchemaTooNew(StoreError):
    code = "schema_too_new"


class ReplayDivergence(StoreError):
    code = "replay_divergence"


class LeaseLost(StoreError):
    """The run's lease epoch moved on: another worker took the run over. The write that
    raised was not made; the worker must stop the run and write nothing more for it."""

    code = "lease_lost"
    retryable = True


class RunHeld(StoreError):
    """Another executor (a ``loopkernel run``/``resume`` process or a worker) holds the
    run's lease; this one wrote nothing. ``holder`` names it, ``lease_until`` is when its
    lease ends unless renewed (seconds since the epoch), ``epoch`` the lease epoch seen."""

    code = "run_held"


class StoreUnavailable(StoreError):
    """The database did not answer or could not write (connection lost, server down, pool
    exhausted; SQLite locked past its busy timeout, disk full, I/O error); the transaction
    was rolled back, so retrying later is safe."""

    code = "store_unavailable"
    retryable = True


class RunError(LoopKernelError):
    code = "run_error"


class ToolError(RunError):
    code = "tool_error"


class ToolTimeout(RunError):
    code = "tool_timeout"
    retryable = True


class ToolUnavailable(RunError):
    code = "tool_unavailable"
    retryable = True


class TransientFault(RunError):
    """A fault that may pass (a tool timed out, its server is gone or out of disk) outlasted
    the tool's retry policy, or is not retried at all (an irreversible tool). The executor
    stopped and left the run ``running``: ``resume`` re-sends the call under its
    idempotency key. ``cause`` is the error type, ``tool`` and ``task_id`` name the call."""

    code = "transient_fault"


class ModelError(RunError):
    """The model gateway answered with an error that retrying will not fix: a bad request,
    a refused token, a reply that is not the JSON the schema asks for. ``kind`` names it."""

    code = "model_error"


class ModelTimeout(RunError):
    """The model call passed its deadline (the gateway's, or the client's)."""

    code = "model_timeout"
    retryable = True


class ModelUnavailable(RunError):
    """The gateway could not be reached, or its provider kept failing (429 / 5xx) after
    the gateway's retries. Retrying later is safe: the call carries its idempotency key."""

    code = "model_unavailable"
    retryable = True


class BudgetExceeded(RunError):
    code = "budget_exceeded"


class TripwireFired(RunError):
    code = "tripwire"


class RunawayRun(RunError):
    code = "runaway"
