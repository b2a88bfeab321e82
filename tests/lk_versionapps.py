"""One app in four versions, for tests of a resume by another version (``lk_versionapps:vN``).

``v1`` and ``v2`` are the same three-step flow (v2 answers the last step differently);
``v3`` no longer registers the last step's skill; ``v4`` declares it resumes only runs of
version 4.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopkernel import (
    App,
    AppParts,
    BasePlanner,
    Event,
    GraphPatch,
    Snapshot,
    TaskContext,
    TaskSpec,
)
from loopkernel.testing import trace


class Steps(BasePlanner):
    def __init__(self, version: str) -> None:
        self.version = version

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="a", skill="one"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "a":
            return GraphPatch().add(TaskSpec(task_id="b", skill="two"), after=["a"])
        if event.task_id == "b":
            return GraphPatch().add(TaskSpec(task_id="c", skill="three"), after=["b"])
        return GraphPatch().finish("succeeded", {"by": self.version})


async def work(ctx: TaskContext) -> Any:
    trace("start", ctx.task_id)
    return {"task": ctx.task_id}


def _builder(version: str, skills: tuple[str, ...]) -> Any:
    def build(params: Mapping[str, Any]) -> AppParts:
        return AppParts(planner=Steps(version), workers=dict.fromkeys(skills, work))

    return build


ALL = ("one", "two", "three")
v1 = App(name="steps", description="three steps", build=_builder("1", ALL), version="1")
v2 = App(name="steps", description="three steps", build=_builder("2", ALL), version="2")
v3 = App(name="steps", description="three steps", build=_builder("3", ("one", "two")), version="3")
v4 = App(
    name="steps",
    description="three steps",
    build=_builder("4", ALL),
    version="4",
    compatible_with=("4",),
)
