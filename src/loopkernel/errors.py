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
    │   ├── LeaseLost            *  another executor owns the run now (fencing)
    │   ├── RunHeld                 another executor holds the run's lease; nothing was written
    │   └── StoreUnavailable     *  the database could not be reached or written
    └── RunError                    something stopped a run; ``verdict()`` is what the store keeps
        ├── ToolError               bad arguments, bad output, or the tool's handler raised
        │   └── ToolTransientError  *  the handler hit a fault that may pass (ENOSPC, EIO ...)
        ├── ToolTimeout          *  the client deadline passed; the request was cancelled
        ├── ToolUnavailable         the tool server cannot serve (an unknown outcome ...)
        │   ├── ToolServerDied   *  the server process ended (or was killed while starting)
        │   ├── ToolCannotStart     the command is missing, or the server exits at start
        │   └── ToolNotMCP          garbage on stdout, no MCP handshake
        ├── TransientFault          a fault that may pass outlasted its retries; the run
        │                           was left running, resumable
        ├── ModelError              the model gateway refused the call or the reply was unusable
        │   └── ModelUnauthorized   the gateway refused the token (401)
        ├── ModelTimeout         *  the model call passed its deadline
        ├── ModelUnavailable     *  the gateway or its provider could not be reached
        ├── BudgetExceeded          a budget limit would be passed
        ├── TripwireFired           a tripwire stopped the run
        └── RunawayRun              the run passed its ``max_events``

``*`` marks the faults that may pass: ``retryable`` is true, and ``is_retryable(err)`` is
the one rule every retry loop reads (the tool layer's retry policy, the model journal, the
client's store retry). An instance may say otherwise (``retryable=`` when it is made), as
Temporal's ``ApplicationError(non_retryable=...)`` does. A retry loop that gives up raises
the error again through ``retries_spent(...)``: the executor then stops and leaves the run
resumable (``TransientFault``) instead of failing the task.

A subclass that refines a journaled family keeps the family's bytes: ``ToolServerDied``
writes ``"type": "ToolUnavailable", "kind": "server_died"`` in a verdict, as before the
subclass existed, and ``revive`` turns such a verdict back into the subclass.

Errors are data: keyword attributes only, picklable, and ``str(err)`` names the fix where
there is one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

__all__ = [
    "ApprovalRefused",
    "BudgetExceeded",
    "IncompatibleVersion",
    "LeaseLost",
    "LoopKernelError",
    "ModelError",
    "ModelTimeout",
    "ModelUnauthorized",
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
    "ToolCannotStart",
    "ToolError",
    "ToolNotMCP",
    "ToolServerDied",
    "ToolTimeout",
    "ToolTransientError",
    "ToolUnavailable",
    "TransientFault",
    "TripwireFired",
    "UsageError",
    "family_of",
    "install_hint",
    "is_retryable",
    "revive",
]

E = TypeVar("E", bound="LoopKernelError")


class LoopKernelError(Exception):
    """Root of every LoopKernel error."""

    code: ClassVar[str] = "loopkernel_error"
    """The stable code a verdict's ``kind`` holds (unless the error names a ``kind``)."""
    family: ClassVar[str] = "LoopKernelError"
    """The type name a verdict holds: the class's own, or the journaled family it refines."""
    kind: ClassVar[str | None] = None
    """The ``kind`` attribute a refining subclass stands for (``server_died`` ...)."""
    retryable: bool = False
    """Whether the fault may pass: the class's answer unless the instance was told."""
    gave_up: bool = False
    """A retry loop gave up on this fault: the executor leaves the run resumable. (Not
    ``spent``: an attribute of that name is a budget's amount, ``BudgetExceeded.spent``.)"""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "family" not in cls.__dict__:
            cls.family = cls.__name__

    def __init__(self, message: str, *, retryable: bool | None = None, **attrs: Any) -> None:
        super().__init__(message)
        if self.kind is not None:
            attrs.setdefault("kind", self.kind)
        self.message = message
        self.attrs = attrs
        for name, value in attrs.items():
            setattr(self, name, value)
        if retryable is not None:
            self.retryable = retryable

    def __reduce__(self) -> tuple[Any, ...]:
        told = self.__dict__.get("retryable")
        return (_rebuild, (type(self), self.message, self.attrs, told, self.gave_up))

    def verdict(self) -> dict[str, Any]:
        """The JSON verdict a run keeps when this error stops it."""
        out: dict[str, Any] = {
            "kind": self.code,
            "type": self.family,
            "message": self.message,
            **{k: v for k, v in self.attrs.items() if isinstance(v, str | int | float | bool)},
        }
        if self.gave_up:
            out["transient"] = True
        return out

    def retries_spent(self: E, **attrs: Any) -> E:
        """This error again, marked as a fault whose retries were spent (``gave_up``), with
        ``attrs`` added: raised by a retry loop that gives up."""
        told = self.__dict__.get("retryable")
        again = type(self)(self.message, retryable=told, **{**self.attrs, **attrs})
        again.gave_up = True
        return again


def _rebuild(
    cls: type[LoopKernelError],
    message: str,
    attrs: dict[str, Any],
    retryable: bool | None = None,
    gave_up: bool = False,
) -> LoopKernelError:
    err = cls(message, retryable=retryable, **attrs)
    err.gave_up = gave_up
    return err


def family_of(exc: BaseException) -> str:
    """The type name journals and messages give ``exc``: a LoopKernel error's ``family``
    (``ToolServerDied`` is a ``ToolUnavailable``), else its class's name."""
    return exc.family if isinstance(exc, LoopKernelError) else type(exc).__name__


def is_retryable(err: BaseException) -> bool:
    """The one rule of every retry: a LoopKernel error whose fault may pass."""
    return isinstance(err, LoopKernelError) and err.retryable


def revive(family: type[E], data: Mapping[str, Any], *, default: str | None = None) -> E:
    """The error a journaled verdict (or a wire error) stands for: the subclass of
    ``family`` whose ``family`` name is ``data["type"]`` and whose ``kind`` is
    ``data["kind"]``, else the class of that name, else ``family`` itself. ``message`` and
    ``type`` are not attributes; keys that are no identifiers are dropped."""
    name = str(data.get("type") or default or family.family)
    attrs = {
        k: v
        for k, v in data.items()
        if k not in ("type", "message", "transient") and k.isidentifier()
    }
    cls = _refined(family, name, attrs.get("kind"))
    err = cls(str(data.get("message", "")), **attrs)
    err.gave_up = data.get("transient") is True
    return err


def _refined(family: type[E], name: str, kind: object) -> type[E]:
    found: type[E] = family
    for cls in _descendants(family):
        if cls.family != name:
            continue
        if cls.kind is not None and cls.kind == kind:
            return cls
        if cls.kind is None and cls.__name__ == name:
            found = cls
    return found


def _descendants(cls: type[E]) -> list[type[E]]:
    out: list[type[E]] = [cls]
    for sub in cls.__subclasses__():
        out.extend(_descendants(sub))
    return out


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
    exhausted; SQLite locked past its lock wait, disk full, I/O error); the transaction
    was rolled back, so retrying later is safe."""

    code = "store_unavailable"
    retryable = True


class RunError(LoopKernelError):
    code = "run_error"


class ToolError(RunError):
    """The tool answered with an error: ``kind`` names which (``invalid_arguments``,
    ``invalid_output``, ``handler_error``, ``unknown_tool``, ``duplicate_key``)."""

    code = "tool_error"


class ToolTransientError(ToolError):
    """The tool's handler raised a fault that may pass (ENOSPC, EIO, ``TimeoutError``):
    the layer re-sends the call by the tool's retry policy."""

    family = "ToolError"
    kind = "handler_transient"
    retryable = True


class ToolTimeout(RunError):
    code = "tool_timeout"
    retryable = True


class ToolUnavailable(RunError):
    """The tool server cannot serve the call; the subclasses say why. Itself (``kind``
    ``outcome_unknown``, ``schema_mismatch`` ...) it is final."""

    code = "tool_unavailable"


class ToolServerDied(ToolUnavailable):
    """The server process ended during or before the call (MCP -32000, the pipe closed),
    or was killed by a signal while it started: a fault that may pass."""

    family = "ToolUnavailable"
    kind = "server_died"
    retryable = True


class ToolCannotStart(ToolUnavailable):
    """The command is missing or cannot run, or the server exited before its handshake:
    a setup that is wrong, final."""

    family = "ToolUnavailable"
    kind = "cannot_start"


class ToolNotMCP(ToolUnavailable):
    """The server wrote garbage on stdout or never answered ``initialize``: final."""

    family = "ToolUnavailable"
    kind = "not_mcp"


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


class ModelUnauthorized(ModelError):
    """The gateway refused the token (401): set ``LOOPKERNEL_GATEWAY_TOKEN`` to the token
    the gateway was started with."""

    family = "ModelError"
    kind = "unauthorized"


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


def install_hint(extra: str) -> str:
    """The command that installs an optional extra, as every one-line message says it.
    One install story (docs/operations.md, "Installing"): no public index serves LoopKernel
    yet, so an extra comes from a clone (``pip install -e '.[tools]'``) or with the wheel
    built from one (``pip install 'dist/loopkernel-…-py3-none-any.whl[tools]'``)."""
    return f"pip install -e '.[{extra}]' in a clone (or the built wheel with [{extra}])"
