"""The knowledge base's rows: passages, their full-text index and their exact identifiers.

The store keeps and ranks; what a passage is (a Markdown heading's section), which words are
identifiers, and how the two rankings are fused is the caller's (``loopkernel_apps.sre._kb``).

- ``put_passages(file, passages)`` replaces every passage of ``file`` in one transaction:
  a file indexed twice holds its second version only.
- ``text_ranked(words, limit)``: the passages holding any of ``words``, best first: SQLite
  FTS5's BM25 (the heading weighted 2 against the body's 1), PostgreSQL's ``ts_rank`` over
  an English ``tsvector`` (the heading at weight A). Both stem (Porter, English), so
  "restarting" finds "restarts". ``words`` are plain words; anything else in them is dropped
  here, so no query syntax of either database reaches it.
- ``identifier_ranked(idents, limit)``: the passages naming most of ``idents`` exactly.
- ``passages(ids)``: the rows themselves.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from loopkernel.store._engine import Cursor, How

__all__ = [
    "POSTGRES_TEXT",
    "SQLITE_TEXT",
    "Knowledge",
    "KnowledgeRows",
    "NewPassage",
    "Passage",
    "TextSearch",
]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class NewPassage:
    """A passage to index."""

    heading: str
    """Its heading path, ``Title > Section``."""
    body: str
    identifiers: tuple[str, ...] = ()
    """The exact identifiers it names (matched as given: the caller normalises)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Passage:
    """A passage as the store holds it."""

    passage_id: int
    file: str
    heading: str
    body: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TextSearch:
    """How a database runs a full-text query and keeps its index."""

    ranked: str
    """``(passage_id, score)`` rows, best first; parameters: the query, the limit."""
    joiner: str
    """Between the query's words (an OR of them)."""
    index: str = ""
    """After a passage's row is written: its row in the index (``passage_id, heading, body``)."""
    unindex: str = ""
    """Before a file's rows are deleted: their rows out of the index (the file)."""


SQLITE_TEXT = TextSearch(
    ranked="SELECT rowid, bm25(kb_text, 2.0, 1.0) AS s FROM kb_text WHERE kb_text MATCH ? "
    "ORDER BY s, rowid LIMIT ?",
    joiner=" OR ",
    index="INSERT INTO kb_text (rowid, heading, body) VALUES (?, ?, ?)",
    unindex="DELETE FROM kb_text WHERE rowid IN (SELECT passage_id FROM kb_passages "
    "WHERE file = ?)",
)
POSTGRES_TEXT = TextSearch(
    ranked="SELECT passage_id, ts_rank(words, q) AS s FROM kb_passages, "
    "to_tsquery('english', ?) q WHERE words @@ q ORDER BY s DESC, passage_id LIMIT ?",
    joiner=" | ",
)

_WORD = re.compile(r"[^\W_]+")
_INSERT = (
    "INSERT INTO kb_passages (file, heading, body, added_at) VALUES (?, ?, ?, ?) "
    "RETURNING passage_id"
)
_IDENT = "INSERT INTO kb_identifiers (ident, passage_id) VALUES (?, ?) ON CONFLICT DO NOTHING"
_BY_IDENT = (
    "SELECT passage_id, COUNT(*) AS n FROM kb_identifiers WHERE ident IN ({marks}) "
    "GROUP BY passage_id ORDER BY n DESC, passage_id LIMIT ?"
)
_ROWS = "SELECT passage_id, file, heading, body FROM kb_passages WHERE passage_id IN ({marks})"


class Knowledge(Protocol):
    """The knowledge base (the SQLite and PostgreSQL stores both are one)."""

    async def put_passages(self, file: str, passages: Sequence[NewPassage]) -> int:
        """Replace ``file``'s passages with ``passages``; how many were written."""
        ...

    async def text_ranked(self, words: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """``(passage_id, score)`` of the passages holding any of ``words``, best first."""
        ...

    async def identifier_ranked(self, idents: Sequence[str], limit: int) -> list[tuple[int, int]]:
        """``(passage_id, how many of idents it names)``, most first."""
        ...

    async def passages(self, ids: Sequence[int]) -> list[Passage]:
        """The passages of ``ids`` (in no order)."""
        ...

    async def files(self) -> list[tuple[str, int]]:
        """Each indexed file with its number of passages."""
        ...


class KnowledgeRows:
    """``Knowledge`` over the engine (mixed into both stores before ``SQLStore``)."""

    if TYPE_CHECKING:
        text_search: TextSearch

        async def _call(
            self,
            body: Callable[[Cursor], T],
            how: How = "statement",
            *,
            sync: bool = True,
            bulk: bool = False,
        ) -> T: ...

    async def put_passages(self, file: str, passages: Sequence[NewPassage]) -> int:
        ts, now = self.text_search, time.time()

        def body(cur: Cursor) -> int:
            if ts.unindex:
                cur.run(ts.unindex, (file,))
            cur.run(
                "DELETE FROM kb_identifiers WHERE passage_id IN "
                "(SELECT passage_id FROM kb_passages WHERE file = ?)",
                (file,),
            )
            cur.run("DELETE FROM kb_passages WHERE file = ?", (file,))
            for p in passages:
                pid = int(cur.one(_INSERT, (file, p.heading, p.body, now))[0])
                if ts.index:
                    cur.run(ts.index, (pid, p.heading, p.body))
                cur.many(_IDENT, [(i, pid) for i in sorted(set(p.identifiers))])
            return len(passages)

        return await self._call(body, "write")

    async def text_ranked(self, words: Sequence[str], limit: int) -> list[tuple[int, float]]:
        plain = sorted({w.lower() for text in words for w in _WORD.findall(text)})
        if not plain:
            return []
        query = self.text_search.joiner.join(plain)
        rows = await self._call(lambda cur: cur.all(self.text_search.ranked, (query, limit)))
        return [(int(r[0]), float(r[1])) for r in rows]

    async def identifier_ranked(self, idents: Sequence[str], limit: int) -> list[tuple[int, int]]:
        if not idents:
            return []
        sql = _BY_IDENT.format(marks=",".join("?" * len(idents)))
        rows = await self._call(lambda cur: cur.all(sql, (*idents, limit)))
        return [(int(r[0]), int(r[1])) for r in rows]

    async def passages(self, ids: Sequence[int]) -> list[Passage]:
        if not ids:
            return []
        sql = _ROWS.format(marks=",".join("?" * len(ids)))
        rows = await self._call(lambda cur: cur.all(sql, tuple(ids)))
        return [Passage(passage_id=int(r[0]), file=r[1], heading=r[2], body=r[3]) for r in rows]

    async def files(self) -> list[tuple[str, int]]:
        sql = "SELECT file, COUNT(*) FROM kb_passages GROUP BY file ORDER BY file"
        return [(r[0], int(r[1])) for r in await self._call(lambda cur: cur.all(sql))]
