"""Retrieval quality of the shipped runbooks: recall@1 and recall@3 for every failure class.

    python -m bench.sre_kb

For each failure class the investigator knows (``DETECTORS``), the query is what the
playbooks ask (``_kb.class_query``: the reasons and facts of the vocabulary, never the
class's name), and the right answer is the runbook whose ``Classes:`` line names the class.
Three rankings side by side, on SQLite (FTS5, BM25) and PostgreSQL (``ts_rank``): words
alone, identifiers alone, and the two fused by reciprocal rank (what ``kb_search`` returns).
A hit is a passage; recall@k counts a class when a passage of its runbook is in the top k.
Also the median time of one fused search (the whole query: two ranked reads and a fetch).

PostgreSQL: ``LOOPKERNEL_BENCH_PG`` (default the local server); a line says "skipped" when
the server or the ``postgres`` extra is missing. Writes bench/results/sre_kb.json.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench._results import write_results
from loopkernel.store import Store, open_store
from loopkernel_apps.sre import _kb
from loopkernel_apps.sre._detect import DETECTORS

PG = os.environ.get("LOOPKERNEL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
Ranker = Callable[[Store, str], Awaitable[list[str]]]


def owners() -> dict[str, str]:
    out = {}
    for name, path in _kb.markdown_files([_kb.shipped_runbooks()]):
        m = re.search(r"^Classes: (.+)$", path.read_text("utf-8"), re.M)
        for c in m.group(1).split(", ") if m else ():
            out[c] = name
    return out


async def _files(store: Store, ids: list[int]) -> list[str]:
    rows = {p.passage_id: p.file for p in await store.passages(ids)}
    return [rows[i] for i in ids]


async def by_words(store: Store, query: str) -> list[str]:
    return await _files(store, [pid for pid, _ in await store.text_ranked([query], 3)])


async def by_identifiers(store: Store, query: str) -> list[str]:
    idents = sorted(_kb.identifiers(query))
    return await _files(store, [pid for pid, _ in await store.identifier_ranked(idents, 3)])


async def fused(store: Store, query: str) -> list[str]:
    return [h.file for h in await _kb.search(store, query, limit=3)]


RANKERS: dict[str, Ranker] = {"words": by_words, "identifiers": by_identifiers, "fused": fused}


async def measure(url: str) -> dict[str, Any]:
    store = open_store(url)
    await store.open()
    try:
        await _kb.add_files(store, [_kb.shipped_runbooks()])
        want = owners()
        out: dict[str, Any] = {}
        for name, rank in RANKERS.items():
            at1 = at3 = 0
            missed = []
            for d in sorted(DETECTORS):
                got = await rank(store, _kb.class_query(d))
                at1 += bool(got) and got[0] == want[d]
                at3 += want[d] in got
                if want[d] not in got:
                    missed.append(d)
            out[name] = {"recall@1": at1, "recall@3": at3, "classes": len(DETECTORS),
                         "missed@3": missed}  # fmt: skip
        times = []
        for d in sorted(DETECTORS):
            t0 = time.perf_counter()
            await _kb.search(store, _kb.class_query(d), limit=3)
            times.append(time.perf_counter() - t0)
        out["search_ms_p50"] = round(statistics.median(times) * 1000, 2)
        out["passages"] = sum(n for _, n in await store.files())
        return out
    finally:
        await store.close()


async def pg_url() -> str | None:
    """A fresh database on the server, or ``None`` (skipped)."""
    try:
        import psycopg
    except ImportError:
        return None
    name = f"lk_bench_kb_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(PG, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error:
        return None
    return PG.rsplit("/", 1)[0] + "/" + name


def drop_pg(url: str) -> None:
    import psycopg

    with psycopg.connect(PG, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


def main() -> None:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = asyncio.run(measure(str(Path(tmp) / "kb.db")))
    url = asyncio.run(pg_url())
    if url is None:
        print("postgresql: skipped (no server or no postgres extra)")
    else:
        try:
            results["postgresql"] = asyncio.run(measure(url))
        finally:
            drop_pg(url)
    n = len(DETECTORS)
    print(f"{'store':<11} {'ranking':<12} {'recall@1':>9} {'recall@3':>9}  missed@3")
    for store, r in results.items():
        for name in RANKERS:
            row = r[name]
            print(f"{store:<11} {name:<12} {row['recall@1']:>4}/{n:<4} {row['recall@3']:>4}/{n:<4}"
                  f"  {', '.join(row['missed@3']) or '-'}")  # fmt: skip
        print(
            f"{store:<11} one fused search: {r['search_ms_p50']} ms (p50), {r['passages']} passages"
        )
    write_results("sre_kb", {"results": results}, load=os.getloadavg()[0])


if __name__ == "__main__":
    main()
