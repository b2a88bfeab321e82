"""looplab: a plan -> act -> verify loop with one policy module and one MCP tool layer.

``loopkernel run looplab --scenario S`` with S one of ``baseline``, ``irreversible``,
``overspend``, ``verify_stuck`` (``docs/looplab.md``). The same loop, on the same tools and
policy, is written by hand and on LangGraph in ``bench/`` for the scoreboard.

Parameters (``--set KEY=VALUE``): ``policy`` (a ``Policy.to_json()`` object),
``act_delay`` (seconds the action of step ``slow_step`` takes), ``fault`` (``wrong_type``,
``timeout`` or ``raise`` in that action), ``tool_timeout`` (seconds), ``inject`` (a skill
that raises at step 2, as a bug would). The tool server keeps
the durable run record under ``$LOOPLAB_DIR`` (default ``.looplab``). ``planner``: ``rules``
(default) or ``llm`` (``--planner llm``): a model proposes each patch and the
postconditions of the allowlist (``ALLOW``, ``agree`` off) judge it: the model may stop the
run early or make a retry wait first, every task it adds is the rules' own otherwise, and
it cannot end a scenario ``succeeded`` without the work, past the approval or after an
escalation (docs/planner-llm.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from loopkernel import JSON, App, AppParts, Param, Store, planner_for
from loopkernel.policy import Policy
from loopkernel.tools import ToolLayer, policy_hook
from loopkernel_apps.looplab._llm import ALLOW
from loopkernel_apps.looplab._loop import WORKERS, planner
from loopkernel_apps.looplab.scenarios import EXPECTED, POLICY, SCENARIOS
from loopkernel_apps.looplab.tools import data_dir, tool_source

__all__ = ["ALLOW", "EXPECTED", "POLICY", "SCENARIOS", "WORKERS", "app", "data_dir", "tool_source"]

MOST_STEPS = max(len(steps) for steps in SCENARIOS.values())


def build(params: Mapping[str, JSON]) -> AppParts:
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
    parameters={
        "scenario": Param(kind="str", choices=tuple(SCENARIOS), default="baseline"),
        "policy": Param(kind="object", default=POLICY),
        "act_delay": Param(kind="number", minimum=0, maximum=3600, default=0.0),
        "slow_step": Param(kind="int", minimum=1, maximum=MOST_STEPS, default=1),
        "fault": Param(kind="str", choices=("", "wrong_type", "timeout", "raise"), default=""),
        "tool_timeout": Param(kind="number", minimum=0.001, maximum=3600, default=30.0),
        "inject": Param(
            kind="str", choices=("", "plan", "guard", "act", "verify", "record"), default=""
        ),
        "planner": Param(kind="str", choices=("rules", "llm"), default="rules"),
    },
    scenarios={name: {} for name in SCENARIOS},
)
