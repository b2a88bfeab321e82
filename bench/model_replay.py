"""What a resumed run saves: a replayed model answer against a fresh call, local model.

    python -m bench.model_replay            # 40 calls per row
    python -m bench.model_replay --quick    # 10 calls per row

A real gateway process (``loopkernel gateway --local smollm2``: llama.cpp through
``xllamacpp``, SmolLM2-135M, one thread) and a SQLite run store. Rows, one call at a time,
interleaved round-robin so a change in the machine's load falls on all rows alike:

- ``fresh``: ``ctx.complete`` with a key nobody has seen: journal intent, HTTP to the
  gateway, ledger reservation, the model writes up to 20 tokens, settle, journal result;
- ``replay (run journal)``: ``ctx.complete`` of a call the run already journaled, as a
  resumed task does: one effect-journal lookup, no gateway, no model;
- ``replay (gateway ledger)``: a call in flight at a crash, re-sent with its key: HTTP
  to the gateway, which answers from its ledger without the model.

Also the model's load time (as the gateway reports it) and its decode speed (output
tokens / provider latency of the fresh calls). Prints a markdown table with ratios and
writes bench/results/model_replay.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._results import write_results

PROMPT = "Write one short sentence about rivers."
MAX_TOKENS = 20


def _summary(name: str, samples: list[float], fresh_median: float) -> dict[str, Any]:
    median = statistics.median(samples)
    return {
        "row": name,
        "calls": len(samples),
        "median_ms": round(median * 1e3, 3),
        "max_ms": round(max(samples) * 1e3, 3),
        "fresh_over_this": round(fresh_median / median, 1),
    }


async def measure(n: int, tmp: Path, gw_env: dict[str, str]) -> dict[str, Any]:
    from loopkernel.executor import TaskContext, TaskServices
    from loopkernel.graph import GraphState, Task
    from loopkernel.ids import RunId, TaskId
    from loopkernel.models import Ask, Message, ModelClient, ModelLayer
    from loopkernel.store import SQLiteStore

    client = ModelClient.from_env(gw_env)
    assert client is not None
    store = SQLiteStore(tmp / "runs.db")
    await store.open()
    ask = [Message(role="user", content=PROMPT)]

    def ctx(task: str) -> TaskContext:
        tid = TaskId(task)
        state = GraphState(
            run_id=RunId("bench"),
            app="bench",
            params=None,
            tasks={tid: Task(task_id=tid, skill="w")},
        )
        return TaskContext(
            state=state,
            task_id=tid,
            attempt=1,
            upto_seq=0,
            services=TaskServices(models=ModelLayer(store, client)),
        )

    fresh: list[float] = []
    journal: list[float] = []
    ledger: list[float] = []
    tokens_per_s: list[float] = []
    clock = time.perf_counter
    try:
        # a run row for the effects, then one warm-up call (the first decode is slower)
        from loopkernel import BasePlanner, Kernel

        await Kernel(store, BasePlanner(), {}).start(app="bench", run_id="bench")
        await ctx("warm").complete(ask, max_tokens=MAX_TOKENS)
        for i in range(n):
            t0 = clock()
            reply = await ctx(f"t{i}").complete(ask, max_tokens=MAX_TOKENS)
            fresh.append(clock() - t0)
            assert not reply.replayed
            tokens_per_s.append(reply.output_tokens / (reply.latency_ms / 1e3))

            t0 = clock()
            again = await ctx(f"t{i}").complete(ask, max_tokens=MAX_TOKENS)
            journal.append(clock() - t0)
            assert again.replayed and again.text == reply.text

            t0 = clock()
            resent = await client.complete(
                ask,
                key=f"bench/t{i}/model/0",
                run_id="bench",
                task_id=f"t{i}",
                ask=Ask(max_tokens=MAX_TOKENS),
            )
            ledger.append(clock() - t0)
            assert resent.replayed and resent.text == reply.text
    finally:
        await store.close()
    base = statistics.median(fresh)
    rows = [
        _summary("fresh call (gateway + llama.cpp, <= 20 tokens)", fresh, base),
        _summary("replay from the run's effect journal", journal, base),
        _summary("replay from the gateway's ledger (re-sent key)", ledger, base),
    ]
    return {"rows": rows, "tokens_per_s_median": round(statistics.median(tokens_per_s), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 calls per row")
    args = parser.parse_args()
    n = 10 if args.quick else 40

    from loopkernel.testing import GatewayProcess

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        t0 = time.perf_counter()
        with GatewayProcess(["--local", "smollm2"], ledger=Path(tmp) / "ledger.db") as gw:
            ready_s = time.perf_counter() - t0
            load = next(
                float(line.split(" loaded in ")[1].split(" s")[0])
                for line in gw.stdout_lines
                if " loaded in " in line
            )
            result = asyncio.run(measure(n, Path(tmp), gw.runtime_env()))

    print(
        f"model load (llama.cpp, SmolLM2-135M Q4_1): {load:.2f} s; "
        f"gateway process ready after {ready_s:.2f} s"
    )
    print(f"decode speed of the fresh calls (median): {result['tokens_per_s_median']} tokens/s\n")
    print("| row | calls | median ms | max ms | fresh / row |")
    print("|---|---:|---:|---:|---:|")
    for r in result["rows"]:
        print(
            f"| {r['row']} | {r['calls']} | {r['median_ms']} | {r['max_ms']} | "
            f"{r['fresh_over_this']}x |"
        )
    write_results(
        "model_replay",
        {
            "model_load_s": round(load, 3),
            "gateway_ready_s": round(ready_s, 3),
            "max_tokens": MAX_TOKENS,
            **result,
        },
        loadavg=os.getloadavg()[0],
    )


if __name__ == "__main__":
    main()
