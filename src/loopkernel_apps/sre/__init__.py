"""The SRE investigator: evidence-cited Kubernetes incident reports that survive ``kill -9``.

``loopkernel investigate "why is payments restarting?" --dump DIR --namespace prod`` or
``loopkernel run sre --set question=... --set dump=DIR --set namespace=prod``. The input
is a ``kubectl cluster-info dump`` (``docs/sre.md``); the tools are one read-only MCP
server scoped to the run's namespace (``loopkernel_apps.sre.tools``); the planner is
deterministic (the rules path), with a model adding read-only calls when ``model`` is on;
the report keeps observed facts, verified causes,
suspected causes, missing evidence and next steps apart, each claim citing evidence that
holds what it says.

Parameters: ``question``, ``dump``, ``namespace``, ``max_rounds`` (3), ``max_tool_calls``
(40), ``max_wall_s`` (120), ``max_evidence_chars`` (40000), ``tool_timeout`` (30),
``model`` (false: plan with the model through the gateway, ``docs/sre.md``),
``model_timeout`` (30), ``model_calls`` (8: the model's own call budget, apart from
``max_tool_calls``), ``model_context`` (8192: the model's context window in tokens, which
sizes its prompt), ``kb`` ("": the store URL whose indexed runbooks ``kb_search`` reads,
``loopkernel sre kb add``; the playbooks search it for the classes they handle),
``service`` (``{}``; set by the investigation service, ``_service``: who asked, the
source, and for a follow-up the earlier run, its reusable evidence and the conversation
so far).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from loopkernel import JSON, App, AppParts, Store, UsageError
from loopkernel.tools import ToolLayer, allow_all
from loopkernel_apps.sre._detect import DETECTORS
from loopkernel_apps.sre._report import REPORT_FIELDS, finalize, render_markdown
from loopkernel_apps.sre._run import WORKERS, investigation_flow, select_skills

__all__ = [
    "DETECTORS",
    "REPORT_FIELDS",
    "WORKERS",
    "app",
    "finalize",
    "investigation_flow",
    "render_markdown",
    "select_skills",
]

_POSITIVE = (
    "max_rounds",
    "max_tool_calls",
    "max_wall_s",
    "max_evidence_chars",
    "tool_timeout",
    "model_timeout",
    "model_calls",
    "model_context",
)


def check_params(params: Mapping[str, JSON]) -> None:
    """``UsageError`` naming the first bad parameter."""
    if not str(params["question"]).strip():
        raise UsageError("sre needs a question: --set question='why is X restarting?'")
    if not params["dump"]:
        raise UsageError("sre needs a dump: --set dump=DIR (kubectl cluster-info dump)")
    if not Path(str(params["dump"])).exists():
        raise UsageError(f"no dump at {params['dump']}")
    if not params["namespace"]:
        raise UsageError("sre needs a namespace: --set namespace=NS")
    if not isinstance(params.get("kb", ""), str):
        raise UsageError(f"kb must be a store URL, not {params['kb']!r}")
    if not isinstance(params.get("service", {}), dict):
        raise UsageError("service is set by the investigation service (an object)")
    if not isinstance(params["model"], bool):
        raise UsageError(f"model must be true or false, not {params['model']!r}")
    for key in _POSITIVE:
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise UsageError(f"{key} must be a positive number, not {value!r}")


def build(params: Mapping[str, JSON]) -> AppParts:
    from loopkernel_apps.sre.tools import tool_source

    check_params(params)
    source = tool_source(
        str(params["dump"]),
        str(params["namespace"]),
        timeout=float(params["tool_timeout"]),
        kb=str(params.get("kb") or "") or None,
    )

    def layer(store: Store) -> ToolLayer:
        return ToolLayer(store, [source], policy_hook=allow_all)

    planner = investigation_flow(int(params["max_rounds"]))
    return AppParts(planner=planner, workers=WORKERS, tool_layer=layer)


app = App(
    name="sre",
    description="investigate a Kubernetes incident from a cluster-info dump (read-only tools)",
    build=build,
    defaults={
        "question": "",
        "dump": "",
        "namespace": "",
        "max_rounds": 3,
        "max_tool_calls": 40,
        "max_wall_s": 120,
        "max_evidence_chars": 40000,
        "tool_timeout": 30.0,
        "model": False,
        "model_timeout": 30.0,
        "model_calls": 8,
        "model_context": 8192,
        "kb": "",
        "service": {},
    },
)
