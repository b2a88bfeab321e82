"""Tool servers started before the layer that will use them: start-up overlapped.

A run's tool sources are known when the run starts, long before its first tool call:
``StartedServers`` spawns their servers then, so that a server's start-up (a Python
process importing the ``mcp`` SDK, about a second) runs while this process imports the
SDK itself, opens the store and plans. The run's ``ToolLayer`` takes each session over
on its first call that needs it (``ToolLayer.adopt``)::

    async with StartedServers(sources) as servers:      # spawned here
        await servers.spawned()
        ... open the store, journal the run ...
        async with ToolLayer(store, sources) as tools:
            tools.adopt(servers)                        # the first call takes one over
            await Kernel(store, planner, workers, parts=KernelParts(tools=tools)).run(run_id)

Rules that keep the semantics of a session opened on the first call:

- a session is handed over **once** (``take`` removes it), to the one layer of one run:
  a server never serves two runs' idempotency scopes;
- a session is handed over only to a layer whose source is *equal* to the one it was
  started for (command, environment, defs, timeouts ...); any other source spawns its own;
- a server that failed to start is handed over with its failure: the layer raises the
  same ``ToolUnavailable`` it raises when it starts the server itself; a failure that no
  layer asks for is dropped, as a server never started would have been;
- leaving the ``async with`` (the run ended, failed before its first tool call, the
  store could not be opened, Ctrl-C) stops every session not handed over at once: no
  request reached those servers, so nothing of theirs is lost, and none is left running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType

from loopkernel.tools._schema import SchemaCache
from loopkernel.tools._source import SourceSession, ToolSource

__all__ = ["StartedServers"]


class StartedServers:
    """Sessions being opened ahead of their layer, each handed over at most once."""

    def __init__(self, sources: Sequence[ToolSource]) -> None:
        self.sources = tuple(sources)
        self._waiting: list[SourceSession] = []
        self._closed = False

    async def __aenter__(self) -> StartedServers:
        try:
            self.start()
        except BaseException:  # a later source refused: the earlier ones are running
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def start(self) -> None:
        """Begin opening a session per source (the processes spawn at the loop's next turn)."""
        if self._closed:
            return
        schemas = SchemaCache()
        for source in self.sources:
            session = SourceSession(source, schemas=schemas)
            self._waiting.append(session)
            session.start()

    async def spawned(self) -> None:
        """Wait until every server process exists (or failed to start)."""
        await asyncio.gather(*(s.spawned() for s in self._waiting))

    @property
    def pids(self) -> list[int]:
        """The process ids of the servers not handed over yet."""
        return [pid for s in self._waiting if (pid := s.pid) is not None]

    def take(self, source: ToolSource) -> SourceSession | None:
        """The session started for a source equal to ``source``, removed from here (so no
        other layer gets it), or None. It may still be opening: ``wait_ready`` on it."""
        for i, session in enumerate(self._waiting):
            if session.source == source:
                return self._waiting.pop(i)
        return None

    async def aclose(self) -> None:
        """Stop every session not handed over, at once (no request ever reached them)."""
        self._closed = True
        waiting, self._waiting = self._waiting, []
        await asyncio.gather(*(s.close(grace=0) for s in waiting), return_exceptions=True)
