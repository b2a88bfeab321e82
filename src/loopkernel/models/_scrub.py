"""Keep provider keys out of the runtime: find and remove ``*_API_KEY``-style variables.

The runtime (``loopkernel run``, ``resume``, ``worker`` ... every command but ``gateway``)
never needs a provider key: models are reached through the gateway with a gateway token.
A key left in its environment would be inherited by what it spawns and readable in
``/proc/PID/environ``. Removing a variable from ``os.environ`` does not clean
``/proc/PID/environ`` (the kernel shows the block the process was started with), so the
CLI re-executes itself once with the variables removed (``reexec_without_credentials``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

__all__ = ["CREDENTIAL_SUFFIXES", "credential_names", "reexec_without_credentials", "scrub"]

CREDENTIAL_SUFFIXES = ("_API_KEY", "_API_KEYS", "_APIKEY", "_SECRET_KEY", "_SECRET_ACCESS_KEY")
"""A variable whose upper-cased name ends with one of these (or is ``API_KEY``) is a
credential the runtime must not hold (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
``AWS_SECRET_ACCESS_KEY`` ...). ``LOOPKERNEL_GATEWAY_TOKEN`` is the runtime's own and stays."""


def credential_names(env: Mapping[str, str]) -> list[str]:
    """The names in ``env`` that look like provider credentials, sorted."""
    return sorted(
        name
        for name in env
        if name.upper() == "API_KEY" or name.upper().endswith(CREDENTIAL_SUFFIXES)
    )


def _warning(names: list[str]) -> str:
    return (
        f"loopkernel: removed {', '.join(names)} from the runtime's environment: the runtime "
        "never holds provider keys (give them to `loopkernel gateway`; see docs/models.md)"
    )


def scrub(env: MutableMapping[str, str] | None = None, *, warn: bool = True) -> list[str]:
    """Remove credential variables from ``env`` (default ``os.environ``) in place; print
    one warning line on stderr naming them (never their values). The names removed."""
    env = os.environ if env is None else env
    names = credential_names(env)
    for name in names:
        del env[name]
    if names and warn:
        print(_warning(names), file=sys.stderr, flush=True)
    return names


def reexec_without_credentials() -> None:
    """If this process holds credential variables, warn once and replace the process (same
    PID, same command line) with one whose environment lacks them. Returns only when there
    was nothing to remove."""
    names = credential_names(os.environ)
    if not names:
        return None
    print(_warning(names), file=sys.stderr, flush=True)
    env = {k: v for k, v in os.environ.items() if k not in names}
    argv = list(getattr(sys, "orig_argv", [])) or [sys.executable, *sys.argv]
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], env)
