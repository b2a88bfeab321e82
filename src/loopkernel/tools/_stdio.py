"""A stdio MCP server's process and pipes, spawned before the ``mcp`` SDK is imported.

The SDK's ``stdio_client`` imports the SDK (about a second of Python here), then spawns
the server, which imports the SDK again on its side: the two imports run one after the
other. ``spawn`` starts the process with nothing but ``asyncio``, so the server's start-up
runs on another core while this process imports the SDK; ``streams`` then bridges the
pipes to the in-memory streams the SDK's ``ClientSession`` reads and writes, one
newline-delimited JSON-RPC message per line, as the SDK's own transport does.

``stop`` follows the MCP shutdown sequence (close stdin, wait, SIGTERM the process group,
SIGKILL it); ``kill_now`` is the synchronous last resort a cancelled close falls back on,
so that no exit path leaves a server running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

__all__ = ["DEFAULT_INHERITED_ENV", "Pipes", "child_env", "kill_now", "spawn", "stop", "streams"]

DEFAULT_INHERITED_ENV = (
    (
        "APPDATA",
        "HOMEDRIVE",
        "HOMEPATH",
        "LOCALAPPDATA",
        "PATH",
        "PATHEXT",
        "PROCESSOR_ARCHITECTURE",
        "SYSTEMDRIVE",
        "SYSTEMROOT",
        "TEMP",
        "USERNAME",
        "USERPROFILE",
    )
    if sys.platform == "win32"
    else ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
)
"""What a stdio server inherits of this process's environment: the variables the SDK's
``stdio_client`` passes (nothing else, so no secret leaks into a third party's server)."""

_CHUNK = 1 << 16
_POLL = 0.01


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The small inherited environment, then ``extra`` over it."""
    env = {
        k: v
        for k in DEFAULT_INHERITED_ENV
        if (v := os.environ.get(k)) is not None and not v.startswith("()")
    }
    return env | dict(extra)


async def spawn(
    command: Sequence[str], *, env: Mapping[str, str], cwd: str | None, errlog: IO[str]
) -> asyncio.subprocess.Process:
    """Start the server in a session (process group) of its own, pipes on stdin/stdout.

    ``OSError`` (``FileNotFoundError`` for a missing command) when it cannot start.
    """
    return await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=errlog,
        env=child_env(env),
        cwd=cwd,
        start_new_session=sys.platform != "win32",
    )


class Pipes:
    """What the pipe tasks of ``streams`` learned."""

    def __init__(self) -> None:
        self.eof = False
        """The server's stdout ended, or a line on it was not JSON-RPC."""
        self.garbage: Exception | None = None
        """The parse error of the first stdout line that was not JSON-RPC."""


@contextlib.asynccontextmanager
async def streams(
    proc: asyncio.subprocess.Process,
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
        Pipes,
    ]
]:
    """``(read, write, pipes)`` for a ``ClientSession`` over ``proc``'s pipes.

    The first stdout line that is not a JSON-RPC message ends the read stream, so every
    waiting request fails at once; its parse error is kept in ``pipes.garbage``. Leaving
    the block stops the pipe tasks; it does not stop the process (``stop`` does).
    """
    import anyio
    import mcp_types
    from mcp.shared.message import SessionMessage

    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    incoming, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
    pipes = Pipes()

    async def reader() -> None:
        try:
            await read_lines()
        finally:
            pipes.eof = True

    async def read_lines() -> None:
        async with incoming:
            buffer = b""
            while chunk := await stdout.read(_CHUNK):
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    try:
                        message = mcp_types.jsonrpc_message_adapter.validate_json(
                            line.decode("utf-8", "replace"), by_name=False
                        )
                    except ValueError as exc:
                        pipes.garbage = exc
                        return
                    try:
                        await incoming.send(SessionMessage(message))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return

    async def writer() -> None:
        try:
            async with outgoing:
                async for item in outgoing:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode() + b"\n")
                    await stdin.drain()
        except (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            # The server may still be alive: end the read side too, so a request does
            # not wait for an answer that cannot come.
            await incoming.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read, write, pipes
        finally:
            tg.cancel_scope.cancel()
            read.close()
            write.close()


async def stop(proc: asyncio.subprocess.Process, *, grace: float = 2.0) -> None:
    """Close the server's stdin and give it ``grace`` seconds to exit; then SIGTERM its
    process group, and SIGKILL it 2 s later. Whatever interrupts this kills at once."""
    async with asyncio.TaskGroup() as group:  # its exit awaits the drain's end
        drain = group.create_task(_drain(proc))  # a server blocked writing cannot exit
        try:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            if grace > 0 and await _exited(proc, grace):
                return
            _signal(proc, signal.SIGTERM)
            if await _exited(proc, 2.0):
                return
            _signal(proc, signal.SIGKILL)
            await _exited(proc, 2.0)
        finally:
            kill_now(proc)
            drain.cancel()


async def _drain(proc: asyncio.subprocess.Process) -> None:
    """Read and drop what the server still writes on stdout, until it closes it."""
    if proc.stdout is not None:
        with contextlib.suppress(OSError, ValueError):
            while await proc.stdout.read(_CHUNK):
                pass


def kill_now(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the server's process group unless the server has exited (no await)."""
    if proc.returncode is None:
        _signal(proc, signal.SIGKILL)


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if sys.platform == "win32":  # pragma: no cover
            proc.kill()
        else:
            os.killpg(proc.pid, sig)  # its own session: the pid is the group id


async def _exited(proc: asyncio.subprocess.Process, seconds: float) -> bool:
    """Whether the process exited within ``seconds`` (polled: ``wait()`` also waits for
    the pipes to close, which a grandchild holding them open would never do)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while proc.returncode is None:
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL)
    return True
