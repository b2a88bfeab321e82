"""How a worker's asyncio task is made: its own coroutine, started eagerly where that is safe.

``EAGER``: on Python 3.12+ a worker's task starts eagerly (``asyncio.Task(eager_start=
True)``): it runs at once, inside the executor's ``_launch``, up to its first wait, so one
that never waits (a trivial step) is done before ``_launch`` returns and costs no loop
turn of its own (docs/performance.md, "Where a step's instructions go"). It is a task of
its own from its first line: ``asyncio.current_task()`` inside it is its own (a timeout or
TaskGroup it opens can cancel only it), and its context is a copy. Python 3.11 has no safe
form (running the coroutine's first step outside a task would show it the kernel's task),
so there every worker starts on the loop's next turn.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Awaitable, Coroutine
from typing import Any

from loopkernel.executor._context import TaskContext, Worker
from loopkernel.graph import JSON

__all__ = ["EAGER", "started", "task_of"]

EAGER = sys.version_info >= (3, 12)
"""Whether workers' tasks start eagerly (see the module docstring)."""


def task_of(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, JSON]) -> asyncio.Task[JSON]:
    """``coro``'s task: started at once where ``EAGER``, else on the loop's next turn."""
    if EAGER:
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    return loop.create_task(coro)


def started(worker: Worker, ctx: TaskContext) -> Coroutine[Any, Any, JSON]:
    """The worker's own coroutine as the task's, without a frame of the kernel's around it
    (one fewer a step); wrapped where calling the worker gives another awaitable, or raises
    (then the task fails, as it did when the call ran inside it, not the loop)."""
    try:
        coro = worker(ctx)
    except Exception as exc:
        return _raising(exc)
    if inspect.iscoroutine(coro):
        return coro
    return _awaited(coro)


async def _awaited(awaitable: Awaitable[JSON]) -> JSON:
    return await awaitable


async def _raising(exc: Exception) -> JSON:
    raise exc
