"""The investigation as a LoopKernel run: a deterministic planner (a ``Flow``) and its workers.

::

    triage -> logs -> skills -> plan:1 -> act:1 -> plan:2 -> act:2 ... -> correlate -> report
                                  (a round: plan picks the calls, act makes them)

``triage`` reads the namespace's health; ``logs`` describes the pods in focus and reads
their logs, the previous instance's too when a container restarted (before any planning,
in every mode); ``skills`` picks playbooks by rule; each ``plan:N`` turns the playbooks'
steps into calls not yet made, within the bounds; ``correlate`` numbers the evidence E1,
E2 ... in journal order and runs the detectors over it; ``report`` validates the draft and
renders it. The loop ends when a round has nothing new to ask, or a bound is reached:
``max_rounds``, ``max_tool_calls``, ``max_wall_s`` (this process's time on the run), or the
run's evidence budget (``max_evidence_chars``). The report names which.

Every tool call goes through ``collect``: a call already made in this run (same tool, same
arguments) is answered "already collected" without a call and costs nothing; scope
refusals and tool errors are recorded, not raised.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from loopkernel import JSON, TaskContext, ToolError, ToolTimeout, ToolUnavailable
from loopkernel.planner import At, Flow, Step, repeat
from loopkernel_apps.sre._calls import CallBy, CallRecord, CallStatus
from loopkernel_apps.sre._detect import Finding, detect, rank, split_symptoms
from loopkernel_apps.sre._draft import Collected, Diagnosis, build_draft
from loopkernel_apps.sre._followup import annotate, earlier_questions, reused
from loopkernel_apps.sre._kb import with_kb_searches
from loopkernel_apps.sre._report import evidence_items, finalize
from loopkernel_apps.sre._scope import other_namespaces
from loopkernel_apps.sre._time import RECENT_S, ago, recovered, recovered_pod

__all__ = [
    "WORKERS",
    "collected_calls",
    "investigation_flow",
    "load_skills",
    "other_namespaces",
    "select_skills",
]

MAX_FOCUS_PODS = 4
LOG_TAIL = 200
_CHAIN = ("triage", "logs")


def investigation_flow(max_rounds: int) -> Flow:
    """The run's shape: fixed steps, a bounded plan <-> act loop, fixed steps."""

    def round_input(at: At) -> JSON:
        return {"round": at.attempt}

    def nothing_left(at: At) -> bool:
        return at.prev.skill == "plan" and not at.prev.result["calls"]

    def verdict(at: At) -> JSON:
        report: Any = at.result("report")
        return {
            "digest": report["digest"],
            "summary": report["report"]["summary"],
            "exit": report["report"]["coverage"]["exit"],
        }

    return Flow(
        Step("triage"),
        Step("logs"),
        Step("skills"),
        repeat(
            Step("plan", input=round_input),
            Step("act", input=round_input),
            until=nothing_left,
            max=max_rounds,
        ),
        Step("correlate"),
        Step("report"),
        verdict=verdict,
    )


# -- shared helpers ------------------------------------------------------------------------------


def _order(task_id: str) -> tuple[int, int]:
    if task_id in _CHAIN:
        return (_CHAIN.index(task_id), 0)
    if task_id.startswith("act:"):
        return (len(_CHAIN), int(task_id.split(":", 1)[1]))
    return (99, 0)


def collected_calls(evidence: Mapping[str, JSON]) -> list[CallRecord]:
    """Every call record of the run so far, in journal order (triage, logs, act:1 ...)."""
    out: list[CallRecord] = []
    for tid in sorted((t for t in evidence if _order(t)[0] < 99), key=_order):
        result = evidence[tid]
        if isinstance(result, dict):
            out.extend(CallRecord.from_json(c) for c in result.get("calls", []))
    return out


def _key(tool: str, args: Mapping[str, JSON]) -> str:
    return tool + " " + json.dumps(args, sort_keys=True, separators=(",", ":"))


def _spent(calls: Iterable[CallRecord], by: CallBy = CallBy.RULES) -> tuple[int, int]:
    """(tool calls made, evidence characters collected) in the budget of ``by``: the
    rules' (the run's bounds) or the model's own. A call a follow-up reused costs nothing."""
    made = [c for c in calls if c.status.made and c.by is by and not c.reused]
    return len(made), sum(len(c.content) for c in made)


class _Collector:
    """Makes a task's tool calls: dedupe, bounds, errors as records."""

    def __init__(self, ctx: TaskContext) -> None:
        self.ctx = ctx
        self.prior = collected_calls(_ev(ctx))
        self.calls: list[CallRecord] = []
        self.seen = {_key(c.tool, c.args): i for i, c in enumerate(self.prior) if c.status.made}
        self.max_calls = int(ctx.params["max_tool_calls"])
        self.max_chars = int(ctx.params["max_evidence_chars"])
        self.exhausted: str | None = None

    async def call(
        self, tool: str, args: dict[str, JSON], by: CallBy = CallBy.RULES
    ) -> dict[str, Any] | None:
        key = _key(tool, args)

        def record(status: CallStatus, **outcome: Any) -> None:
            self.calls.append(CallRecord(tool=tool, args=args, by=by, status=status, **outcome))

        if key in self.seen:
            record(CallStatus.DUPLICATE, note="already collected")
            return None
        earlier = reused(self.ctx.params, tool, args)  # a follow-up: still current, not re-read
        if earlier is not None:
            self.seen[key] = len(self.prior) + len(self.calls)
            self.calls.append(earlier)
            return dict(earlier.result or {})
        spent = self._spent_note(by)
        if spent:
            record(CallStatus.SKIPPED, note=spent)
            return None
        self.seen[key] = len(self.prior) + len(self.calls)
        try:
            result: Any = await self.ctx.call_tool(tool, args)
        except (ToolError, ToolTimeout, ToolUnavailable) as exc:
            record(CallStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            return None
        if result.get("refused"):
            record(CallStatus.REFUSED, result=result)
            return None
        record(CallStatus.OK, result=result)
        return dict(result)

    def _spent_note(self, by: CallBy) -> str | None:
        """Why a call of ``by`` is not made: its budget is spent. Only the rules' bounds
        end the collection (``exhausted``); the model's budget skips the model's call."""
        made, chars = _spent([*self.prior, *self.calls], by)
        if by is CallBy.MODEL:
            from loopkernel_apps.sre._model import model_spent

            return model_spent(self.ctx.params, made, chars)
        if made >= self.max_calls:
            self.exhausted = "max_tool_calls"
        elif chars >= self.max_chars:
            self.exhausted = "max_evidence_chars"
        return self.exhausted

    def done(self, **extra: JSON) -> JSON:
        return {"calls": [c.to_json() for c in self.calls], "exhausted": self.exhausted, **extra}


def _ev(ctx: TaskContext) -> dict[str, Any]:
    """The results this task may see, by task id."""
    return {str(k): v for k, v in ctx.evidence.items()}


def _params(ctx: TaskContext) -> dict[str, Any]:
    return dict(ctx.params)


def _word_in(word: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word.lower())}(?![\w])", text.lower()) is not None


def _triage(ctx: TaskContext) -> dict[str, Any]:
    result: dict[str, Any] = _ev(ctx)["triage"]
    return result


def focus_pods(triage: dict[str, Any], question: str) -> tuple[list[dict[str, Any]], bool]:
    """The unhealthy pods the question is about (by workload or pod name), else all of them;
    pods failing now before pods that restarted long ago and are Ready since (history)."""
    listed = triage.get("unhealthy", [])
    current = [u for u in listed if not recovered_pod(u, triage.get("now"))]
    unhealthy = current + [u for u in listed if u not in current]
    named = [
        u
        for u in unhealthy
        if any(
            n and _word_in(str(n), question)
            for n in (u.get("workload"), u.get("owner"), u.get("pod"))
        )
    ]
    if not named:
        names = {
            str(w["name"])
            for w in triage.get("workloads", [])
            if _word_in(str(w["name"]), question)
        }
        named = [u for u in unhealthy if u.get("workload") in names]
    return (named or unhealthy)[:MAX_FOCUS_PODS], bool(named)


# -- workers -----------------------------------------------------------------------------------


async def triage(ctx: TaskContext) -> JSON:
    # The wall-time bound counts from here (a new run, even one reusing an id in this
    # process), or from the first round a resumed process plans.
    _STARTED[ctx.run_id] = time.monotonic()
    col = _Collector(ctx)
    result = await col.call("triage", {})
    data = (result or {}).get("data", {})
    focus, named = focus_pods(data, str(ctx.params["question"]))
    for question in reversed(earlier_questions(ctx.params)) if not named else ():
        focus, named = focus_pods(data, question)  # "and its logs?": the earlier subject
        if named:
            break
    return col.done(
        named=named,
        unhealthy=data.get("unhealthy", []),
        workloads=data.get("workloads", []),
        findings=data.get("findings", []),
        pods=data.get("pods", 0),
        now=data.get("now"),
        focus=[u["pod"] for u in focus],
    )


async def logs(ctx: TaskContext) -> JSON:
    """Describe each pod in focus and read its logs; the previous instance after a restart."""
    col = _Collector(ctx)
    tri = _triage(ctx)
    by_pod = {u["pod"]: u for u in tri.get("unhealthy", [])}
    for pod in tri.get("focus", []):
        await col.call("describe_pod", {"pod": pod})
        for c in by_pod[pod].get("containers", []):
            args: dict[str, JSON] = {"pod": pod, "container": c["name"], "tail": LOG_TAIL}
            await col.call("pod_logs", args)
            if int(c.get("restarts", 0)) > 0:
                await col.call("pod_logs", {**args, "previous": True})
    return col.done()


def load_skills() -> list[dict[str, Any]]:
    text = resources.files("loopkernel_apps.sre").joinpath("skills.json").read_text("utf-8")
    skills: list[dict[str, Any]] = json.loads(text)
    return skills


def _current_findings(evidence: Mapping[str, JSON]) -> list[str]:
    items = evidence_items(collected_calls(evidence), max_chars=None)
    findings, _ = detect(*_detector_inputs(items))
    return sorted({f.detector for f in findings})


def select_skills(
    *, detectors: Iterable[str], symptoms: Iterable[str], question: str, kinds: Iterable[str]
) -> list[dict[str, Any]]:
    """The playbooks whose rules match, each with why it was chosen."""
    detectors, symptoms, kinds = set(detectors), set(symptoms), set(kinds)
    chosen = []
    for skill in load_skills():
        when = skill["when"]
        why = [f"finding {d}" for d in when["detectors"] if d in detectors]
        why += [f"symptom {s}" for s in when["symptoms"] if s in symptoms]
        why += [f"question mentions {k!r}" for k in when["keywords"] if k in question.lower()]
        why += [f"resource kind {k}" for k in when["kinds"] if k in kinds]
        if why:
            chosen.append(
                {
                    "name": skill["name"],
                    "description": skill["description"],
                    "why": why,
                    "steps": skill["steps"],
                }
            )
    return chosen


async def skills(ctx: TaskContext) -> JSON:
    tri = _triage(ctx)
    focus = set(tri.get("focus", []))
    symptoms: set[str] = set()
    kinds: set[str] = set()
    for u in tri.get("unhealthy", []):
        if u["pod"] not in focus:
            continue
        if u.get("phase") == "Pending":
            symptoms.add("Pending")
        if u.get("reason"):
            symptoms.add(str(u["reason"]))
        if u.get("node_ready") is False:
            symptoms.add("NodeNotReady")
        if u.get("owner_kind"):
            kinds.add("Deployment" if u["owner_kind"] == "ReplicaSet" else u["owner_kind"])
        for c in u.get("containers", []):
            symptoms.update(x for x in (c.get("reason"), c.get("last_reason")) if x)
            if int(c.get("restarts", 0)) > 0:
                symptoms.add("restarts")
            if c.get("init"):
                symptoms.add("Init")
    for w in tri.get("workloads", []):
        if w.get("at_max"):
            symptoms.add("HPAAtMax")
        if any(str(c).startswith("Failed=") for c in w.get("conditions", [])):
            symptoms.add("JobFailed")
    detectors = _current_findings(_ev(ctx))
    chosen = select_skills(
        detectors=detectors, symptoms=symptoms, question=str(ctx.params["question"]), kinds=kinds
    )
    chosen = with_kb_searches(bool(ctx.params.get("kb")), chosen, detectors, load_skills())
    return {
        "skills": chosen,
        "detectors": detectors,
        "symptoms": sorted(symptoms),
        "kinds": sorted(kinds),
    }


_STARTED: dict[str, float] = {}


def _expand(step: dict[str, Any], pod: dict[str, Any]) -> dict[str, JSON] | None:
    values = {
        "pod": pod.get("pod"),
        "deployment": pod.get("workload") if pod.get("owner_kind") == "ReplicaSet" else None,
        "job": pod.get("owner") if pod.get("owner_kind") == "Job" else None,
    }
    args: dict[str, JSON] = {}
    for k, v in step["args"].items():
        m = re.fullmatch(r"\{(\w+)\}", str(v))
        if m:
            value = values.get(m.group(1))
            if value is None:
                return None
            args[k] = value
        else:
            args[k] = v
    return args


@dataclass(frozen=True, kw_only=True, slots=True)
class WantedCall:
    """A call a round wants to make, who wants it and why."""

    tool: str
    args: dict[str, JSON]
    why: str
    by: CallBy = CallBy.RULES
    """Whose budget the call is made in."""

    @property
    def key(self) -> str:
        return _key(self.tool, self.args)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool, "args": self.args, "why": self.why}
        if self.by is CallBy.MODEL:
            out["by"] = self.by.value
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Round:
    """What a ``plan`` round starts from."""

    n: int
    params: Mapping[str, Any]
    triage: Mapping[str, Any]
    prior: list[CallRecord]
    """Every call record of the run so far."""
    started: float

    @property
    def focus(self) -> list[dict[str, Any]]:
        wanted = self.triage.get("focus", [])
        return [u for u in self.triage.get("unhealthy", []) if u["pod"] in wanted]


def _other_namespace_calls(r: Round) -> list[WantedCall]:
    question, namespace = str(r.params["question"]), str(r.params["namespace"])
    return [
        WantedCall(
            tool="events",
            args={"namespace": other},
            why=f"the question names namespace {other}",
        )
        for other in other_namespaces(question, namespace)
    ]


def _skill_calls(r: Round, skills_result: Mapping[str, Any]) -> list[WantedCall]:
    out = []
    for skill in skills_result["skills"]:
        for step in skill["steps"]:
            for pod in r.focus or [{}]:
                args = _expand(step, pod)
                if args is not None:
                    out.append(
                        WantedCall(tool=step["tool"], args=args, why=f"skill {skill['name']}")
                    )
    return out


def _podless_calls(r: Round) -> list[WantedCall]:
    """A workload short of replicas with no pod to show for it: its controller could not
    create them (quota, admission, a missing service account). Its history and events say."""
    with_pods = {u.get("workload") for u in r.triage.get("unhealthy", [])}
    out = []
    for w in r.triage.get("workloads", []):
        if w.get("kind") not in ("deployment", "statefulset", "daemonset", "job"):
            continue
        short = w.get("desired") is not None and int(w.get("ready") or 0) < int(w["desired"])
        fewer = int(w.get("pods") or 0) < int(w.get("desired") or 0)
        if not (short and fewer and w["name"] not in with_pods):
            continue
        why = f"{w['kind']} {w['name']} has no pod to show"
        if w["kind"] == "deployment":
            out.append(WantedCall(tool="rollout_history", args={"deployment": w["name"]}, why=why))
        out.append(WantedCall(tool="events", args={"object": w["name"]}, why=why))
    return out


def _scaled_to_zero_calls(r: Round) -> list[WantedCall]:
    """A Deployment or StatefulSet scaled to 0: the Services that select it have no
    endpoints, and its events hold the ScalingReplicaSet that did it."""
    out = []
    for w in r.triage.get("workloads", []):
        if w.get("kind") in ("deployment", "statefulset") and w.get("desired") == 0:
            why = f"{w['kind']} {w['name']} is scaled to 0"
            out.append(WantedCall(tool="services", args={}, why=why))
            out.append(WantedCall(tool="events", args={"object": w["name"]}, why=why))
    return out


def _follow_up_calls(r: Round) -> list[WantedCall]:
    """Follow-ups from what earlier rounds found: a deployment's history names its newest
    ReplicaSet, whose events (FailedCreate: quota, admission) explain missing pods."""
    out = []
    for c in r.prior:
        if c.status is not CallStatus.OK or c.tool != "rollout_history" or c.result is None:
            continue
        dep = c.args["deployment"]
        revisions = c.result["data"].get("revisions", [])
        if revisions:
            rs = revisions[-1]["replicaset"]
            why = f"follow-up: the newest ReplicaSet of {dep}"
            out.append(WantedCall(tool="events", args={"object": rs}, why=why))
        why = f"follow-up: events of deployment {dep}"
        out.append(WantedCall(tool="events", args={"object": dep}, why=why))
    return out


def _rules_calls(r: Round, skills_result: Mapping[str, Any]) -> list[WantedCall]:
    """The rules' calls of the round, in the order they are asked."""
    first = r.n == 1
    return [
        *(_other_namespace_calls(r) if first else []),
        *_skill_calls(r, skills_result),
        *(_podless_calls(r) if first else []),
        *(_scaled_to_zero_calls(r) if first else []),
        *_follow_up_calls(r),
    ]


def _admit(
    wanted: Iterable[WantedCall], seen: set[str], room: int
) -> tuple[list[WantedCall], str | None]:
    """The calls not asked in earlier rounds, at most ``room`` distinct ones. Two playbooks
    asking for the same thing in one round both stay, and the second is answered "already
    collected" at no cost. The second value is ``max_tool_calls`` when ``room`` cut it."""
    calls: list[WantedCall] = []
    keys: list[str] = []
    for w in wanted:
        if w.key in seen:
            continue
        if w.key not in keys:
            if len(keys) >= room:
                return calls, "max_tool_calls"
            keys.append(w.key)
        calls.append(w)
    return calls, None


async def _model_round(
    ctx: TaskContext, r: Round, over: str | None
) -> tuple[dict[str, Any], list[WantedCall]]:
    """The round's planning record and the calls the model adds, in its own budget."""
    from loopkernel_apps.sre._model import ask_model, model_room

    room = model_room(r.params, r.prior)
    if over:
        return {"round": r.n, "by": "rules", "reason": _NOT_ASKED}, []
    if room <= 0:
        return {"round": r.n, "by": "rules", "reason": _MODEL_SPENT}, []
    proposal = await ask_model(
        ctx, round_=r.n, calls=r.prior, deadline=float(r.params["model_timeout"])
    )
    planning = {"round": r.n, **{k: v for k, v in proposal.items() if k != "calls"}}
    planning["proposed"] = proposal["calls"]
    why = f"model, round {r.n}"
    calls = [
        WantedCall(tool=c["tool"], args=c["args"], why=why, by=CallBy.MODEL)
        for c in proposal["calls"]
    ]
    return planning, calls


_NOT_ASKED = "a bound was reached; the model was not asked"
_MODEL_SPENT = "the model's own call budget (model_calls) is spent; the model was not asked"


async def plan(ctx: TaskContext) -> JSON:
    """A round: the playbooks' steps not yet taken (the rules path), then, with ``model``
    on, the calls the model adds (``_model``).

    The rules' steps always come first, within the rules' bounds; the model's calls are
    made in a budget of their own (``model_calls`` calls, ``_model.MODEL_CHARS``
    characters), so a model call never displaces a rules step or a follow-up. The model
    can add read-only calls in the run's namespace, never remove a playbook step, so a
    model round is never worse than a rules round. The result's ``planning`` says which
    planned the round, and why a model proposal was not followed."""
    params = _params(ctx)
    prior = collected_calls(_ev(ctx))
    r = Round(
        n=int(ctx.input["round"]),
        params=params,
        triage=_triage(ctx),
        prior=prior,
        started=_STARTED.setdefault(ctx.run_id, time.monotonic()),
    )
    made, chars = _spent(prior)
    seen = {_key(c.tool, c.args) for c in prior}
    skills_result: Any = _ev(ctx)["skills"]
    calls, stop = _admit(_rules_calls(r, skills_result), seen, int(params["max_tool_calls"]) - made)
    over = _over_bound(params, r.started, chars)
    out: dict[str, Any] = {"round": r.n}
    if params.get("model"):
        out["planning"], proposed = await _model_round(ctx, r, over)
        from loopkernel_apps.sre._model import model_room

        taken = seen | {c.key for c in calls}
        calls += [w for w in proposed if w.key not in taken][: model_room(params, prior)]
    # A bound ends the loop only when there was something left to ask. The flow runs at
    # most max_rounds rounds; a last round that still asked ends as max_rounds.
    if calls and r.n >= int(params["max_rounds"]):
        stop = stop or "max_rounds"
    if calls and over:
        calls, stop = [], over
    return {"calls": [c.to_json() for c in calls], "stop": stop, **out}


def _over_bound(params: Mapping[str, Any], started: float, chars: int) -> str | None:
    """The wall-time or evidence bound this round is past, if any."""
    if time.monotonic() - started > float(params["max_wall_s"]):
        return "max_wall_s"
    if chars >= int(params["max_evidence_chars"]):
        return "max_evidence_chars"
    return None


async def act(ctx: TaskContext) -> JSON:
    col = _Collector(ctx)
    planned: Any = _ev(ctx)[f"plan:{ctx.input['round']}"]
    for call in planned["calls"]:
        await col.call(call["tool"], call["args"], CallBy(call.get("by", CallBy.RULES)))
    return col.done()


_CONTEXT_TOOLS = (
    "triage",
    "services",
    "node_capacity",
    "claims",
    "autoscalers",
    "workload_status",
    "rollout_history",
)


def _detector_inputs(
    items: list[dict[str, Any]],
) -> tuple[
    list[dict[str, Any]],
    list[dict[str, Any]],
    list[dict[str, Any]],
    dict[str, list[dict[str, Any]]],
]:
    pods, events, logs_ = [], [], []
    context: dict[str, list[dict[str, Any]]] = {}
    for e in items:
        data = e["data"]
        if e["tool"] in _CONTEXT_TOOLS:
            context.setdefault(e["tool"], []).append({"ref": e["ref"], "data": data})
        if e["tool"] == "describe_pod":
            pods.append({"ref": e["ref"], "pod": data["pod"]})
        if e["tool"] in ("describe_pod", "events"):
            events += [{"ref": e["ref"], "event": ev} for ev in data.get("events", [])]
        if e["tool"] == "pod_logs" and data.get("available"):
            logs_.append(
                {
                    "ref": e["ref"],
                    "pod": data["pod"],
                    "container": data["container"],
                    "previous": data["previous"],
                    "text": e["content"],
                }
            )
    return pods, events, logs_, context


def split_history(
    findings: list[Finding], triage: dict[str, Any]
) -> tuple[list[Finding], list[Finding]]:
    """``(current, history)``: a finding about a container that has been running and Ready
    for longer than ``RECENT_S`` (its lastState, its previous log), or an event of a
    controller older than ``RECENT_S`` or of a Job that no longer exists, is history."""
    now = triage.get("now")
    done = {
        (u["pod"], c["name"])
        for u in triage.get("unhealthy", [])
        for c in u.get("containers", [])
        if recovered(c, now)
    }
    jobs = {w.get("name") for w in triage.get("workloads", []) if w.get("kind") == "job"}

    def old(f: Finding) -> bool:
        if (f.pod, f.container) in done:
            return True
        if f.detector != "failed_create":
            return False
        age = ago(f.extra.get("when"), now)
        gone = f.extra.get("kind") == "Job" and f.extra.get("object") not in jobs
        return gone or (age is not None and age > RECENT_S)

    return [f for f in findings if not old(f)], [f for f in findings if old(f)]


async def correlate(ctx: TaskContext) -> JSON:
    params = _params(ctx)
    calls = collected_calls(_ev(ctx))
    from loopkernel_apps.sre._model import MODEL_CHARS

    items = evidence_items(
        calls, max_chars=int(params["max_evidence_chars"]), model_chars=MODEL_CHARS
    )
    findings, stale = detect(*_detector_inputs(items))
    tri = _triage(ctx)
    focus = set(tri.get("focus", []))
    named = bool(tri.get("named"))
    stops = [
        r.get("stop") or r.get("exhausted")
        for tid, r in sorted(_ev(ctx).items())
        if isinstance(r, dict) and (r.get("stop") or r.get("exhausted"))
    ]
    skills_result: Any = _ev(ctx)["skills"]
    planning = [
        r["planning"]
        for _, r in sorted(
            ((k, v) for k, v in _ev(ctx).items() if k.startswith("plan:")),
            key=lambda kv: int(kv[0].split(":", 1)[1]),
        )
        if isinstance(r, dict) and r.get("planning")
    ]
    collected = Collected(
        calls=calls,
        items=items,
        triage=tri,
        skills=skills_result["skills"],
        planning=planning,
        stop=stops[0] if stops else None,
    )
    current, history = split_history(findings, tri)
    diagnosis = Diagnosis(
        ranked=rank(current, focus if named else set()),
        symptoms=split_symptoms(current)[1],
        stale=stale,
        history=history,
    )
    draft = build_draft(params, collected, diagnosis)
    if not params.get("model"):
        return {"draft": draft, "evidence": items}
    from loopkernel_apps.sre._speak import ask_claims

    claims = await ask_claims(ctx, items, draft)
    return {"draft": draft, "evidence": items, "claims": claims}


async def report(ctx: TaskContext) -> JSON:
    corr: Any = _ev(ctx)["correlate"]
    result = finalize(corr["draft"], corr["evidence"], corr.get("claims"))
    return annotate(result, ctx.params, collected_calls(_ev(ctx)))


WORKERS = {
    "triage": triage,
    "logs": logs,
    "skills": skills,
    "plan": plan,
    "act": act,
    "correlate": correlate,
    "report": report,
}
