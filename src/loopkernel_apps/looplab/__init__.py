"""looplab: a plan -> act -> verify loop with one policy module and one MCP tool layer.

``loopkernel run looplab --scenario S`` with S one of ``baseline``, ``irreversible``,
``overspend``, ``verify_stuck`` (``docs/looplab.md``). The same loop, on the same tools and
policy, is written by hand and on LangGraph in ``bench/`` for the scoreboard.

Parameters (``--set KEY=VALUE``): ``policy`` (a ``Policy.to_json()`` object),
``act_delay`` (seconds the action of step ``slow_step`` takes), ``fault`` (``wrong_type``,
``timeout`` or ``raise`` in that action), ``tool_timeout`` (seconds), ``inject`` (a skill
that raises at step 2, as a bug would). The tool server keeps
the durable run record under ``$LOOPLAB_DIR`` (default ``.looplab``).
"""

from __future__ import annotations

from collections.abc import Mapping

from loopkernel import JSON, App, AppParts, Param, Store, UsageError
from loopkernel.policy import Policy
from loopkernel.tools import ToolLayer, policy_hook
from loopkernel_apps.looplab._loop import WORKERS, planner
from loopkernel_apps.looplab.scenarios import EXPECTED, POLICY, SCENARIOS
from loopkernel_apps.looplab.tools import data_dir, tool_source

__all__ = [
    "EXPECTED",
    "POLICY",
    "SCENARIOS",
    "WORKERS",
    "app",
    "data_dir",
    "tool_source",
]

FAULTS = ("", "wrong_type", "timeout", "raise")


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
        planner=planner(policy),
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
    },
    scenarios={name: {} for name in SCENARIOS},
)
