"""An app that plants secrets at every door of the journal (``lk_secrets:app``), for the
redaction tests: a tool's arguments, a worker's result, a worker's error, a planner's
patch (a task input, the verdict), evidence, and (from the test) run parameters and an
approval payload. Nothing it plants may reach a byte the run writes."""

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

PASSWORD = "Vq7-hunter2-Xm4p"
AWS_KEY = "AKIAQ4ZX7W3E9R2T5Y8U"
BEARER = "eyQ.b3JkZXJzLXNlcnZpY2U.Zm9vYmFy-9x"
PEM_BODY = "MIIEowIBAAKCAQEAz9Xq2Lw8NnRkS5Tq"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
SECRETS = (PASSWORD, AWS_KEY, BEARER, PEM_BODY)
"""What a test greps every file for."""


class _Planner(BasePlanner):
    """plant -> gate (parked for a human) -> fail; finish with all of it in the verdict."""

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return (
            GraphPatch()
            .add(TaskSpec(task_id="plant", skill="plant", input={"db": f"password={PASSWORD}"}))
            .add(TaskSpec(task_id="gate", skill="gate"), after=["plant"])
            .wait("gate", f"approve the deploy (deploy key {AWS_KEY})")
        )

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "gate":
            return GraphPatch().add(TaskSpec(task_id="fail", skill="fail"), after=["gate"])
        return GraphPatch()

    def on_failed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        verdict = {
            "plant": snapshot.task("plant").result,
            "gate": snapshot.task("gate").result,
            "error": snapshot.task("fail").error,
            "note": f"rotated Bearer {BEARER} and {PEM}",
        }
        return GraphPatch().finish("succeeded", verdict)


async def plant(ctx: TaskContext) -> Any:
    # The raw secrets a real worker would read from its environment: sent to the tool as
    # they are (the tool needs them), journaled redacted.
    echoed = await ctx.call_tool(
        "echo", {"text": f"login password={PASSWORD} with Authorization: Bearer {BEARER}"}
    )
    await ctx.add_evidence(f"config says aws_access_key_id = {AWS_KEY}\n{PEM}", uri="file:cfg")
    return {
        "echoed": echoed,
        "input": ctx.input,
        "param": ctx.params["note"],
        "log": f"connected with password={PASSWORD}; key {AWS_KEY}",
        "pem": PEM,
    }


async def gate(ctx: TaskContext) -> Any:
    return {"approved": ctx.human_input}


async def fail(ctx: TaskContext) -> Any:
    raise RuntimeError(f"db login failed: password={PASSWORD} (key {AWS_KEY})")


def _build(params: Mapping[str, Any]) -> AppParts:
    from loopkernel.tools import ToolLayer, allow_all
    from loopkernel.tools.testkit import faults_source

    return AppParts(
        planner=_Planner(),
        workers={"plant": plant, "gate": gate, "fail": fail},
        tool_layer=lambda store: ToolLayer(store, [faults_source()], policy_hook=allow_all),
    )


app = App(
    name="lk_secrets:app",
    description="secrets planted at every door of the journal",
    build=_build,
    defaults={"note": ""},
)
