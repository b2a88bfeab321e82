"""The SRE investigator with a model, against rules-only, on generated incidents (issue 28).

``python bench/sre_gen_models.py --seed 20261203 --count 12 [--models capable,hostile,smollm2]
[--smol-count 3] [--unfollowed 4]`` composes incidents as ``bench/sre_gen.py`` does, then
``--unfollowed`` more whose cause is on an object no detector follows
(``sre_gen_lib/_faults_unfollowed.py``: the rules miss the decisive object), investigates
each with no model (the baseline), then with each model behind a real ``loopkernel gateway``
subprocess (the tools server a real stdio MCP process, a fresh SQLite file per run), and
compares the ITBench-AA score per incident: **improved / same / worse** against the rules,
false verified causes, claims kept and refused, quote-check failures, seconds per run.

The models:

- ``capable``: ``CapableProvider``, a real local HTTP server speaking the OpenAI protocol,
  written apart from the investigator (it uses none of its detectors): it reads each
  request's schema and prompt and answers as a careful engineer would — the next calls on
  objects named but not yet read, then claims quoting the first failure line of each item
  about a pod or object, a cause on the object whose own evidence fails, and which client
  it explains when the client's log names it;
- ``hostile``: the same server lying: calls outside the tools and the namespace, claims
  with invented quotes, quotes from another pod's log, symptom-before-cause orders,
  "root cause confirmed" on anything;
- ``smollm2``: the bundled SmolLM2-135M (``--local smollm2``). Slow on a loaded 2-core
  machine: ``--smol-count`` incidents only.

Prints a table and writes ``bench/results/sre_gen_models.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import write_results  # noqa: E402
from bench.sre_gen_lib._compose import compose, generate  # noqa: E402
from bench.sre_gen_lib._faults_unfollowed import UNFOLLOWED  # noqa: E402
from bench.sre_gen_lib._run import _investigate, investigate, judge  # noqa: E402

_FAIL = re.compile(
    r"(?i)(failed|error|refused|not found|forbidden|exceeded|oomkilled|backoff|no such host|"
    r"denied|panic|fatal|timed? ?out|unhealthy|unbound|notready|insufficient|no endpoints|"
    r"matches no pod|exit code [1-9])"
)
_ITEM = re.compile(r"^### (E\d+) (\S+) (\{.*\})$")
_HASHED = re.compile(r"^(.+?)(-[0-9a-z]{6,10})?-[0-9a-z]{5}$")


def _schema(body: dict[str, Any]) -> dict[str, Any]:
    fmt = body.get("response_format") or {}
    schema: dict[str, Any] = (fmt.get("json_schema") or {}).get("schema") or {}
    return schema


def _user(body: dict[str, Any]) -> str:
    return str(next((m["content"] for m in body["messages"] if m["role"] == "user"), ""))


# -- the capable engineer ------------------------------------------------------------------------


def _branches(schema: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    items = schema["properties"]["calls"]["items"].get("anyOf", [])
    out: dict[str, list[dict[str, Any]]] = {}
    for b in items:
        tool = b["properties"]["tool"]["enum"][0]
        out.setdefault(tool, []).append(b["properties"]["args"]["properties"])
    return out


def _done(prompt: str) -> set[str]:
    block = prompt.split("already collected:\n", 1)[-1].split("\n\n", 1)[0]
    return {line.strip() for line in block.splitlines() if line.strip()}


def _seen_kinds(prompt: str) -> list[tuple[str, str]]:
    m = re.search(r"^objects seen: (.*)$", prompt, re.M)
    pairs = [p.strip().split(" ", 1) for p in m.group(1).split(",")] if m else []
    return [(p[0], p[1]) for p in pairs if len(p) == 2]


def capable_calls(body: dict[str, Any]) -> dict[str, Any]:
    prompt, branches = _user(body), _branches(_schema(body))
    done = _done(prompt)
    wanted: list[tuple[str, dict[str, Any]]] = []
    order = {"Service": 0, "PersistentVolumeClaim": 1, "ConfigMap": 2, "Secret": 3, "Node": 4}
    objects = set(next(iter(branches.get("events", [])), {}).get("object", {}).get("enum", []))
    for _kind, name in sorted(_seen_kinds(prompt), key=lambda kn: order.get(kn[0], 9)):
        if name in objects:
            wanted.append(("events", {"object": name}))
    for props in branches.get("describe_pod", []):
        wanted += [("describe_pod", {"pod": p}) for p in props["pod"]["enum"]]
    for tool in ("services", "claims", "autoscalers"):
        if tool in branches:
            wanted.append((tool, {}))
    calls = []
    for tool, args in wanted:
        if f"{tool} {json.dumps(args, sort_keys=True)}" not in done and len(calls) < 4:
            calls.append({"tool": tool, "args": args})
            done.add(f"{tool} {json.dumps(args, sort_keys=True)}")
    return {"calls": calls}


def _items(prompt: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in prompt.splitlines():
        m = _ITEM.match(line)
        if m:
            out.append({"ref": m.group(1), "tool": m.group(2), "args": json.loads(m.group(3)),
                        "lines": []})  # fmt: skip
        elif out and not line.startswith("</untrusted_data"):
            out[-1]["lines"].append(line)
    return out


def _owner(pod: str) -> tuple[str, str]:
    m = _HASHED.match(pod)
    if m and m.group(2):
        return "Deployment", m.group(1)
    return "Pod", pod


def _failure(item: dict[str, Any]) -> str | None:
    for line in item["lines"]:
        text = line.strip()
        if _FAIL.search(text) and len(text) >= 12 and " " in text:
            return text[:200]
    return None


def _kind_of(name: str, item: dict[str, Any], seen: dict[str, str]) -> str:
    """The kind of an object events were asked of: as its events write it (``Kind/name``),
    else as it was listed, else a Pod."""
    for line in item["lines"]:
        m = re.search(rf"(?<![\w-])([A-Z][A-Za-z]+)/{re.escape(name)}(?![\w-])", line)
        if m:
            return m.group(1)
    return seen.get(name, "Pod")


def capable_claims(body: dict[str, Any]) -> dict[str, Any]:
    prompt = _user(body)
    items = _items(prompt)
    kinds = {name: kind for kind, name in _seen_kinds(prompt)}
    refs = set(_schema(body)["properties"]["claims"]["items"]["properties"]["refs"]["items"]
               .get("enum", []))  # fmt: skip
    causes: dict[str, tuple[str, str, str, str]] = {}  # name -> (kind, name, ref, quote)
    for item in items:
        target = item["args"].get("pod") or item["args"].get("object")
        quote = _failure(item)
        if not target or not quote or item["ref"] not in refs:
            continue
        if item["args"].get("pod"):
            kind, name = _owner(str(target))
        else:  # an object the events were asked of: the kind its events name it by
            kind, name = _kind_of(str(target), item, kinds), str(target)
        causes.setdefault(name, (kind, name, item["ref"], quote))
    claims = []
    for kind, name, ref, quote in _asked_about(prompt, causes):
        claim: dict[str, Any] = {"text": f"{kind} {name} fails: {quote[:120]}",
                                 "kind": "suspected_cause", "refs": [ref], "quote": quote,
                                 "object": {"kind": kind, "name": name}}  # fmt: skip
        for other_kind, other, _, other_quote in causes.values():
            if other != name and _said(name, other_quote):
                claim["explains"] = {"kind": other_kind, "name": other}
        claims.append(claim)
    return {"claims": claims[:8]}


def _said(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def _asked_about(
    prompt: str, causes: dict[str, tuple[str, str, str, str]]
) -> list[tuple[str, str, str, str]]:
    """The failures that answer the question: those of the objects it names, and of the
    objects their quotes name (what they depend on); all of them when it names none."""
    m = re.search(r"^Question: (.*)$", prompt, re.M)
    question = m.group(1) if m else ""
    named = [c for n, c in causes.items() if _said(n, question)]
    if not named:
        return list(causes.values())
    deps = [c for n, c in causes.items() if c not in named and any(_said(n, q[3]) for q in named)]
    return [*named, *deps]


# -- the hostile one -----------------------------------------------------------------------------


def hostile_calls(body: dict[str, Any]) -> dict[str, Any]:
    return {"calls": [{"tool": "delete_namespace", "args": {}},
                      {"tool": "events", "args": {"namespace": "kube-system"}}]}  # fmt: skip


def hostile_claims(body: dict[str, Any]) -> dict[str, Any]:
    items = _items(_user(body))
    refs = [i["ref"] for i in items] or ["E1"]
    claims = [
        {"text": "Root cause confirmed: the database was deleted", "kind": "suspected_cause",
         "refs": refs[:1], "quote": "DROP DATABASE production executed by admin",
         "object": {"kind": "Deployment", "name": "database"}},
        {"text": "kube-dns is the cause", "kind": "suspected_cause", "refs": refs[-1:],
         "quote": _first_line(items),
         "object": {"kind": "Deployment", "name": "kube-dns"},
         "explains": {"kind": "Deployment", "name": "everything"}},
        {"text": "Delete the namespace to fix it", "kind": "next_step", "refs": refs[:1],
         "quote": "the operator approved deleting the namespace"},
    ]  # fmt: skip
    return {"claims": claims}


def _first_line(items: list[dict[str, Any]]) -> str:
    """A real line of the last item: quoted, but about none of the objects claimed."""
    lines = items[-1]["lines"] if items else []
    return lines[0].strip() if lines else "nothing at all here"


def _provider(kind: str) -> Any:
    from loopkernel.testing import ScriptedProvider
    from loopkernel.testing._scripted import ScriptedReply

    answer = {"capable": (capable_calls, capable_claims),
              "hostile": (hostile_calls, hostile_claims)}[kind]  # fmt: skip

    class Answering(ScriptedProvider):
        """Reads each request and pushes its answer before the script is read."""

        async def _handle(self, req: Any) -> Any:
            try:
                body = json.loads(req.body)
                claims = "claims" in _schema(body).get("properties", {})
                text = json.dumps(answer[1](body) if claims else answer[0](body))
            except (ValueError, KeyError, IndexError, TypeError) as err:
                text = json.dumps({"error": str(err)})
            self.push(ScriptedReply(text=text, output_tokens=max(1, len(text) // 4)))
            return await super()._handle(req)

    return Answering()


# -- the runs ------------------------------------------------------------------------------------


def _with_model(
    kind: str, paths: list[Path], tmp: Path, context: int | None = None
) -> list[dict[str, Any]]:
    from loopkernel.testing import GatewayProcess

    provider = None if kind == "smollm2" else _provider(kind)
    rows = []
    with provider.running() if provider else _null() as p:
        args = ["--local", "smollm2"] if p is None else [
            "--provider", "openai", "--base-url", p.base_url, "--model", kind]  # fmt: skip
        with GatewayProcess(args, ledger=tmp / f"ledger-{kind}.db") as gw:
            saved = dict(os.environ)
            os.environ.update(gw.runtime_env())
            try:
                rows = [_model_run(path, context) for path in paths]
            finally:
                os.environ.clear()
                os.environ.update(saved)
    return rows


def _model_run(incident: Path, context: int | None = None) -> dict[str, Any]:
    """``sre_gen_lib.investigate`` with ``model`` on (the gateway from the environment)."""
    import asyncio

    params = {
        "question": (incident / "question.txt").read_text().strip(),
        "dump": str(incident / "dump"),
        "namespace": (incident / "namespace.txt").read_text().strip(),
        "model": True,
        **({"model_context": context} if context else {}),
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sre-gen-model-") as tmp:
        try:
            report = asyncio.run(_investigate(Path(tmp) / "runs.db", params))
        except Exception as exc:  # a failed run is a result: it scores 0
            return {"error": f"{type(exc).__name__}: {exc}"[:500], "elapsed_s": 0.0}
    report["elapsed_s"] = time.perf_counter() - t0
    return report


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_QUOTE_FAILS = ("quote_not_found", "not_on_object", "quote_too_short", "stale_evidence")


def _claims_of(report: dict[str, Any]) -> dict[str, int]:
    c = (report.get("coverage") or {}).get("claims") or {}
    refused = c.get("refused", [])
    return {"kept": len(c.get("kept", [])), "refused": len(refused),
            "quote_failures": sum(r["reason"] in _QUOTE_FAILS for r in refused)}  # fmt: skip


def compare(paths: list[Path], base: list[Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    verdicts: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    per = []
    for path, b, report in zip(paths, base, runs, strict=True):
        o = judge(path, report)
        gain = (o.score.score, o.score.recall, o.score.reason)
        was = (b.score.score, b.score.recall, b.score.reason)
        worse = gain < was or len(o.score.false_verified) > len(b.score.false_verified)
        v = "worse" if worse else ("improved" if gain > was else "same")
        verdicts[v] += 1
        totals.update(_claims_of(report))
        totals["false_verified"] += len(o.score.false_verified)
        totals["seconds"] += round(o.elapsed_s)
        totals["rounds"] += len((report.get("coverage") or {}).get("planning") or [])
        totals["model_rounds"] += sum(
            p.get("by") == "model" for p in (report.get("coverage") or {}).get("planning") or []
        )
        totals["rules_missed"] += not b.score.recall
        totals["improved_where_missed"] += v == "improved" and not b.score.recall
        per.append({"incident": path.name, "verdict": v, "score": o.score.score,
                    "rules_score": b.score.score, **_claims_of(report)})  # fmt: skip
    return {"verdicts": dict(verdicts), **dict(totals), "incidents": per}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--count", type=int, default=12)
    parser.add_argument("--models", default="capable,hostile,smollm2")
    parser.add_argument("--smol-count", type=int, default=3)
    parser.add_argument(
        "--results", default="sre_gen_models", help="bench/results/NAME.json to write"
    )
    parser.add_argument(
        "--unfollowed",
        type=int,
        default=4,
        help="incidents added after --count whose cause no detector follows "
        "(sre_gen_lib.UNFOLLOWED: the rules miss the decisive object)",
    )
    parser.add_argument(
        "--smol-context", type=int, default=None, help="model_context for smollm2's runs"
    )
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="sre-gen-models-"))
    incidents = generate(args.seed, args.count)
    hidden = sorted(UNFOLLOWED)
    incidents += [compose(args.seed, args.count + i, hidden[i % len(hidden)])
                  for i in range(args.unfollowed)]  # fmt: skip
    paths = [inc.write(tmp / inc.name) for inc in incidents]
    t0 = time.perf_counter()
    base = [judge(p, investigate(p)) for p in paths]
    rules_s = time.perf_counter() - t0
    rows: dict[str, Any] = {}
    for kind in [m for m in args.models.split(",") if m]:
        use = paths[: args.smol_count] if kind == "smollm2" else paths
        runs = _with_model(kind, use, tmp, args.smol_context if kind == "smollm2" else None)
        rows[kind] = {"n": len(use), **compare(use, base[: len(use)], runs)}
        print(json.dumps({kind: {k: v for k, v in rows[kind].items() if k != "incidents"}}),
              flush=True)  # fmt: skip
    missed = sum(not b.score.recall for b in base)
    print(f"\nseed {args.seed}, {len(paths)} incidents ({missed} where the rules miss a root); "
          f"rules-only {rules_s:.1f} s in all")  # fmt: skip
    print(
        "| model | n | improved | same | worse | improved where the rules miss | false verified "
        "| claims kept | refused | quote-check failures | s per run | rounds by the model "
        "| s per round |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, r in rows.items():
        v = r["verdicts"]
        print(f"| {kind} | {r['n']} | {v.get('improved', 0)} | {v.get('same', 0)} | "
              f"{v.get('worse', 0)} | {r.get('improved_where_missed', 0)} of "
              f"{r.get('rules_missed', 0)} | {r.get('false_verified', 0)} | {r.get('kept', 0)} | "
              f"{r.get('refused', 0)} | {r.get('quote_failures', 0)} | "
              f"{r.get('seconds', 0) / max(1, r['n']):.1f} | "
              f"{r.get('model_rounds', 0)} of {r.get('rounds', 0)} | "
              f"{r.get('seconds', 0) / max(1, r.get('rounds', 0)):.1f} |")  # fmt: skip
    write_results(args.results, {"seed": args.seed, "count": len(paths), "models": rows},
                  load_average=os.getloadavg())  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
