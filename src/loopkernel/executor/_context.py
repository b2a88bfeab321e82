"""What a worker sees: ``TaskContext``, and the signals a worker may raise."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from loopkernel._hooks import NeedsApproval
from loopkernel.evidence import Evidence, SourceRef
from loopkernel.graph import JSON, GraphState, TaskState
from loopkernel.ids import RunId, TaskId

if TYPE_CHECKING:  # the model face lives above the executor; only its types are named here
    from loopkernel.executor._evidence import EvidenceBook
    from loopkernel.models import Ask, Completion, Message

__all__ = ["ModelCaller", "NeedsApproval", "TaskContext", "TaskServices", "ToolCaller", "Worker"]


class ToolCaller(Protocol):
    """The tool layer as the kernel sees it: one call, journaled, validated, policed."""

    async def call(
        self,
        ctx: TaskContext,
        index: int,
        name: str,
        arguments: Mapping[str, JSON],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-call deadline handed on
    ) -> JSON: ...


class ModelCaller(Protocol):
    """Model calls as the kernel sees them: one call, journaled in the effect journal
    (``loopkernel.models.ModelLayer``)."""

    async def complete(
        self,
        ctx: TaskContext,
        index: int,
        messages: Sequence[Message],
        ask: Ask,
    ) -> Completion: ...


class _Visible(Mapping[TaskId, JSON]):
    """Results a worker may see, frozen at the moment its task started."""

    def __init__(self, state: GraphState, allowed: Callable[[TaskId], bool], upto: int) -> None:
        self._state = state
        self._allowed = allowed
        self._upto = upto

    def _visible(self, tid: TaskId) -> bool:
        task = self._state.tasks.get(tid)
        return (
            task is not None
            and task.state is TaskState.SUCCEEDED
            and task.done_seq is not None
            and task.done_seq <= self._upto
            and self._allowed(tid)
        )

    def __getitem__(self, key: TaskId) -> JSON:
        if not self._visible(key):
            raise KeyError(key)
        return self._state.tasks[key].result

    def __iter__(self) -> Iterator[TaskId]:
        return (tid for tid in self._state.tasks if self._visible(tid))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _everything(_tid: TaskId) -> bool:
    return True


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskServices:
    """What a task's context calls out to, the same for every task of a run."""

    tools: ToolCaller | None = None
    """The kernel's tool layer (``None``: a tool call is a ``UsageError``)."""
    models: ModelCaller | None = None
    """The kernel's model layer (``None``: a model call is a ``UsageError``)."""
    book: EvidenceBook | None = None
    """The run's evidence book (``None``: no evidence is kept)."""


class TaskContext:
    """Handed to a worker: its input, what it may see, and the one way to call tools and
    models."""

    def __init__(
        self,
        *,
        state: GraphState,
        task_id: TaskId,
        attempt: int,
        upto_seq: int,
        services: TaskServices = TaskServices(),
    ) -> None:
        task = state.tasks[task_id]
        self.run_id: RunId = state.run_id
        self.task_id: TaskId = task_id
        self.skill: str = task.skill
        self.input: JSON = task.input
        self.params: JSON = state.params
        self.attempt: int = attempt
        self.human_input: JSON = task.human_input
        self.wait_epoch: int = task.wait_epoch
        self.wait_reason: str | None = task.wait_reason
        """Why the task was last parked (it stays after the approval that resumed it)."""
        preds = frozenset(state.predecessors(task_id))
        self.predecessors: Mapping[TaskId, JSON] = _Visible(state, preds.__contains__, upto_seq)
        allowed: Callable[[TaskId], bool] = _everything
        if task.evidence_scope == "ancestors":
            allowed = state.ancestors(task_id).__contains__
        self.evidence: Mapping[TaskId, JSON] = _Visible(state, allowed, upto_seq)
        """Results of the tasks in this task's evidence scope, by task id."""
        self._scope = (state, upto_seq, allowed)
        self._book = services.book
        self._external = 0
        self._tools = services.tools
        self._calls = 0
        self._models = services.models

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, JSON] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-call deadline handed on
    ) -> JSON:
        """Call a tool through the tool layer; the n-th call of a task has a stable key.

        ``timeout`` overrides the tool's deadline for this call (``ToolTimeout`` past it).
        """
        if self._tools is None:
            from loopkernel.errors import UsageError

            raise UsageError(
                f"task {self.task_id!r} called tool {name!r} but the kernel has no tool layer; "
                "pass tools=... to Kernel"
            )
        index = self._calls
        self._calls += 1
        result = await self._tools.call(self, index, name, dict(arguments or {}), timeout=timeout)
        if self._book is not None:
            source = SourceRef(kind="tool", uri=f"tool:{name}", task_id=self.task_id)
            await self._book.record(f"tool/{self.task_id}/{index}", result, source)
        return result

    async def add_evidence(self, content: JSON, *, uri: str) -> Evidence | None:
        """Record outside text this task read some other way (a file, a web page) as
        ``external`` evidence; the n-th call of a task has a stable key, so a rerun of the
        task records nothing twice. ``None`` when the kernel keeps no evidence."""
        index = self._external
        self._external += 1
        if self._book is None:
            return None
        source = SourceRef(kind="external", uri=uri, task_id=self.task_id)
        return await self._book.record(f"external/{self.task_id}/{index}", content, source)

    @property
    def evidence_items(self) -> list[Evidence]:
        """Typed evidence in this task's scope (``E1, E2, ...``, each with its source): the
        user's statements, this task's own tool results and model replies, and those of
        the tasks ``evidence`` shows (so ``ancestors`` stays exact)."""
        if self._book is None:
            return []
        state, upto, allowed = self._scope
        return self._book.visible(state, self.task_id, upto, allowed)

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 256,
        response_schema: dict[str, Any] | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - a per-call deadline handed on
        validate: bool = True,
    ) -> Completion:
        """Ask the model gateway; the n-th call of a task (tool or model) has a stable key.
        ``validate=False``: the schema constrains the provider's decoding, and the worker
        judges the reply itself (one that breaks the schema is returned, not raised).

        Journaled like a tool call: an answer already journaled is returned again
        (``replayed=True``, nothing charged); a call in flight at a crash is re-sent with
        the same key, and the gateway's ledger answers it without a second provider call.
        Raises ``ModelError``, ``ModelTimeout``, ``ModelUnavailable`` or ``BudgetExceeded``
        (which escalates the run).
        """
        if self._models is None:
            from loopkernel.errors import UsageError

            raise UsageError(
                f"task {self.task_id!r} asked a model but the kernel has no model gateway; "
                "set LOOPKERNEL_GATEWAY and LOOPKERNEL_GATEWAY_TOKEN (see docs/models.md) "
                "or pass models=ModelLayer(...) to Kernel"
            )
        from loopkernel.models import Ask

        index = self._calls  # one count for tool and model calls: the n-th effect of a task
        self._calls += 1
        ask = Ask(
            max_tokens=max_tokens,
            response_schema=response_schema,
            timeout_s=timeout,
            validate=validate,
        )
        reply = await self._models.complete(self, index, messages, ask)
        if self._book is not None:
            source = SourceRef(kind="model", uri=f"model:{reply.model}", task_id=self.task_id)
            await self._book.record(f"model/{self.task_id}/{index}", reply.text, source)
        return reply


Worker = Callable[[TaskContext], Awaitable[Any]]
"""A skill: an async callable that takes the context and returns a JSON value."""
