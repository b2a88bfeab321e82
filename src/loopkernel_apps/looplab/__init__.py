"""looplab: a plan -> act -> verify loop with one policy module and one MCP tool layer.

``loopkernel run looplab --scenario S`` with S one of ``baseline``, ``irreversible``,
``overspend``, ``verify_stuck`` (``docs/looplab.md``). The same loop, on the same tools and
policy, is written by hand and on LangGraph in ``bench/`` for the scoreboard.

Parameters (``--set KEY=VALUE``): ``policy`` (a ``Policy.to_json()`` object),
``act_delay`` (seconds the action of step ``slow_step`` takes), ``fault`` (``wrong_type``,
``timeout`` or ``raise`` in that action), ``tool_timeout`` (seconds), ``inject`` (a skill
that raises at step 2, as a bug would). The tool server keeps
the durable run record under ``$LOOPLAB_DIR`` (default ``.looplab``). ``planner``: ``rules``
(default) or ``llm`` (``--planner llm``): a model proposes each patch and the allowlist
(``ALLOW``) admits only a proposal whose effect is the rules' own, so every scenario ends
as it does with the rules (docs/models.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from loopkernel import (
    JSON,
    AllowedSkill,
    Allowlist,
    App,
    AppParts,
    Param,
    Store,
    UsageError,
    planner_for,
)
from loopkernel.policy import Policy
from loopkernel.tools import ToolLayer, policy_hook
from loopkernel_apps.looplab._loop import WORKERS, planner
from loopkernel_apps.looplab.scenarios import EXPECTED, POLICY, SCENARIOS
from loopkernel_apps.looplab.tools import data_dir, tool_source

__all__ = [
    "ALLOW",
    "EXPECTED",
    "POLICY",
    "SCENARIOS",
    "WORKERS",
    "app",
    "data_dir",
    "tool_source",
]

FAULTS = ("", "wrong_type", "timeout", "raise")

_INDEX = {"index": {"type": "integer", "minimum": 1}}
ALLOW = Allowlist(
    skills=(
        AllowedSkill(name="load", description="loads the run's steps", input_schema={}),
        AllowedSkill(
            name="plan",
            description="plans step INDEX, after load or the previous record",
            input_schema={"type": "object", "required": ["index", "step"], "properties": _INDEX},
        ),
        AllowedSkill(
            name="guard",
            description="checks the plan against the policy, after plan",
            input_schema={"type": "object", "required": ["index", "plan"], "properties": _INDEX},
        ),
        AllowedSkill(
            name="act",
            description="acts through an MCP tool, after guard (or a failed verify)",
            input_schema={"type": "object", "required": ["index", "attempt", "tool"]},
        ),
        AllowedSkill(
            name="verify",
            description="verifies the action, after act",
            input_schema={"type": "object", "required": ["index", "attempt"]},
        ),
        AllowedSkill(
            name="record",
            description="records the verified step, after verify",
            input_schema={"type": "object", "required": ["index", "attempt"]},
        ),
    ),
    ops=frozenset({"add", "connect", "cancel", "finish"}),
    finish=frozenset({"succeeded", "failed", "cancelled"}),
    agree=True,
)
"""What a model may propose for a looplab run (``--planner llm``)."""


def build(params: Mapping[str, JSON]) -> AppParts:
    if params["scenario"] not in SCENARIOS:
        raise UsageError(f"no looplab scenario {params['scenario']!r}")
    if params["fault"] not in FAULTS:
        raise UsageError(f"fault must be one of {', '.join(map(repr, FAULTS))}")
    policy = Policy.from_json(params["policy"])
    source = tool_source(timeout=float(params["tool_timeout"]))

    def layer(store: Store) -> ToolLayer:
        return ToolLayer(store, [source], policy_hook=policy_hook(policy, store))

    return AppParts(
        planner=planner_for(params, rules=planner(policy), allow=ALLOW),
        workers=WORKERS,
        tool_layer=layer,
        guard=policy.guard(),
    )


app = App(
    name="looplab",
    description="plan -> act -> verify over MCP tools under one policy (four scenarios)",
    build=build,
    defaults={
        "scenario": "baseline",
        "policy": POLICY,
        "act_delay": 0.0,
        "slow_step": 1,
        "fault": "",
        "tool_timeout": 30.0,
        "inject": "",
        "planner": "rules",
    },
    parameters={
        "scenario": Param(kind="str", choices=tuple(SCENARIOS)),
        "policy": Param(kind="object"),
        "act_delay": Param(kind="number", minimum=0, maximum=3600),
        "slow_step": Param(
            kind="int", minimum=1, maximum=max(len(steps) for steps in SCENARIOS.values())
        ),
        "fault": Param(kind="str", choices=FAULTS),
        "tool_timeout": Param(kind="number", minimum=0.001, maximum=3600),
        "inject": Param(kind="str", choices=("", "plan", "guard", "act", "verify", "record")),
        "planner": Param(
            kind="str", choices=("rules", "llm"), help="who plans (docs/planner-llm.md)"
        ),
    },
    scenarios={name: {} for name in SCENARIOS},
)
