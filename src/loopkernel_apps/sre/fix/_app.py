"""An approved fix as a run: ``apply`` (the parked write) then ``recheck`` (did it take?).

``loopkernel run loopkernel_apps.sre.fix._app:app --set plan='{"tool": "set_image", "args":
{...}}' --set namespace=prod --set api=URL``

``apply`` sends the plan's one write through the tool layer: the call is ``irreversible``,
so the policy parks the task ``waiting`` until an approval is journaled (``loopkernel
approve``); on the run after it, the call goes out once through the effect journal, under
its idempotency key, which the fix server also writes on the object. A kill after the
request and before its answer is journaled re-sends it on resume under the same key (the
tools declare ``dedupesByKey``), and the server answers it from the object without
writing. ``recheck`` reads the answer's re-read object:
the generation observed, the image or the replicas asked for.

Not yet: separation of duties. The approver is journaled (the ``human_input`` event's
``by``) but a task does not see it, so "approved by someone other than the requester" cannot
be checked here without a runtime change (``TaskContext`` carrying the approver).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopkernel import JSON, App, AppParts, Store, TaskContext, UsageError
from loopkernel.planner import At, Flow, Step
from loopkernel.policy import Policy
from loopkernel.tools import ToolLayer, ToolSource, load_tool_defs, policy_hook
from loopkernel_apps.sre.fix import DEFS

__all__ = ["app", "fix_source"]


def fix_source(namespace: str, api: str, *, timeout: float = 60.0) -> ToolSource:
    """The write server for one fix (never started by an investigation)."""
    defs = load_tool_defs(DEFS)
    return ToolSource.python_module(
        "sre-fix",
        "loopkernel_apps.sre.fix",
        "--namespace",
        namespace,
        "--api",
        api,
        defs=defs,
        timeouts={n: timeout for n in defs.names()},
    )


async def apply(ctx: TaskContext) -> JSON:
    plan: Any = ctx.params["plan"]
    result: JSON = await ctx.call_tool(str(plan["tool"]), dict(plan["args"]))
    return {"result": result}


def took(plan: Mapping[str, Any], data: Mapping[str, Any]) -> bool:
    """Whether the re-read object shows the fix: its new generation observed, and the image
    or replica count asked for (a deleted pod: gone)."""
    args = plan["args"]
    if plan["tool"] == "delete_pod":
        return not data.get("exists", True)
    if data.get("observedGeneration") != data.get("generation"):
        return False
    if plan["tool"] == "set_image":
        return args["image"] in (data.get("images") or [])
    if plan["tool"] == "scale":
        return bool(data.get("replicas") == args["replicas"])
    return True


async def recheck(ctx: TaskContext) -> JSON:
    done: Any = {str(k): v for k, v in ctx.evidence.items()}["apply"]
    data = done["result"]["data"]
    return {"took": took(ctx.params["plan"], data), "object": data}


def _verdict(at: At) -> JSON:
    result: Any = at.result("recheck")
    return {"took": result["took"]}


def build(params: Mapping[str, JSON]) -> AppParts:
    plan = params["plan"]
    if not isinstance(plan, Mapping) or plan.get("tool") not in load_tool_defs(DEFS).names():
        raise UsageError(f"plan must be {{'tool': one of the fix tools, 'args': {{}}}}: {plan!r}")
    if not params["api"] or not params["namespace"]:
        raise UsageError("a fix needs --set api=URL and --set namespace=NS")
    source = fix_source(str(params["namespace"]), str(params["api"]))
    policy = Policy()

    def layer(store: Store) -> ToolLayer:
        return ToolLayer(store, [source], policy_hook=policy_hook(policy, store))

    flow = Flow(Step("apply"), Step("recheck"), verdict=_verdict)
    return AppParts(planner=flow, workers={"apply": apply, "recheck": recheck}, tool_layer=layer)


app = App(
    name="sre-fix",
    description="carry out one approved remediation (a parked irreversible write)",
    build=build,
    defaults={"plan": None, "namespace": "", "api": ""},
)
