"""Run ``loopkernel`` in a subprocess, optionally SIGKILLed at a named crash point.

killed = run_cli(["run", "myapp:app", "--run-id", "r"], db=db, crash_at="patch_committed:2")
assert was_killed(killed)
resumed = run_cli(["resume", "r"], db=db)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["run_cli", "was_killed"]


def run_cli(
    args: Sequence[str],
    *,
    db: str | os.PathLike[str],
    crash_at: str | None = None,
    trace: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m loopkernel --db DB ARGS`` in a new process, with a crash point and trace
    (in this process's working directory)."""
    full_env = {k: v for k, v in os.environ.items() if k != "LOOPKERNEL_CRASH_AT"}
    full_env.update(env or {})
    if crash_at:
        full_env["LOOPKERNEL_CRASH_AT"] = crash_at
    if trace is not None:
        full_env["LOOPKERNEL_TRACE"] = str(Path(trace))
    return subprocess.run(
        [sys.executable, "-m", "loopkernel", "--db", str(db), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def was_killed(proc: subprocess.CompletedProcess[str]) -> bool:
    """Whether the process died of SIGKILL (a crash point fired)."""
    return proc.returncode == -signal.SIGKILL
