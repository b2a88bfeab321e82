"""The LLM planner's own overhead per event, beside the model's latency.

    python -m bench.planner_overhead             # bundled SmolLM2 (loopkernel[local-model])
    python -m bench.planner_overhead --scripted  # the scripted OpenAI-compatible server
    python -m bench.planner_overhead --quick     # fewer repeats

A real ``loopkernel gateway`` subprocess serves the model: ``--local smollm2`` (a real
llama.cpp server) by default, or, with ``--scripted`` (or when the local-model extra is
missing), the scripted OpenAI-compatible server of ``loopkernel.testing`` answering with the
rules' own patch. The speculation app (``fast`` scenario, straggler at 600 s) runs with
``LLMPlanner`` in this process, and each planned event is recorded: its snapshot, its event
and the fallback's patch.

Rows, per event kind of that run:

- ``prompt``: building the prompt (snapshot, event, allowlist with schemas, fenced data);
- ``judge ok``: judging a valid reply (the rules' own patch): strict parse, allowlist with
  JSON Schema checks, ``validate`` of the proposal and of the fallback (``agree``);
- ``judge bad``: judging prose (refused at the parse);
- ``model``: the model's latency as the gateway measured it, and ``round trip``: the whole
  ``ModelClient.complete`` call as the planner waited for it (HTTP + gateway + model).

The planner's overhead is ``prompt + judge ok``; the ratio column puts it beside the model.
Last, the cost of a replayed answer: the same key asked again is answered from the
gateway's ledger, against the fresh call. Prints tables, writes
bench/results/planner_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib.util
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._results import write_results
from loopkernel import Event, ExecutionConfig, GraphPatch, Kernel, RunStatus, Snapshot
from loopkernel.graph import GraphState
from loopkernel.models import Ask, Message, ModelClient
from loopkernel.planner.llm import LLMPlanner, PromptStyle, build_prompt, judge
from loopkernel.store import SQLiteStore
from loopkernel.testing import GatewayProcess, ScriptedProvider
from loopkernel_apps import speculation

PARAMS = {
    "delays": [0.01, 0.02, 600.0],
    "quorum": 2,
    "distill_delay": 0.05,
    "scenario": "fast",
    "planner": "llm",
}
PROVIDER_KEY = "sk-bench-scripted-key"


@dataclass
class Planned:
    state: GraphState
    event: Event
    fallback: GraphPatch
    prompt_ms: float
    model_ms: float
    latency_ms: float | None


class Recording(LLMPlanner):
    """The app's LLMPlanner, keeping what each event looked like for the offline rows."""

    planned: list[Planned]

    async def plan(self, snapshot: Snapshot, event: Event) -> Any:
        assert isinstance(snapshot, GraphState)
        before = copy.deepcopy(snapshot)
        proposal = await super().plan(snapshot, event)
        self.planned.append(
            Planned(
                state=before,
                event=event,
                fallback=proposal.fallback,
                prompt_ms=self.last.prompt_ms,
                model_ms=self.last.model_ms,
                latency_ms=proposal.latency_ms,
            )
        )
        return proposal


def timed_us(fn: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


async def run_app(client: ModelClient, runs: int, db: Path) -> list[Planned]:
    parts = speculation.build(PARAMS | {"planner": "rules"})
    planner = Recording(allow=speculation.ALLOW, fallback=parts.planner, client=client)
    planner.planned = []
    store = SQLiteStore(db)
    await store.open()
    try:
        for i in range(runs):
            kernel = Kernel(store, planner, parts.workers, config=ExecutionConfig(poll_s=0.02))
            started = await kernel.start(app="speculation", params=PARAMS, run_id=f"bench-{i}")
            outcome = await kernel.run(started.run_id)
            assert outcome.status is RunStatus.SUCCEEDED, outcome
    finally:
        await store.close()
    return planner.planned


async def replay_cost(client: ModelClient, repeat: int) -> dict[str, float]:
    fresh, replayed = [], []
    for i in range(repeat):
        msgs = [Message(role="user", content=f"Say one word. ({i})")]
        key = f"bench-replay/{time.time_ns()}/{i}"
        t0 = time.perf_counter()
        first = await client.complete(msgs, key=key, run_id="bench-replay", ask=Ask(max_tokens=8))
        t1 = time.perf_counter()
        again = await client.complete(msgs, key=key, run_id="bench-replay", ask=Ask(max_tokens=8))
        t2 = time.perf_counter()
        assert not first.replayed and again.replayed and again.text == first.text
        fresh.append(t1 - t0)
        replayed.append(t2 - t1)
    return {
        "fresh_ms": round(statistics.median(fresh) * 1000, 2),
        "replayed_ms": round(statistics.median(replayed) * 1000, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scripted", action="store_true", help="the scripted server, not SmolLM2")
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    args = ap.parse_args()
    local = not args.scripted and importlib.util.find_spec("xllamacpp") is not None
    runs, repeat = (1, 200) if args.quick else (3, 2000)
    tmp = Path(tempfile.mkdtemp(prefix="lk-planner-bench-"))

    async def with_gateway(gw: GatewayProcess) -> tuple[list[Planned], dict[str, float]]:
        env = gw.runtime_env()
        client = ModelClient(env["LOOPKERNEL_GATEWAY"], env["LOOPKERNEL_GATEWAY_TOKEN"])
        planned = await run_app(client, runs, tmp / "runs.db")
        return planned, await replay_cost(client, 3 if args.quick else 10)

    if local:
        model = "SmolLM2-135M-Instruct (loopkernel gateway --local smollm2, llama.cpp)"
        with GatewayProcess(["--local", "smollm2"], ledger=tmp / "ledger.db") as gw:
            planned, replay = asyncio.run(with_gateway(gw))
    else:
        model = "scripted OpenAI-compatible server (loopkernel.testing.ScriptedProvider)"
        with ScriptedProvider(default="[]", api_key=PROVIDER_KEY).running() as p:
            gw_args = ["--provider", "openai", "--base-url", p.base_url, "--model", "scripted"]
            with GatewayProcess(
                gw_args, env={"OPENAI_API_KEY": PROVIDER_KEY}, ledger=tmp / "ledger.db"
            ) as gw:
                planned, replay = asyncio.run(with_gateway(gw))

    rows: list[dict[str, Any]] = []
    by_kind: dict[str, list[Planned]] = {}
    for p in planned:
        by_kind.setdefault(p.event.kind.value, []).append(p)
    print(f"model: {model}; {runs} run(s) of speculation, {len(planned)} planned events\n")
    print(
        "| event | n | prompt µs | judge ok µs | judge bad µs | overhead µs | model ms "
        "| round trip ms | overhead / model |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    allow = speculation.ALLOW
    for kind, items in by_kind.items():
        sample = items[0]
        good = json.dumps(sample.fallback.to_json())
        prompt_us = timed_us(
            lambda s=sample: build_prompt(
                s.state, s.event, allow, suggestion=s.fallback, style=PromptStyle(tag="0" * 16)
            ),
            repeat,
        )
        ok_us = timed_us(
            lambda s=sample, g=good: judge(g, s.state, allow, fallback=s.fallback), repeat
        )
        bad_us = timed_us(
            lambda s=sample: judge("Sure! Here is my plan.", s.state, allow, fallback=s.fallback),
            repeat,
        )
        verdict = judge(good, sample.state, allow, fallback=sample.fallback)
        assert verdict.patch is not None, verdict  # the rules' own patch is admitted
        latencies = [p.latency_ms for p in items if p.latency_ms is not None]
        model_ms = statistics.median(latencies) if latencies else float("nan")
        trip_ms = statistics.median(p.model_ms for p in items)
        overhead_us = prompt_us + ok_us
        row = {
            "event": kind,
            "n": len(items),
            "prompt_us": round(prompt_us, 1),
            "judge_ok_us": round(ok_us, 1),
            "judge_bad_us": round(bad_us, 1),
            "overhead_us": round(overhead_us, 1),
            "model_ms": round(model_ms, 2),
            "round_trip_ms": round(trip_ms, 2),
            "overhead_over_model": round(overhead_us / 1000 / model_ms, 5) if latencies else None,
        }
        rows.append(row)
        print(
            f"| {kind} | {len(items)} | {row['prompt_us']} | {row['judge_ok_us']} | "
            f"{row['judge_bad_us']} | {row['overhead_us']} | {row['model_ms']} | "
            f"{row['round_trip_ms']} | {row['overhead_over_model']} |"
        )
    print("\n| model call | median ms |\n|---|---|")
    print(f"| fresh (provider call) | {replay['fresh_ms']} |")
    print(f"| replayed (same key, gateway ledger) | {replay['replayed_ms']} |")
    write_results(
        "planner_overhead",
        {"model": model, "runs": runs, "repeat": repeat, "rows": rows, "replay": replay},
        loadavg=[round(x, 2) for x in os.getloadavg()],
    )


if __name__ == "__main__":
    main()
