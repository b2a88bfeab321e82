"""Runbooks and incident write-ups as a knowledge base: split, indexed, searched, cited.

``loopkernel sre kb add PATH...`` splits each Markdown file into passages, one per heading
(its heading path, ``Title > Section``, and the text under it), and writes them to the store
(``loopkernel.Knowledge``). A search ranks the passages twice and fuses the two lists
by reciprocal rank (``RRF_K``), without vectors:

- by words: the database's full-text search (SQLite FTS5's BM25, PostgreSQL's ``ts_rank``),
  stemmed, any of the query's words;
- by identifiers: the exact names a passage and the query share (``identifiers``): reasons
  in CamelCase (``CrashLoopBackOff``, ``OOMKilled``), exit codes (``exit:137``), names with
  dashes, dots or underscores (``payments-api``, ``crash_log_reason``). A word search
  stems and splits them; an identifier matches only as written (case aside).

A passage is data: the tool server returns it as evidence (file and heading as its source),
the playbooks never read steps from it, and a model sees it only inside the untrusted block.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from loopkernel import Knowledge, NewPassage
from loopkernel_apps.sre._vocab_rows import rows_for

__all__ = [
    "RRF_K",
    "Hit",
    "add_files",
    "class_query",
    "identifiers",
    "markdown_files",
    "search",
    "shipped_runbooks",
    "split_markdown",
    "with_kb_searches",
]

RRF_K = 60
"""Reciprocal rank fusion's constant: a passage's score is the sum over the rankings that
hold it of ``1 / (RRF_K + rank)`` (Cormack et al.; 60 is their value)."""
DEPTH = 20
"""How deep each ranking is read before fusing."""
EXCERPT = 1200
"""Characters of a passage's body a hit carries."""

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_CAMEL = re.compile(r"\b[A-Za-z]*[A-Z][a-z0-9]*[A-Z][A-Za-z0-9]*\b")
_EXIT = re.compile(r"\bexit(?:\s*code|Code)?[\s:=]*(\d{1,3})\b", re.IGNORECASE)
_NAME = re.compile(r"\b[a-z0-9]+(?:[-._][a-z0-9]+)+\b")


def identifiers(text: str) -> set[str]:
    """The exact identifiers ``text`` names, lower-cased (see the module docstring)."""
    found = {m.lower() for m in _CAMEL.findall(text) if any(c.islower() for c in m)}
    found |= {f"exit:{int(code)}" for code in _EXIT.findall(text)}
    found |= {m for m in _NAME.findall(text) if not re.fullmatch(r"[\d.]+", m)}
    return found


def class_query(detector: str) -> str:
    """What the playbooks ask the knowledge base about a finding of ``detector``: the reasons
    Kubernetes states for it and the facts the report states, from the vocabulary (never the
    detector's own name, which only this code knows)."""
    words: list[str] = []
    for r in rows_for(detector):
        fact = re.sub(r"\{\w+\}", " ", r.fact)
        for part in (r.reason, fact):
            if part not in words:
                words.append(part)
    return " ".join(words)


def split_markdown(text: str) -> list[NewPassage]:
    """One passage per heading that has text under it, headed by its path of headings (a
    fenced block's ``#`` lines are text)."""
    path: list[tuple[int, str]] = []
    passages: list[NewPassage] = []
    lines: list[str] = []
    fenced = False

    def flush() -> None:
        body = "\n".join(lines).strip()
        if body:
            heading = " > ".join(title for _, title in path) or "(untitled)"
            idents = identifiers(heading + "\n" + body)
            passages.append(NewPassage(heading=heading, body=body, identifiers=tuple(idents)))
        lines.clear()

    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        m = None if fenced else _HEADING.match(line)
        if m is None:
            lines.append(line)
            continue
        flush()
        level = len(m.group(1))
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, m.group(2)))
    flush()
    return passages


def markdown_files(paths: Iterable[str | Path]) -> list[tuple[str, Path]]:
    """``(name, path)`` of each Markdown file under ``paths``: a file by the name given, a
    folder's files by ``folder/relative``; ``FileNotFoundError`` for a path that is not there."""
    found: list[tuple[str, Path]] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            found += [
                (f"{p.name}/{f.relative_to(p).as_posix()}", f)
                for f in sorted(p.rglob("*.md"))
                if f.is_file()
            ]
        elif p.is_file():
            found.append((p.as_posix(), p))
        else:
            raise FileNotFoundError(f"no file or folder {given}")
    return found


def shipped_runbooks() -> Path:
    """The runbooks that come with the investigator (one per failure class family)."""
    return Path(str(resources.files("loopkernel_apps.sre").joinpath("runbooks")))


async def add_files(kb: Knowledge, paths: Iterable[str | Path]) -> list[tuple[str, int]]:
    """Index every Markdown file under ``paths`` (replacing an earlier version of each)."""
    done = []
    for name, path in markdown_files(paths):
        passages = split_markdown(path.read_text("utf-8"))
        done.append((name, await kb.put_passages(name, passages)))
    return done


@dataclass(frozen=True, kw_only=True, slots=True)
class Hit:
    """A passage found, with how it was found."""

    file: str
    heading: str
    excerpt: str
    """Its body, capped at ``EXCERPT`` characters."""
    score: float
    """Reciprocal rank fusion's score."""
    text_rank: int | None
    """Its rank by words (1 is best), or ``None``."""
    ident_rank: int | None
    """Its rank by identifiers, or ``None``."""
    matched: tuple[str, ...]
    """The identifiers it shares with the query."""

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "heading": self.heading,
            "excerpt": self.excerpt,
            "score": round(self.score, 6),
            "text_rank": self.text_rank,
            "ident_rank": self.ident_rank,
            "matched": list(self.matched),
        }


def fuse(*rankings: Sequence[int]) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of id lists, best first (ties by id, so it is deterministic)."""
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, pid in enumerate(ranking, start=1):
            score[pid] = score.get(pid, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))


async def search(kb: Knowledge, query: str, *, limit: int = 3) -> list[Hit]:
    """The ``limit`` best passages for ``query``, by words and identifiers fused."""
    idents = sorted(identifiers(query))
    by_text = [pid for pid, _ in await kb.text_ranked([query], DEPTH)]
    by_ident = [pid for pid, _ in await kb.identifier_ranked(idents, DEPTH)]
    best = fuse(by_text, by_ident)[:limit]
    rows = {p.passage_id: p for p in await kb.passages([pid for pid, _ in best])}
    hits = []
    for pid, score in best:
        p = rows[pid]
        named = identifiers(p.heading + "\n" + p.body)
        hits.append(
            Hit(
                file=p.file,
                heading=p.heading,
                excerpt=p.body[:EXCERPT],
                score=score,
                text_rank=by_text.index(pid) + 1 if pid in by_text else None,
                ident_rank=by_ident.index(pid) + 1 if pid in by_ident else None,
                matched=tuple(i for i in idents if i in named),
            )
        )
    return hits


def with_kb_searches(
    on: bool,
    chosen: list[dict[str, Any]],
    found: Iterable[str],
    skills: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """``chosen`` playbooks, each with a ``kb_search`` step per class it handles
    (``when.detectors``) that was found, asking ``class_query`` (``on`` false: unchanged)."""
    if not on:
        return chosen
    found = set(found)
    handles = {str(s["name"]): set(s["when"]["detectors"]) for s in skills}
    out = []
    for skill in chosen:
        classes = sorted(handles.get(skill["name"], set()) & found)
        steps = [{"tool": "kb_search", "args": {"query": class_query(d)}} for d in classes]
        out.append({**skill, "steps": [*skill["steps"], *steps]})
    return out
