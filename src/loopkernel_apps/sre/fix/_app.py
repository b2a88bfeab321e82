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

**Separation of duties.** A fix proposed through the service (``_fixes.Fixes``) carries
``service``: who requested it and whether its namespace separates duties. There, every
approval must name its approver (the service writes ``approved_by`` into the answer's
payload, which the task sees as ``ctx.human_input``; the journal keeps the answer's ``by``
too), and the approver must not be the requester: ``apply`` refuses such an answer before
the write is sent, by parking again with the reason (``approval_required``), so the journal
holds who requested, who answered and each refused attempt, and the next approval by
someone else carries the fix out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopkernel import JSON, App, AppParts, NeedsApproval, Store, TaskContext, UsageError
from loopkernel.planner import At, Flow, Step
from loopkernel.policy import Policy
from loopkernel.tools import ToolLayer, ToolSource, load_tool_defs, policy_hook
from loopkernel_apps.sre.fix import DEFS

__all__ = ["app", "fix_source", "refusal"]


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


def refusal(params: Mapping[str, Any], answer: JSON) -> str | None:
    """Why the approval ``answer`` (its payload) may not carry out this fix, or ``None``.
    Pure: the same on every replay."""
    service = params.get("service") or {}
    if not isinstance(service, Mapping) or not service.get("separate_duties"):
        return None
    requester, ns = str(service.get("requested_by") or ""), params.get("namespace")
    who = answer.get("approved_by") if isinstance(answer, Mapping) else None
    rule = f"namespace {ns} separates duties: someone other than {requester} must approve"
    if not isinstance(who, str) or not who:
        return f"refused: an approval that names no approver ({rule}, through the service)"
    if who == requester:
        return f"refused: {who} requested this fix and may not approve it ({rule})"
    return None


async def apply(ctx: TaskContext) -> JSON:
    plan: Any = ctx.params["plan"]
    answered = ctx.wait_epoch > 0  # parked and answered at least once
    if answered and (why := refusal(ctx.params, ctx.human_input)) is not None:
        raise NeedsApproval(why, tool=str(plan["tool"]))  # parked again, before any write
    result: JSON = await ctx.call_tool(str(plan["tool"]), dict(plan["args"]))
    answer = ctx.human_input
    who = answer.get("approved_by") if isinstance(answer, Mapping) else None
    return {"result": result, **({"approved_by": who} if isinstance(who, str) else {})}


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
    if plan["tool"] == "patch":
        return _patch_took(args, (data.get("containers") or {}).get(args["container"]) or {})
    return True


def _patch_took(args: Mapping[str, Any], container: Mapping[str, Any]) -> bool:
    """Every field the patch named has the value asked for in the re-read container."""
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        for key, value in (args.get(part) or {}).items():
            if (resources.get(part) or {}).get(key) != value:
                return False
    probe = args.get("probe")
    if probe:
        found = container.get(probe["kind"]) or {}
        return all(found.get(k) == v for k, v in probe["set"].items())
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
    defaults={"plan": None, "namespace": "", "api": "", "service": None},
    approver_key="approved_by",  # the inspector's approve names its operator (refusal)
)
