"""A follow-up question inside the run: evidence reused from the earlier run, and the
conversation so far as untrusted context.

A follow-up's ``service`` parameter (written once, at submission, by ``_service``) holds
``reuse``: the earlier run's successful calls whose evidence is still current, each with
the run it came from and its age at submission; and ``history``: the earlier questions
and answers. Both are journaled with the run, so a resume sees the same values and makes
the same choices: a call in ``reuse`` is answered from it and never sent again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from loopkernel import JSON
from loopkernel_apps.sre._calls import CallRecord, CallStatus

__all__ = ["annotate", "earlier_questions", "reused", "reused_calls"]


def _key(tool: str, args: Mapping[str, Any]) -> str:
    return tool + " " + json.dumps(args, sort_keys=True, separators=(",", ":"))


def _service(params: Mapping[str, JSON]) -> Mapping[str, Any]:
    found = params.get("service")
    return found if isinstance(found, dict) else {}


def reused(
    params: Mapping[str, JSON], tool: str, args: Mapping[str, JSON]
) -> CallRecord | None:
    """The call record answering ``tool(args)`` from the earlier run, if its evidence is
    reusable: status ``ok``, the earlier result, and ``reused`` saying from where and how old."""
    key = _key(tool, args)
    for item in _service(params).get("reuse", ()):
        if _key(item["tool"], item["args"]) == key:
            return CallRecord(
                tool=tool,
                args=dict(args),
                status=CallStatus.OK,
                result=item["result"],
                reused={
                    "from_run": item["from_run"],
                    "age_s": item["age_s"],
                    "collected_at": item["collected_at"],
                },
            )
    return None


def reused_calls(calls: list[CallRecord]) -> list[dict[str, Any]]:
    """The run's calls answered from an earlier run: tool, args, where from, how old."""
    return [{"tool": c.tool, "args": c.args, **c.reused} for c in calls if c.reused]


def earlier_questions(params: Mapping[str, JSON]) -> list[str]:
    """The conversation's earlier questions, oldest first (untrusted: they only help choose
    which of the namespace's unhealthy pods to look at)."""
    return [str(h.get("question", "")) for h in _service(params).get("history", ())]


def _markdown(reuse: list[dict[str, Any]], history: list[dict[str, Any]]) -> str:
    lines = []
    if history:
        lines += ["", "## Earlier in this conversation (untrusted context, not evidence)", ""]
        for h in history:
            lines.append(
                f"- {h.get('asked_by') or 'someone'} asked ({h['run_id']}): "
                f"{json.dumps(h.get('question', ''))}; the answer was "
                f"{json.dumps(h.get('answer') or '')}"
            )
    if reuse:
        lines += ["", "## Evidence reused from the earlier run", ""]
        for r in reuse:
            args = json.dumps(r["args"], sort_keys=True)
            lines.append(
                f"- {r['tool']} {args}: from run {r['from_run']}, "
                f"{round(float(r['age_s']))} s old at the question"
            )
    return "\n".join(lines) + ("\n" if lines else "")


def annotate(
    result: dict[str, Any], params: Mapping[str, JSON], calls: list[CallRecord]
) -> dict[str, Any]:
    """The report task's result with the follow-up's part: ``conversation`` (the earlier
    questions and answers, marked untrusted) and ``reused`` (which evidence, how old), and
    both sections at the end of the Markdown. A run that is not a follow-up is unchanged."""
    service = _service(params)
    history = [dict(h) for h in service.get("history", ())]
    if not history and not service.get("reuse"):
        return result
    reuse = reused_calls(calls)
    out = dict(result)
    out["conversation"] = {"untrusted": True, "history": history, "parent": service.get("parent")}
    out["reused"] = reuse
    out["markdown"] = str(result.get("markdown", "")) + _markdown(reuse, history)
    return out
