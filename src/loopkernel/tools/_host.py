"""The server host: a tool set in a few lines, served over stdio with the official MCP SDK.

::

    host = ToolHost.from_file(Path(__file__).with_name("tool-defs.json"))

    @host.tool("add")
    async def add(args, call):
        return {"sum": args["a"] + args["b"]}

    if __name__ == "__main__":
        host.run()           # python -m my.tools  ->  an MCP server on stdin/stdout

The host publishes the defs file verbatim (``tools/list`` returns exactly its schemas) on
the SDK's low-level ``Server``, which validates nothing itself; so the host does:

- arguments against ``inputSchema`` (an MCP client other than ours may skip that);
- the handler's result against ``outputSchema`` with a real validator before it goes on
  the wire. A result that breaks it is refused: the client gets an error result of kind
  ``invalid_output``, never a coerced value.

Errors reach the client as ``isError`` results whose ``_meta["loopkernel/error"]`` names
the kind (``invalid_arguments``, ``invalid_output``, ``handler_error``, ``unknown_tool``,
``duplicate_key``), so the client raises a ``ToolError`` with that kind and the message.
A handler that raised a fault that may pass -- ``TimeoutError``, ``ConnectionError``, or
an ``OSError`` such as ENOSPC, EIO, EAGAIN (``TRANSIENT_ERRNOS``) -- is reported as
``handler_transient``: the client's layer retries it by the tool's policy instead of
failing the task.

The idempotency key a LoopKernel client sends in the request's ``_meta`` reaches the
handler as ``call.key``. ``once=KeyLedger(path)`` is the one line that makes a tool honour
it: a key seen before gets the first result back (or, with ``duplicate="refuse"``, an
error of kind ``duplicate_key``) and the handler does not run again.
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from loopkernel._jsonl import append_line, dump_line, load_lines
from loopkernel.errors import UsageError
from loopkernel.graph import JSON
from loopkernel.tools._defs import ToolDef, ToolDefs, load_tool_defs
from loopkernel.tools._extra import require_mcp
from loopkernel.tools._schema import Validator, compile_schema, json_problem

if TYPE_CHECKING:
    from mcp import types as mcp_types
    from mcp.server.context import ServerRequestContext

__all__ = [
    "EFFECT_META_KEY",
    "ERROR_META_KEY",
    "IDEMPOTENCY_META_KEY",
    "RETRY_META_KEY",
    "CallInfo",
    "Handler",
    "KeyLedger",
    "ToolHost",
    "read_ledger",
]

IDEMPOTENCY_META_KEY = "loopkernel/idempotency_key"
"""The request ``_meta`` key that carries ``run_id/task_id/call_index``."""
ERROR_META_KEY = "loopkernel/error"
"""The result ``_meta`` key of an error result: ``{"kind": ...}``."""
EFFECT_META_KEY = "loopkernel/effect"
"""The tool ``_meta`` key that publishes the effect class in ``tools/list``."""
RETRY_META_KEY = "loopkernel/retry"
"""The tool ``_meta`` key that publishes a declared retry policy in ``tools/list``."""
DEDUPES_META_KEY = "loopkernel/dedupesByKey"
"""The tool ``_meta`` key that declares, in ``tools/list``, that the server answers a
duplicate idempotency key without acting again (``true``); any MCP server may set it."""

Duplicate: TypeAlias = Literal["replay", "refuse"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CallInfo:
    """What a handler learns about its call besides the arguments."""

    tool: str
    """The tool called."""
    key: str | None
    """The caller's idempotency key (``run_id/task_id/call_index``), if it sent one."""
    meta: Mapping[str, JSON] = field(default_factory=dict)
    """The request's whole ``_meta``."""


Handler: TypeAlias = Callable[[dict[str, JSON], CallInfo], Awaitable[JSON] | JSON]
"""``handler(arguments, call) -> result``, async or plain (a plain one runs on a thread)."""


class _Refused(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class KeyLedger:
    """An append-only JSON-lines file of ``{"key", "tool", "result"}``: each key once.

    Loaded whole when opened, so a restarted server remembers every key its predecessor
    wrote. Each entry is one whole line, written and fsynced by ``append_line``: a short
    write (a full disk) is cut off and raised as ``OSError(ENOSPC)``, and the entry is
    not recorded; a torn last line (a crash inside the write) is cut off on the next open,
    so that call runs again when it is re-sent under its key. ``path=None`` keeps the
    ledger in memory (it then dies with the process).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._entries: list[dict[str, JSON]] = []
        self._by_key: dict[str, JSON] = {}
        self._lock: Any = None  # an anyio.Lock, made inside the event loop
        if self.path is not None:
            self._entries = load_lines(self.path)
            for entry in self._entries:
                key = entry.get("key")
                if isinstance(key, str):
                    self._by_key.setdefault(key, entry.get("result"))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def entries(self) -> list[dict[str, JSON]]:
        """Every entry, oldest first."""
        return list(self._entries)

    def result_of(self, key: str) -> JSON:
        """The result journaled for ``key`` (``KeyError`` when it has none)."""
        return self._by_key[key]

    def append(self, key: str | None, tool: str, result: JSON) -> None:
        """Write one entry durably. A key may be ``None`` (a caller that sent none)."""
        entry: dict[str, JSON] = {"key": key, "tool": tool, "result": result}
        if self.path is not None:
            append_line(self.path, dump_line(entry))
        self._entries.append(entry)
        if key is not None:
            self._by_key.setdefault(key, result)

    async def once(
        self,
        key: str | None,
        tool: str,
        produce: Callable[[], Awaitable[JSON]],
        *,
        duplicate: Duplicate = "replay",
    ) -> JSON:
        """Run ``produce`` unless ``key`` is journaled; journal what it returns.

        Calls are serialized per ledger, so two concurrent calls with one key cannot both
        run. ``produce`` must raise (and then nothing is journaled) rather than return a
        result it does not stand behind.
        """
        import anyio

        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if key is not None and key in self._by_key:
                if duplicate == "refuse":
                    raise _Refused(
                        "duplicate_key",
                        f"{tool}: idempotency key {key!r} was already used; refused",
                    )
                return self._by_key[key]
            result = await produce()
            self.append(key, tool, result)
            return result


def read_ledger(path: str | os.PathLike[str]) -> list[dict[str, JSON]]:
    """The entries of a ledger file (what a durable run record holds), oldest first."""
    return load_lines(path, repair=False)


@dataclass(kw_only=True, slots=True)
class _Entry:
    tool: ToolDef
    handler: Handler
    inputs: Validator
    outputs: Validator | None
    once: KeyLedger | None
    duplicate: Duplicate


class ToolHost:
    """Serves one tool set (a ``tool-defs.json``) over stdio; register a handler per tool."""

    def __init__(self, defs: ToolDefs, *, version: str = "0") -> None:
        self.defs = defs
        self.version = version
        self._entries: dict[str, _Entry] = {}

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, version: str = "0") -> ToolHost:
        return cls(load_tool_defs(path), version=version)

    # -- registration ----------------------------------------------------------------------

    def tool(
        self, name: str, *, once: KeyLedger | None = None, duplicate: Duplicate = "replay"
    ) -> Callable[[Handler], Handler]:
        """Decorator: ``handler`` serves tool ``name`` (which the defs must declare)."""

        def register(handler: Handler) -> Handler:
            self.add(name, handler, once=once, duplicate=duplicate)
            return handler

        return register

    def add(
        self,
        name: str,
        handler: Handler,
        *,
        once: KeyLedger | None = None,
        duplicate: Duplicate = "replay",
    ) -> None:
        tool = self.defs.get(name)
        if tool is None:
            raise UsageError(
                f"tool set {self.defs.name!r} declares no tool {name!r}; "
                f"declared: {', '.join(self.defs.names())}"
            )
        if name in self._entries:
            raise UsageError(f"tool {name!r} already has a handler")
        if duplicate not in ("replay", "refuse"):
            raise UsageError(f"duplicate must be 'replay' or 'refuse', not {duplicate!r}")
        self._entries[name] = _Entry(
            tool=tool,
            handler=handler,
            inputs=compile_schema(tool.input_schema),
            outputs=None if tool.output_schema is None else compile_schema(tool.output_schema),
            once=once,
            duplicate=duplicate,
        )

    def check_complete(self) -> None:
        """Refuse to serve a tool set with a declared tool that has no handler."""
        if missing := [n for n in self.defs.names() if n not in self._entries]:
            raise UsageError(
                f"tool set {self.defs.name!r}: no handler for {', '.join(missing)}; "
                "register one with @host.tool(NAME)"
            )

    # -- serving ---------------------------------------------------------------------------

    def run(self) -> None:
        """Serve over this process's stdin/stdout until stdin closes (``python -m ...``)."""
        try:
            require_mcp()
        except UsageError as exc:  # a server has no caller to raise to: one line, exit 2
            print(f"{self.defs.name}: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        import anyio

        self.check_complete()
        anyio.run(self.serve_stdio)

    async def serve_stdio(self) -> None:
        from mcp.server.lowlevel import Server
        from mcp.server.stdio import stdio_server

        self.check_complete()
        server: Server[Any] = Server(
            self.defs.name,
            version=self.version,
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
        )
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    async def _on_list_tools(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        from mcp import types

        return types.ListToolsResult(tools=[_advertise(t) for t in self.defs])

    async def _on_call_tool(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        from mcp import types

        meta: dict[str, JSON] = dict(params.meta or {})
        raw_key = meta.get(IDEMPOTENCY_META_KEY)
        call = CallInfo(
            tool=params.name, key=raw_key if isinstance(raw_key, str) else None, meta=meta
        )
        try:
            result = await self.invoke(params.name, dict(params.arguments or {}), call)
        except _Refused as refused:
            return _error_result(refused.kind, refused.message)
        text = json.dumps(result, separators=(",", ":"))
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=result
        )

    async def invoke(self, name: str, arguments: dict[str, JSON], call: CallInfo) -> JSON:
        """Validate, run (once per key if asked), validate the result; ``_Refused`` on error."""
        entry = self._entries.get(name)
        if entry is None:
            raise _Refused("unknown_tool", f"no tool {name!r} in tool set {self.defs.name!r}")
        if (err := entry.inputs.error(arguments)) is not None:
            raise _Refused("invalid_arguments", f"{name}: arguments break inputSchema: {err}")

        async def produce() -> JSON:
            result = await _run_handler(entry.handler, arguments, call)
            problem = json_problem(result)
            if problem is None and entry.outputs is not None:
                problem = entry.outputs.error(result)
            if problem is not None:
                print(f"{name}: output refused: {problem}", file=sys.stderr, flush=True)
                raise _Refused(
                    "invalid_output", f"{name}: the handler's output breaks outputSchema: {problem}"
                )
            return result

        if entry.once is None:
            return await produce()
        try:
            return await entry.once.once(call.key, name, produce, duplicate=entry.duplicate)
        except OSError as exc:  # the ledger could not record the result (a full disk)
            kind = "handler_transient" if transient_exception(exc) else "handler_error"
            raise _Refused(kind, f"{name}: its key ledger failed: {exc}") from exc


async def _run_handler(handler: Handler, arguments: dict[str, JSON], call: CallInfo) -> JSON:
    try:
        if inspect.iscoroutinefunction(handler):
            return await handler(arguments, call)
        import anyio.to_thread

        value = await anyio.to_thread.run_sync(handler, arguments, call, abandon_on_cancel=True)
        if inspect.isawaitable(value):
            return await value
        return value
    except _Refused:
        raise
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        kind = "handler_transient" if transient_exception(exc) else "handler_error"
        raise _Refused(kind, f"{call.tool}: {type(exc).__name__}: {exc}") from exc


TRANSIENT_ERRNOS = frozenset(
    {
        errno.ENOSPC,  # no space left on the device
        errno.EDQUOT,  # over quota
        errno.EIO,  # I/O error
        errno.EAGAIN,  # try again
        errno.EBUSY,
        errno.EINTR,
        errno.ENOMEM,
        errno.EMFILE,  # out of file descriptors
        errno.ENFILE,
        errno.ETIMEDOUT,
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.EPIPE,
    }
)
"""``OSError`` numbers that say "not now" rather than "never": a handler that raises one
is reported as ``handler_transient``."""


def transient_exception(exc: BaseException) -> bool:
    """Whether a handler's exception is a fault that may pass (retry) or an answer (final)."""
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    return isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS


def _advertise(tool: ToolDef) -> mcp_types.Tool:
    from mcp import types

    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=dict(tool.input_schema),
        output_schema=None if tool.output_schema is None else dict(tool.output_schema),
        annotations=types.ToolAnnotations(
            read_only_hint=tool.effect == "read_only",
            idempotent_hint=tool.effect != "irreversible",
            destructive_hint=tool.effect == "irreversible",
        ),
        _meta={EFFECT_META_KEY: tool.effect}
        | ({} if tool.retry is None else {RETRY_META_KEY: tool.retry.to_json()})
        | ({DEDUPES_META_KEY: True} if tool.dedupes_by_key else {}),
    )


def _error_result(kind: str, message: str) -> mcp_types.CallToolResult:
    from mcp import types

    return types.CallToolResult(
        content=[types.TextContent(text=message)],
        is_error=True,
        _meta={ERROR_META_KEY: {"kind": kind}},
    )
