"""The run's evidence as the executor keeps it: recorded through the store, read by scope.

What becomes evidence, and where (docs/evidence.md):

- the run's question (``params["question"]``, a string): ``user``, at the first execution;
- a human's answer to a waiting task (a ``human_input`` payload): ``user``, when planned;
- a tool's result (``ctx.call_tool``): ``tool``, keyed by the call's idempotency key;
- a model's reply (``ctx.complete``): ``model``, keyed the same way.

Every item is keyed, so a replay (a resumed run, a journaled tool result returned again)
records nothing new and its ref stays what it was. Every value passes
``loopkernel.evidence.redact`` (secrets by key and by shape) before it reaches the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from loopkernel.evidence import (
    DEFAULT_MAX_ITEM_CHARS,
    DEFAULT_MAX_RUN_CHARS,
    Evidence,
    NewEvidence,
    SourceRef,
    redact,
)
from loopkernel.graph import JSON, Event, GraphState, TaskState
from loopkernel.graph.door import Entry, ValueRefused, admit
from loopkernel.ids import RunId, TaskId
from loopkernel.store import Store

__all__ = ["EvidenceBook"]


def _text(value: JSON) -> tuple[str, str]:
    if isinstance(value, str):
        return "text", value
    return "json", json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


class EvidenceBook:
    """One run's evidence: what the store holds, plus what this execution recorded."""

    def __init__(
        self,
        store: Store,
        run_id: RunId,
        *,
        max_item_chars: int = DEFAULT_MAX_ITEM_CHARS,
        max_run_chars: int = DEFAULT_MAX_RUN_CHARS,
        redactor: Callable[[JSON], JSON] = redact,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.max_item_chars = max_item_chars
        self.max_run_chars = max_run_chars
        self.redactor = redactor
        self.items: dict[str, Evidence] = {}
        """By ref, in ref order."""

    async def load(self) -> None:
        self.items = {e.ref: e for e in await self.store.evidence(self.run_id)}

    async def record(self, key: str, value: JSON, source: SourceRef) -> Evidence:
        try:  # a value an older journal holds that the door refuses: its refusal is kept
            admit(value, Entry.TASK_RESULT)
        except ValueRefused as refused:
            value = f"(not kept: {refused})"
        kind, text = _text(self.redactor(value))
        item = NewEvidence(key=key, kind=kind, content=text, source=source)  # type: ignore[arg-type]
        stored = await self.store.add_evidence(
            self.run_id,
            item,
            max_item_chars=self.max_item_chars,
            max_run_chars=self.max_run_chars,
        )
        self.items[stored.ref] = stored
        return stored

    async def from_params(self, params: JSON) -> None:
        """The run's question, if its parameters have one."""
        if isinstance(params, dict) and isinstance(params.get("question"), str):
            source = SourceRef(kind="user", uri="run:params/question", event_seq=1)
            await self.record("run/question", params["question"], source)

    async def from_event(self, event: Event) -> None:
        """A human's answer to a waiting task is the user's statement."""
        data: Any = event.data
        if isinstance(data, dict) and data.get("payload") is not None:
            source = SourceRef(
                kind="user", uri="human_input", task_id=event.task_id, event_seq=event.seq
            )
            await self.record(f"event/{event.seq}", data["payload"], source)

    def visible(
        self, state: GraphState, task_id: TaskId, upto_seq: int, allowed: Callable[[TaskId], bool]
    ) -> list[Evidence]:
        """The items a task may see: the user's, its own, and those of tasks it may see
        (succeeded by ``upto_seq`` and ``allowed`` by its evidence scope)."""

        def seen(tid: TaskId | None) -> bool:
            if tid is None or tid == task_id:
                return True
            task = state.tasks.get(tid)
            return (
                task is not None
                and task.state is TaskState.SUCCEEDED
                and task.done_seq is not None
                and task.done_seq <= upto_seq
                and allowed(tid)
            )

        items = sorted(self.items.values(), key=lambda e: int(e.ref[1:]))
        return [e for e in items if seen(e.source.task_id)]
