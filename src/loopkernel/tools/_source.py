"""A tool source (a stdio MCP server named by its command line) and one session with it.

``ToolSource`` is configuration: a command line, an environment, optional frozen defs.
``SourceSession`` is one live connection: it spawns the server, runs the MCP handshake,
reads ``tools/list``, and serves calls until it is closed. The server is spawned before
the ``mcp`` SDK is imported here, which then happens on a thread while the server starts
(``_stdio``); the pipe bridge and the SDK's ``ClientSession`` are entered and left in one
owner task per session, so a session opened by one worker can serve every other worker
of the run. ``start`` begins all that without waiting (``StartedServers``), ``open``
waits for it.

Failures are mapped onto the three errors a caller can tell apart:

==========================================  =====================================
what happened                               raised
==========================================  =====================================
bad arguments, bad output, handler raised   ``ToolError`` (kind names which; a
                                            fault that may pass: ``ToolTransientError``)
the deadline passed (request cancelled)     ``ToolTimeout`` (kind ``timeout``)
command missing / server exits at start     ``ToolCannotStart`` (``cannot_start``)
garbage on stdout, no MCP handshake         ``ToolNotMCP`` (``not_mcp``)
server died, or was killed while starting  ``ToolServerDied`` (``server_died``)
==========================================  =====================================

``mcp`` is imported only when a session opens, after its server was spawned.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from loopkernel import telemetry
from loopkernel.errors import (
    ToolCannotStart,
    ToolError,
    ToolNotMCP,
    ToolServerDied,
    ToolTimeout,
    ToolUnavailable,
    UsageError,
    revive,
)
from loopkernel.graph import JSON
from loopkernel.tools import _stdio
from loopkernel.tools._defs import EFFECTS, Effect, ToolDef, ToolDefs, effect_of, retry_of
from loopkernel.tools._extra import require_mcp
from loopkernel.tools._host import (
    DEDUPES_META_KEY,
    EFFECT_META_KEY,
    ERROR_META_KEY,
    IDEMPOTENCY_META_KEY,
    RETRY_META_KEY,
)
from loopkernel.tools._schema import SchemaCache, canonical_json

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp import types as mcp_types

__all__ = ["SourceSession", "ToolSource", "check_arguments", "check_output"]

_ERROR_KINDS = frozenset(
    {
        "invalid_arguments",
        "invalid_output",
        "handler_error",
        "handler_transient",
        "unknown_tool",
        "duplicate_key",
    }
)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSource:
    """Where tools come from: a stdio MCP server, ours or anyone's, named by its command."""

    name: str
    """How errors, restarts and ``tools list`` name this source."""
    command: tuple[str, ...]
    """The server's command line: executable first."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to the small environment the SDK passes a stdio child (HOME, PATH, USER ...)."""
    cwd: str | None = None
    """The server's working directory."""
    defs: ToolDefs | None = None
    """The tool set's frozen defs, when known: tools resolve and arguments are checked
    without spawning, and the server must advertise exactly these schemas."""
    effects: Mapping[str, Effect] = field(default_factory=dict)
    """Effect class per tool name, overriding what the server declares."""
    timeouts: Mapping[str, float] = field(default_factory=dict)
    """Deadline in seconds per tool name, overriding the layer's default."""
    start_timeout: float = 20.0
    """Seconds the server has to answer ``initialize`` and ``tools/list``."""
    max_restarts: int = 1
    """How many times the layer restarts this server when it dies, per layer."""

    def __post_init__(self) -> None:
        if not self.name:
            raise UsageError("a tool source needs a name")
        if isinstance(self.command, str):
            raise UsageError(
                f"tool source {self.name!r}: command must be a sequence of arguments; "
                "use ToolSource.from_command(name, 'cmd --flag') for a command-line string"
            )
        object.__setattr__(self, "command", tuple(self.command))
        if not self.command or not self.command[0]:
            raise UsageError(f"tool source {self.name!r} needs a command line")
        for tool, effect in self.effects.items():
            if effect not in EFFECTS:
                raise UsageError(f"tool source {self.name!r}: effect of {tool!r} is {effect!r}")
        for tool, seconds in self.timeouts.items():
            if not seconds > 0:
                raise UsageError(f"tool source {self.name!r}: timeout of {tool!r} must be > 0")
        if not self.start_timeout > 0:
            raise UsageError(f"tool source {self.name!r}: start_timeout must be > 0")
        if self.max_restarts < 0:
            raise UsageError(f"tool source {self.name!r}: max_restarts must be >= 0")

    @classmethod
    def from_command(cls, name: str, command_line: str, **options: Any) -> ToolSource:
        """A source from a shell-style command line (split with ``shlex``, no shell)."""
        try:
            argv = tuple(shlex.split(command_line))
        except ValueError as exc:
            msg = f"tool source {name!r}: cannot parse {command_line!r}: {exc}"
            raise UsageError(msg) from None
        return cls(name=name, command=argv, **options)

    @classmethod
    def python_module(cls, name: str, module: str, *args: str, **options: Any) -> ToolSource:
        """A source served by ``python -m module args`` with this interpreter."""
        return cls(name=name, command=(sys.executable, "-m", module, *args), **options)


def check_arguments(schemas: SchemaCache, tool: ToolDef, arguments: JSON) -> None:
    """``ToolError(kind="invalid_arguments")`` unless ``arguments`` satisfy the input schema."""
    try:
        validator = schemas.validator(tool.input_schema)
    except ValueError as exc:
        msg = f"{tool.name}: inputSchema {exc}"
        raise ToolError(msg, tool=tool.name, kind="invalid_schema") from None
    if (err := validator.error(arguments)) is not None:
        msg = f"{tool.name}: arguments break inputSchema: {err}"
        raise ToolError(msg, tool=tool.name, kind="invalid_arguments")


def check_output(schemas: SchemaCache, tool: ToolDef, value: JSON) -> None:
    """``ToolError(kind="invalid_output")`` unless ``value`` satisfies the output schema."""
    if tool.output_schema is None:
        return
    try:
        validator = schemas.validator(tool.output_schema)
    except ValueError as exc:
        msg = f"{tool.name}: outputSchema {exc}"
        raise ToolError(msg, tool=tool.name, kind="invalid_schema") from None
    if (err := validator.error(value)) is not None:
        msg = f"{tool.name}: the result breaks outputSchema: {err}"
        raise ToolError(msg, tool=tool.name, kind="invalid_output")


class SourceSession:
    """One live stdio MCP session with a source's server; ``async with`` or ``open``/``close``."""

    def __init__(self, source: ToolSource, *, schemas: SchemaCache | None = None) -> None:
        self.source = source
        self.schemas = schemas or SchemaCache()
        self.tools: dict[str, ToolDef] = {}
        """The tools it serves (after ``open``), by name."""
        self.server_name: str = ""
        self.protocol_version: str = ""
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._closing: asyncio.Event | None = None
        self._spawned: asyncio.Future[None] | None = None
        self._errlog: IO[str] | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._pipes: _stdio.Pipes | None = None
        self._grace = 2.0
        self._eof = False

    async def __aenter__(self) -> SourceSession:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def alive(self) -> bool:
        """Open, and the server's stdout has not ended (it has not died or spoken garbage)."""
        pipes_ended = self._pipes is not None and self._pipes.eof
        return self._session is not None and not self._eof and not pipes_ended

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Spawn the server, initialize, list its tools. ``ToolUnavailable`` when it cannot."""
        self.start()
        await self.wait_ready()

    def start(self) -> None:
        """Begin opening without waiting: the server is spawned at the loop's next turn,
        before the ``mcp`` SDK is imported here, and the handshake follows on its own.
        ``wait_ready`` (or ``open``) waits for the result; ``close`` ends it either way."""
        if self._task is not None:
            raise UsageError(f"session with {self.source.name!r} was already opened")
        require_mcp()
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._spawned = loop.create_future()
        self._closing = asyncio.Event()
        # lives as long as the session; close() closes it
        self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._task = loop.create_task(self._main(), name=f"loopkernel-tools:{self.source.name}")

    async def spawned(self) -> None:
        """Wait until the server process exists (or could not be started: then the error
        is kept for ``wait_ready``). Returns at once on a session that was never started."""
        if self._spawned is not None:
            await asyncio.shield(self._spawned)

    async def wait_ready(self) -> None:
        """Wait for the handshake that ``start`` began; on failure close the session and
        raise its ``ToolUnavailable``."""
        if self._ready is None:
            raise UsageError(f"session with {self.source.name!r} was not started")
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            await self.close()
            raise

    @property
    def pid(self) -> int | None:
        """The server's process id, once spawned."""
        return None if self._process is None else self._process.pid

    async def close(self, *, grace: float = 2.0) -> None:
        """End the session: close stdin, let the server exit (``grace`` seconds), then
        terminate it. ``grace=0`` for a server that was never sent a request."""
        self._grace = grace
        task = self._task
        if task is not None and self._closing is not None:
            self._closing.set()
            if not self._ready_done():
                task.cancel()
            try:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            finally:
                if self._process is not None:  # close() itself was cancelled: no orphan
                    _stdio.kill_now(self._process)
        ready = self._ready
        if ready is not None and ready.done() and not ready.cancelled():
            ready.exception()  # retrieved: an open() that gave up must not log it as lost
        self._session = None
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    def _ready_done(self) -> bool:
        return self._ready is not None and self._ready.done()

    def stderr_tail(self, limit: int = 600) -> str:
        """The end of what the server wrote on stderr, one line."""
        if self._errlog is None:
            return ""
        try:
            fd = self._errlog.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, limit, max(0, size - limit)).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        lines = [ln.strip() for ln in data.splitlines() if ln.strip()]
        return " | ".join(lines[-3:])

    async def _main(self) -> None:
        """The owner task: spawns the server, imports the SDK while the server starts,
        enters the SDK's session, serves until closed, then stops the server."""
        assert self._ready is not None and self._closing is not None
        assert self._spawned is not None and self._errlog is not None
        src = self.source
        proc: asyncio.subprocess.Process | None = None
        try:
            try:
                proc = await _stdio.spawn(
                    src.command, env=src.env, cwd=src.cwd, errlog=self._errlog
                )
            finally:
                self._process = proc
                if not self._spawned.done():
                    self._spawned.set_result(None)
            # About a second of imports, on a thread: the server starts meanwhile, and
            # this process goes on with its own work (opening a store, planning).
            await asyncio.to_thread(_import_sdk)
            await self._serve(proc)
        except Exception as exc:  # every failure of the owner task becomes a value
            if not self._ready.done():
                error = self._start_error(_leaf(exc))
                if await _killed_by_signal(proc):
                    # killed from outside mid-handshake (an OOM killer, an operator, a
                    # chaos run): a fault that may pass, not a setup that is wrong
                    error = _unavailable(
                        src, ToolServerDied, f"killed by a signal while starting ({error.message})"
                    )
                self._ready.set_exception(error)
        finally:
            self._session = None
            self._eof = True
            if not self._ready.done():  # left without an error: never leave open() waiting
                self._ready.set_exception(
                    _unavailable(src, ToolCannotStart, "the session ended before it was ready")
                )
            if proc is not None:
                await _stdio.stop(proc, grace=self._grace)

    async def _serve(self, proc: asyncio.subprocess.Process) -> None:
        import anyio
        from mcp import ClientSession
        from mcp import types as mt

        from loopkernel import __version__

        assert self._ready is not None and self._closing is not None
        src = self.source
        async with _stdio.streams(proc) as (read, write, pipes):
            self._pipes = pipes
            info = mt.Implementation(name="loopkernel", version=__version__)
            async with ClientSession(read, write, client_info=info) as session:
                with anyio.fail_after(src.start_timeout):
                    init = await session.initialize()
                    listed = await _list_all(session)
                self.server_name = init.server_info.name
                self.protocol_version = init.protocol_version
                self.tools = self._tool_defs(listed)
                self._session = session
                self._ready.set_result(None)
                await self._closing.wait()

    @property
    def _garbage(self) -> str | None:
        """A snippet of the first stdout line that was not JSON-RPC, if there was one."""
        found = None if self._pipes is None else self._pipes.garbage
        return None if found is None else _garbage_snippet(found)

    def _tool_defs(self, listed: list[mcp_types.Tool]) -> dict[str, ToolDef]:
        src = self.source
        found: dict[str, ToolDef] = {}
        for t in listed:
            declared = effect_of((t.meta or {}).get(EFFECT_META_KEY))
            ann = t.annotations
            if declared is None and ann is not None:
                if ann.read_only_hint:
                    declared = "read_only"
                elif ann.idempotent_hint:
                    declared = "idempotent"
            effect = src.effects.get(t.name) or declared or "irreversible"
            try:  # a LoopKernel host publishes its declared policy; others publish none
                retry = retry_of(t.name, effect, (t.meta or {}).get(RETRY_META_KEY))
            except UsageError:
                retry = None
            found[t.name] = ToolDef(
                name=t.name,
                description=t.description or "",
                input_schema=t.input_schema,
                output_schema=t.output_schema,
                effect=effect,
                retry=retry,
                dedupes_by_key=(t.meta or {}).get(DEDUPES_META_KEY) is True,
            )
        if src.defs is None:
            return found
        tools: dict[str, ToolDef] = {}
        for want in src.defs:
            got = found.get(want.name)
            if got is None:
                msg = f"the server does not serve {want.name!r}, which its defs declare"
                raise _SchemaMismatch(msg)
            got_schemas = canonical_json([got.input_schema, got.output_schema])
            if got_schemas != canonical_json([want.input_schema, want.output_schema]):
                msg = f"the server advertises other schemas for {want.name!r} than its defs"
                raise _SchemaMismatch(msg)
            # the defs are the contract: their declarations (retry, keepSecrets,
            # dedupesByKey ...) stand, the source may override the effect
            tools[want.name] = dataclasses.replace(
                want, effect=src.effects.get(want.name) or want.effect
            )
        return tools

    def _start_error(self, exc: BaseException) -> ToolUnavailable:
        src, cmd = self.source, self.source.command[0]
        stderr = self.stderr_tail()
        tail = f"; the end of its stderr: {stderr}" if stderr else ""
        if isinstance(exc, ToolUnavailable):
            return exc
        if isinstance(exc, _SchemaMismatch):
            return _unavailable(src, ToolUnavailable, f"{exc}{tail}", kind="schema_mismatch")
        if isinstance(exc, FileNotFoundError):
            return _unavailable(src, ToolCannotStart, f"command not found: {cmd!r}")
        if self._garbage is not None:
            return _unavailable(
                src, ToolNotMCP, f"it wrote a line that is not JSON-RPC on stdout: {self._garbage}"
            )
        if isinstance(exc, TimeoutError):  # before OSError: TimeoutError is one
            return _unavailable(
                src,
                ToolNotMCP,
                f"no MCP answer to initialize within {src.start_timeout:g} s "
                f"(is {cmd!r} a stdio MCP server?){tail}",
            )
        if isinstance(exc, OSError):
            return _unavailable(src, ToolCannotStart, f"cannot run {cmd!r}: {exc.strerror or exc}")
        if isinstance(exc, ImportError):  # the SDK is installed but cannot be imported
            return _unavailable(src, ToolCannotStart, f"the mcp SDK cannot be imported: {exc}")
        from mcp import MCPError  # imported by now: the handshake is what failed

        if isinstance(exc, MCPError) and exc.code == -32000:
            return _unavailable(
                src,
                ToolCannotStart,
                f"the server exited before it finished the MCP handshake{tail}",
            )
        return _unavailable(src, ToolNotMCP, f"the MCP handshake failed: {_one_line(exc)}{tail}")

    # -- calls -----------------------------------------------------------------------------

    def tool(self, name: str) -> ToolDef:
        """The tool ``name``, or ``ToolError(kind="unknown_tool")``."""
        tool = self.tools.get(name)
        if tool is None:
            have = ", ".join(sorted(self.tools))
            raise ToolError(
                f"{self.source.name!r} has no tool {name!r}; it has: {have}",
                tool=name,
                kind="unknown_tool",
                source=self.source.name,
            )
        return tool

    async def call(
        self, name: str, arguments: dict[str, JSON], *, key: str | None, time_limit: float
    ) -> JSON:
        """One ``tools/call``; the result checked against the output schema on receipt.

        Arguments are not checked here (``check_arguments`` is the caller's first step).
        """
        from mcp import MCPError
        from pydantic import ValidationError

        session = self._session
        if session is None:
            raise self._lost(name)
        tool = self.tool(name)
        meta: Any = None if key is None else {IDEMPOTENCY_META_KEY: key}
        tracer = telemetry.tracer()
        if tracer and (traceparent := tracer.traceparent()):
            meta = {**(meta or {}), "traceparent": traceparent}
        try:
            result = await session.call_tool(
                name, arguments, read_timeout_seconds=time_limit, meta=meta
            )
        except MCPError as exc:
            if exc.code == -32001:
                raise ToolTimeout(
                    f"{name}: no answer within {time_limit:g} s; the request was cancelled",
                    tool=name,
                    kind="timeout",
                    timeout=time_limit,
                    source=self.source.name,
                ) from None
            if exc.code == -32000:
                raise self._lost(name) from None
            kind = "invalid_arguments" if exc.code == -32602 else "handler_error"
            raise ToolError(
                f"{name}: {exc.message}", tool=name, kind=kind, source=self.source.name
            ) from None
        except RuntimeError as exc:  # the SDK's own output-schema check on receipt
            msg = f"{name}: {_one_line(exc)}"
            src = self.source.name
            raise ToolError(msg, tool=name, kind="invalid_output", source=src) from None
        except ValidationError as exc:
            raise ToolError(
                f"{name}: the answer is not a valid MCP tool result: {_one_line(exc)}",
                tool=name,
                kind="invalid_output",
                source=self.source.name,
            ) from None
        return self._value_of(tool, result)

    def _value_of(self, tool: ToolDef, result: mcp_types.CallToolResult) -> JSON:
        if result.is_error:
            err_meta = (result.meta or {}).get(ERROR_META_KEY)
            kind = err_meta.get("kind") if isinstance(err_meta, dict) else None
            text = " ".join(b.text for b in result.content if b.type == "text").strip()
            known = kind if kind in _ERROR_KINDS else "handler_error"
            raise revive(
                ToolError,
                {
                    "message": text or f"{tool.name}: the tool reported an error without a message",
                    "tool": tool.name,
                    "kind": known,
                    "source": self.source.name,
                },
            )
        if result.structured_content is not None:
            value: JSON = result.structured_content
        elif tool.output_schema is not None:
            raise ToolError(
                f"{tool.name}: declares an outputSchema but returned no structured content",
                tool=tool.name,
                kind="invalid_output",
                source=self.source.name,
            )
        else:
            value = _content_json(result.content)
        try:
            check_output(self.schemas, tool, value)
        except ToolError as err:
            raise type(err)(err.message, **{**err.attrs, "source": self.source.name}) from None
        return value

    def _lost(self, name: str) -> ToolUnavailable:
        """The error for a call on a session whose server went away."""
        if self._garbage is not None:
            return _unavailable(
                self.source,
                ToolNotMCP,
                f"it wrote a line that is not JSON-RPC on stdout: {self._garbage}",
                tool=name,
            )
        stderr = self.stderr_tail()
        return _unavailable(
            self.source,
            ToolServerDied,
            f"the server process ended during or before {name!r}"
            + (f"; the end of its stderr: {stderr}" if stderr else ""),
            tool=name,
        )


class _SchemaMismatch(Exception):
    pass


async def _killed_by_signal(proc: asyncio.subprocess.Process | None) -> bool:
    """Whether the server process ended by a signal (a negative return code). A closed
    pipe is seen before the exit is reaped: wait for it a little, never long."""
    if proc is None:
        return False
    if proc.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 2.0)
    return proc.returncode is not None and proc.returncode < 0


def _unavailable(
    src: ToolSource,
    cls: type[ToolUnavailable],
    detail: str,
    *,
    tool: str | None = None,
    kind: str | None = None,
) -> ToolUnavailable:
    """``cls`` for ``src``; ``kind`` only for the plain ``ToolUnavailable`` (its
    subclasses name their own)."""
    named = cls.kind or kind
    attrs: dict[str, Any] = {"kind": named, "source": src.name}
    if tool is not None:
        attrs["tool"] = tool
    return cls(f"tool server {src.name!r} unavailable ({named}): {detail}", **attrs)


async def _list_all(session: ClientSession) -> list[mcp_types.Tool]:
    from mcp import types as mt

    tools: list[mt.Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(
            params=None if cursor is None else mt.PaginatedRequestParams(cursor=cursor)
        )
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _content_json(blocks: list[Any]) -> JSON:
    """A result without structured content: its text, or its blocks as JSON."""
    if len(blocks) == 1 and getattr(blocks[0], "type", None) == "text":
        return blocks[0].text
    return [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]


def _import_sdk() -> None:
    """Import what a client session needs (on a thread, while the server starts)."""
    import mcp.client.session  # noqa: F401
    import mcp_types  # noqa: F401
    from mcp.shared import message  # noqa: F401


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _garbage_snippet(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            value = errors()[0].get("input")
            if isinstance(value, str):
                return repr(value[:120])
    return _one_line(exc)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return first[:300]
