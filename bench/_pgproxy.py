"""A TCP forwarder to PostgreSQL that a test or a bench controls: the server, seen through
it, can go away (``stop``), be away for a while (``down``/``up``), or drop one connection
just after it sent a ``COMMIT`` (``cut_at_commit``), without touching the shared server.

``Proxy(host, port)`` listens on 127.0.0.1 (``port``: its own); ``url(base)`` is ``base``
through it."""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

__all__ = ["Proxy"]


class Proxy:
    """Forwards every connection to ``host:port``; see the module docstring."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.stopped = False
        self.away = False
        self.commit_armed = False
        self.commits_cut = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @classmethod
    def to(cls, url: str) -> Proxy:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 5432)

    def url(self, base: str) -> str:
        """``base`` (a ``postgresql://`` URL) through this proxy."""
        parts = urlsplit(base)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            if self.stopped or self.away:
                down.close()
                continue
            try:
                up = socket.create_connection(self.upstream)
            except OSError:
                down.close()
                continue
            with self.lock:
                self.sockets += [down, up]
            pair = _Pair(self, down, up)
            threading.Thread(target=pair.to_server, daemon=True).start()
            threading.Thread(target=pair.to_client, daemon=True).start()

    def _close_all(self) -> None:
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def down(self) -> None:
        """The server is away: every connection through the proxy is closed and new ones
        are closed as they come, until ``up``."""
        self.away = True
        self._close_all()

    def up(self) -> None:
        self.away = False

    def cut_at_commit(self) -> None:
        """The next connection that sends a ``COMMIT`` has it delivered to the server and
        is then cut from the client's side: the server commits, the client never hears."""
        self.commit_armed = True

    def stop(self) -> None:
        """Gone for good: the port is closed and every connection through it."""
        self.stopped = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.listener.close()
        self._close_all()


class _Pair:
    """One client connection and its server connection, pumped both ways."""

    def __init__(self, proxy: Proxy, down: socket.socket, up: socket.socket) -> None:
        self.proxy = proxy
        self.down = down
        self.up = up
        self.cut = False

    def to_server(self) -> None:
        try:
            while data := self.down.recv(65536):
                if self.proxy.commit_armed and b"COMMIT" in data:
                    self.proxy.commit_armed = False
                    self.cut = True  # before it goes: its reply must not reach the client
                    self.up.sendall(data)
                    self.proxy.commits_cut += 1
                    _close(self.down)
                    # the server reads the COMMIT before it sees the connection go
                    threading.Timer(1.0, _close, (self.up,)).start()
                    return
                self.up.sendall(data)
        except OSError:
            pass
        self._end()

    def to_client(self) -> None:
        try:
            while data := self.up.recv(65536):
                if self.cut:
                    continue
                self.down.sendall(data)
        except OSError:
            pass
        if not self.cut:
            self._end()

    def _end(self) -> None:
        for s in (self.down, self.up):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
