"""The ``kb_search`` tool: passages of the indexed runbooks, each with its file and heading.

The server opens the knowledge base's store (``--kb URL``) at its first search and keeps it
open. Without one, a search answers with no passages and says why (``data.kb`` false): a
run without a knowledge base still runs. A passage is evidence like any other result,
redacted and capped; nothing reads instructions from it.
"""

from __future__ import annotations

from typing import Any

from loopkernel import JSON, Knowledge, open_store
from loopkernel_apps.sre._kb import search
from loopkernel_apps.sre.tools._scope import Scope

__all__ = ["KbSearch"]

MAX_LIMIT = 10


class KbSearch:
    """The handler's state: the store URL, the store once opened."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._kb: Knowledge | None = None

    async def _open(self) -> Knowledge:
        if self._kb is None:
            assert self.url is not None
            store = open_store(self.url, create=False)
            await store.open()
            self._kb = store
        return self._kb

    async def __call__(self, scope: Scope, args: dict[str, JSON]) -> JSON:
        query = str(args["query"])
        limit = min(MAX_LIMIT, int(str(args.get("limit", 3))))
        source = f"kb_search {query[:80]}"
        if self.url is None:
            note = "no knowledge base for this investigation (loopkernel sre kb add; --kb)"
            return scope.result(source, note, {"kb": False, "passages": []})
        hits = await search(await self._open(), query, limit=limit)
        lines = [f"[{h.file} § {h.heading}]\n{h.excerpt}" for h in hits] or ["<no passage>"]
        data: dict[str, Any] = {"kb": True, "query": query, "passages": [h.to_json() for h in hits]}
        return scope.result(source, "\n\n".join(lines), data)
