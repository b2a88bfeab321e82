"""Small apps for subprocess tests, loaded by the CLI as ``lk_testapps:NAME``."""

from __future__ import annotations

import asyncio
import dataclasses
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


class GatePlanner(BasePlanner):
    """prep -> gate (parked for a human) -> ship -> finish."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return (
            GraphPatch()
            .add(TaskSpec(task_id="prep", skill="step"))
            .add(TaskSpec(task_id="gate", skill="step"), after=["prep"])
            .wait("gate", "ship it?")
        )

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "gate":
            return GraphPatch().add(TaskSpec(task_id="ship", skill="step"), after=["gate"])
        if event.task_id == "ship":
            return GraphPatch().finish("succeeded", snapshot.task("ship").result)
        return GraphPatch()


async def step(ctx: TaskContext) -> Any:
    trace("start", ctx.task_id)
    await asyncio.sleep(0.01)
    trace("done", ctx.task_id)
    return {
        "task": ctx.task_id,
        "approved_by": (ctx.human_input or {}).get("by"),
        "saw": sorted(ctx.evidence),
    }


def _gate(params: Mapping[str, Any]) -> AppParts:
    return AppParts(planner=GatePlanner(), workers={"step": step})


gate = App(name="lk_testapps:gate", description="a run that waits for a human", build=_gate)


class OneCall(BasePlanner):
    """One task that calls ``crash_once`` on the fault tool set; finish with its result."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="call", skill="call"))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().finish("succeeded", snapshot.task("call").result)


async def call_crash_once(ctx: TaskContext) -> Any:
    return await ctx.call_tool("crash_once", {"marker": str(ctx.params["marker"])})


def _restart(params: Mapping[str, Any]) -> AppParts:
    from loopkernel.tools import ToolLayer
    from loopkernel.tools.testkit import faults_source

    return AppParts(
        planner=OneCall(),
        workers={"call": call_crash_once},
        tool_layer=lambda store: ToolLayer(store, [faults_source()]),
    )


restart = App(
    name="lk_testapps:restart",
    description="a tool server that dies once, mid-call",
    build=_restart,
    defaults={"marker": ""},
)


class FlakyCall(OneCall):
    """One task that calls ``flaky`` (or the irreversible ``flaky_send``); finish with it."""


async def call_flaky(ctx: TaskContext) -> Any:
    tool = "flaky_send" if ctx.params["irreversible"] else "flaky"
    args = {"marker": str(ctx.params["marker"]), "failures": int(ctx.params["failures"])}
    return await ctx.call_tool(tool, args)


def _flaky(params: Mapping[str, Any]) -> AppParts:
    from loopkernel.tools import ToolLayer, allow_all
    from loopkernel.tools.testkit import faults_source

    return AppParts(
        planner=FlakyCall(),
        workers={"call": call_flaky},
        tool_layer=lambda store: ToolLayer(store, [faults_source()], policy_hook=allow_all),
    )


flaky = App(
    name="lk_testapps:flaky",
    description="a tool that fails with ENOSPC a given number of times, then answers",
    build=_flaky,
    defaults={"marker": "", "failures": 0, "irreversible": False},
)


def _unregistered(params: Mapping[str, Any]) -> AppParts:
    from loopkernel.planner import Flow, Step

    return AppParts(planner=Flow(Step("fetch"), Step("parse")), workers={"fetch": step})


unregistered = App(
    name="lk_testapps:unregistered",
    description="a flow that names a skill its worker registry lacks",
    build=_unregistered,
)


class _Awaiting:
    """A planner whose ``plan`` awaits, as a model-backed one does. The executor then
    commits a step's events before it plans them, so a crash between the two leaves an
    event unplanned, and the resume's patch for it may cancel a task the crash left
    running (a one-transaction step never leaves one: its events commit with their
    patches)."""

    def __init__(self, planner: Any) -> None:
        self.planner = planner

    async def plan(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        await asyncio.sleep(0)
        patch: GraphPatch = self.planner.plan(snapshot, event)
        return patch


def _speculation_awaiting(params: Mapping[str, Any]) -> AppParts:
    from loopkernel_apps.speculation import app as speculation

    parts = speculation.build(params)
    return dataclasses.replace(parts, planner=_Awaiting(parts.planner))


def _awaiting_app() -> App:
    from loopkernel_apps.speculation import app as speculation

    return dataclasses.replace(
        speculation,
        name="lk_testapps:speculation_awaiting",
        description="speculation, planned by a planner that awaits",
        build=_speculation_awaiting,
    )


speculation_awaiting = _awaiting_app()


class ChargeCall(OneCall):
    """One task that calls the irreversible ``charge`` (keys ignored) once; finish with it."""


async def call_charge(ctx: TaskContext) -> Any:
    args = {"ledger": str(ctx.params["ledger"])}
    if ctx.params["hold"]:
        args["hold"] = str(ctx.params["hold"])
    return await ctx.call_tool(str(ctx.params["tool"]), args)


def _charge(params: Mapping[str, Any]) -> AppParts:
    from loopkernel.tools import ToolLayer, allow_all
    from loopkernel.tools.testkit import faults_source

    return AppParts(
        planner=ChargeCall(),
        workers={"call": call_charge},
        tool_layer=lambda store: ToolLayer(store, [faults_source()], policy_hook=allow_all),
    )


charge = App(
    name="lk_testapps:charge",
    description="one irreversible call to a tool that ignores idempotency keys",
    build=_charge,
    defaults={"ledger": "", "hold": "", "tool": "charge"},
)


PARKED_SECRET = "sk-proj-AbCdEf0123456789abcdefGHIJ"
"""A credential in the arguments of ``approve_charge``'s call: never journaled as it is."""


async def call_charge_noted(ctx: TaskContext) -> Any:
    note = f"pay with key {PARKED_SECRET}"
    return await ctx.call_tool("charge", {"ledger": str(ctx.params["ledger"]), "note": note})


def _approve_charge(params: Mapping[str, Any]) -> AppParts:
    from loopkernel.tools import ToolLayer
    from loopkernel.tools.testkit import faults_source

    return AppParts(
        planner=ChargeCall(),
        workers={"call": call_charge_noted},
        # the default policy hook: an irreversible call parks its task for approval
        tool_layer=lambda store: ToolLayer(store, [faults_source()]),
    )


approve_charge = App(
    name="lk_testapps:approve_charge",
    description="one irreversible charge, parked for approval, with a credential in its note",
    build=_approve_charge,
    defaults={"ledger": ""},
)
