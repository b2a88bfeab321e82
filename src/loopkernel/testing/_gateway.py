"""Start a real gateway process for a test: ``GatewayProcess``.

::

    with GatewayProcess(["--provider", "openai", "--base-url", p.base_url, "--model", "m"],
                        env={"OPENAI_API_KEY": key}, ledger=tmp / "ledger.db") as gw:
        env = gw.runtime_env()          # LOOPKERNEL_GATEWAY and LOOPKERNEL_GATEWAY_TOKEN
        ...
    gw.log                              # what the gateway wrote on stderr

It listens on a free loopback port (or ``listen="unix:PATH"``) and is ready when it has
printed its ``listening on`` line; no sleeping.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from loopkernel.models._scrub import credential_names

__all__ = ["GatewayProcess"]

_READY = "loopkernel gateway: listening on "


class GatewayProcess:
    """A ``python -m loopkernel.gateway`` subprocess with a fresh token."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        ledger: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        listen: str = "127.0.0.1:0",
        token: str | None = None,
        ready_timeout: float = 120.0,
    ) -> None:
        self.args = list(args)
        self.ledger = Path(ledger)
        self.listen = listen
        self.token = token or secrets.token_urlsafe(24)
        self.ready_timeout = ready_timeout
        credentials = set(credential_names(os.environ))
        base = {
            k: v
            for k, v in os.environ.items()
            if k not in credentials and not k.startswith("LOOPKERNEL_")
        }
        self.env = {**base, **(env or {}), "LOOPKERNEL_GATEWAY_TOKEN": self.token}
        self.address: str | None = None
        self.stdout_lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._log_path = self.ledger.with_suffix(".gateway.log")
        self._ready = threading.Event()

    def start(self) -> GatewayProcess:
        log = open(self._log_path, "w")  # noqa: SIM115 - closed when the process is stopped
        self._log_file = log
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loopkernel.gateway",
                *self.args,
                "--listen",
                self.listen,
                "--ledger",
                str(self.ledger),
            ],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(self.ready_timeout) or self.address is None:
            self.stop()
            raise RuntimeError(
                f"the gateway did not start (exit {self.proc.returncode}): {self.log[-2000:]}"
            )
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout_lines.append(line.rstrip("\n"))
            if line.startswith(_READY):
                self.address = line[len(_READY) :].split(" ", 1)[0]
                self._ready.set()
        self._ready.set()  # the process ended: start() reports it

    def runtime_env(self) -> dict[str, str]:
        """What a runtime process needs to reach this gateway (and nothing else)."""
        assert self.address is not None
        return {"LOOPKERNEL_GATEWAY": self.address, "LOOPKERNEL_GATEWAY_TOKEN": self.token}

    @property
    def log(self) -> str:
        """What the gateway wrote on stderr so far."""
        try:
            return self._log_path.read_text()
        except FileNotFoundError:
            return ""

    def stop(self) -> int | None:
        """SIGTERM, then wait; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log_file.close()
        return self.proc.returncode

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
