"""Fixtures for the tool layer's tests: a SQLite store, real task contexts, server paths."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopkernel.executor import TaskContext, TaskServices
from loopkernel.graph import JSON, GraphState, Task
from loopkernel.ids import RunId, TaskId
from loopkernel.store import SQLiteStore
from loopkernel.tools import ToolSource

SERVERS = Path(__file__).parent / "servers"


@pytest.fixture
def script_source() -> Callable[..., ToolSource]:
    """``script_source(name, "x.py")``: a test-local server under ``servers/`` as a source."""

    def make(name: str, script: str, **options: Any) -> ToolSource:
        return ToolSource(name=name, command=(sys.executable, str(SERVERS / script)), **options)

    return make


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "runs.db")
    s.open_sync()
    yield s
    asyncio.run(s.close())


@pytest.fixture
def make_ctx() -> Callable[..., TaskContext]:
    """A real ``TaskContext`` for one task, as the executor would hand its worker."""

    def make(
        tools: Any,
        *,
        run_id: str = "run-1",
        task_id: str = "t1",
        attempt: int = 1,
        wait_epoch: int = 0,
        human_input: JSON = None,
        wait_reason: str | None = None,
    ) -> TaskContext:
        tid = TaskId(task_id)
        task = Task(
            task_id=tid,
            skill="work",
            wait_epoch=wait_epoch,
            human_input=human_input,
            wait_reason=wait_reason,
        )
        state = GraphState(run_id=RunId(run_id), app="test", params=None, tasks={tid: task})
        return TaskContext(
            state=state,
            task_id=tid,
            attempt=attempt,
            upto_seq=0,
            services=TaskServices(tools=tools),
        )

    return make
