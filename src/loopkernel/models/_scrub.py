"""Keep provider keys out of the runtime: find and remove credential variables.

Three rules name a credential (``credential_names``): the providers' documented variables
(``PROVIDER_VARIABLES``: ``ANTHROPIC_AUTH_TOKEN``, ``HF_TOKEN``, ``AWS_SESSION_TOKEN`` ...),
a suffix (``CREDENTIAL_SUFFIXES``: ``*_API_KEY``, ``*_AUTH_TOKEN``, ``*_SECRET_KEY`` ...),
and a provider prefix with KEY, TOKEN, SECRET or PASSWORD in the name
(``PROVIDER_PREFIXES``: ``OPENAI_KEY``, ``MISTRAL_TOKEN``; ``OPENAI_BASE_URL`` stays).
``LOOPKERNEL_GATEWAY_TOKEN`` is the runtime's own and always stays.

The runtime (``loopkernel run``, ``resume``, ``worker`` ... every command but ``gateway``)
never needs a provider key: models are reached through the gateway with a gateway token.
A key left in its environment would be inherited by what it spawns and readable in
``/proc/PID/environ``. Removing a variable from ``os.environ`` does not clean
``/proc/PID/environ`` (the kernel shows the block the process was started with), so the
CLI re-executes itself once with the variables removed (``reexec_without_credentials``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import NoReturn

__all__ = [
    "CREDENTIAL_SUFFIXES",
    "PROVIDER_PREFIXES",
    "PROVIDER_VARIABLES",
    "SecretSafeParser",
    "credential_names",
    "looks_secret",
    "reexec_without_credentials",
    "scrub",
]

CREDENTIAL_SUFFIXES = (
    "_API_KEY",
    "_API_KEYS",
    "_APIKEY",
    "_SECRET_KEY",
    "_SECRET_ACCESS_KEY",
    "_AUTH_TOKEN",
    "_API_TOKEN",
    "_ACCESS_TOKEN",
    "_SESSION_TOKEN",
    "_CLIENT_SECRET",
)
"""A variable whose upper-cased name ends with one of these (or is ``API_KEY``) is a
credential the runtime must not hold (``OPENAI_API_KEY``, ``ANTHROPIC_AUTH_TOKEN``,
``AWS_SECRET_ACCESS_KEY``, ``REPLICATE_API_TOKEN`` ...)."""

PROVIDER_VARIABLES = frozenset(
    {
        "OPENAI_API_KEY",
        "OPENAI_ADMIN_KEY",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_AD_TOKEN",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HUGGINGFACEHUB_API_TOKEN",
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "MISTRAL_API_KEY",
        "COHERE_API_KEY",
        "CO_API_KEY",
        "GROQ_API_KEY",
        "TOGETHER_API_KEY",
        "FIREWORKS_API_KEY",
        "DEEPSEEK_API_KEY",
        "XAI_API_KEY",
        "OPENROUTER_API_KEY",
        "PERPLEXITY_API_KEY",
        "VOYAGE_API_KEY",
        "REPLICATE_API_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_BEARER_TOKEN_BEDROCK",
        "LANGSMITH_API_KEY",
        "LANGCHAIN_API_KEY",
    }
)
"""Variables the providers' SDKs and CLIs document for their credentials."""

PROVIDER_PREFIXES = (
    "OPENAI_",
    "AZURE_OPENAI_",
    "ANTHROPIC_",
    "CLAUDE_",
    "HF_",
    "HUGGINGFACE",
    "HUGGING_FACE_",
    "GEMINI_",
    "GOOGLE_AI_",
    "MISTRAL_",
    "COHERE_",
    "GROQ_",
    "TOGETHER_",
    "FIREWORKS_",
    "DEEPSEEK_",
    "XAI_",
    "OPENROUTER_",
    "PERPLEXITY_",
    "VOYAGE_",
    "REPLICATE_",
)
"""A variable of a model provider (by its prefix) whose name says KEY, TOKEN, SECRET or
PASSWORD is a credential, whatever its exact spelling (``OPENAI_KEY``, ``HF_API_TOKEN``)."""

_SECRET_WORD = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL")
_OWN = frozenset({"LOOPKERNEL_GATEWAY_TOKEN"})


def _is_credential(name: str) -> bool:
    upper = name.upper()
    if upper in _OWN:
        return False
    if upper == "API_KEY" or upper in PROVIDER_VARIABLES or upper.endswith(CREDENTIAL_SUFFIXES):
        return True
    return upper.startswith(PROVIDER_PREFIXES) and _SECRET_WORD.search(upper) is not None


def credential_names(env: Mapping[str, str]) -> list[str]:
    """The names in ``env`` that look like provider credentials, sorted."""
    return sorted(name for name in env if _is_credential(name))


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


_LONG_TOKEN = re.compile(r"[A-Za-z0-9_\-+=.~]{24,}")
_CANDIDATE = re.compile(r"[A-Za-z0-9_\-+=.~]{20,}")


def looks_secret(value: str) -> bool:
    """Whether a value given on a command line looks like a credential: a known key shape
    (``sk-...``, ``hf_...``, a JWT, an AWS key id ...) or one long token of letters and
    digits (24 characters or more, both kinds, no ``/``: not a path)."""
    from loopkernel.evidence import redact_text

    if redact_text(value) != value or re.fullmatch(r"hf_[A-Za-z0-9]{20,}", value):
        return True
    return (
        _LONG_TOKEN.fullmatch(value) is not None
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
    )


def quiet(message: str) -> str:
    """``message`` with every part that looks like a secret replaced by a note."""
    from loopkernel.evidence import redact_text

    hidden = "[a value that looks like a secret]"
    message = _CANDIDATE.sub(lambda m: hidden if looks_secret(m.group(0)) else m.group(0), message)
    return redact_text(message)


class SecretSafeParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose error messages never echo a rejected value that looks
    like a secret (a key given to the wrong flag, or as a stray argument), and are one line
    with exit 2, as the ``loopkernel`` command's own (``cli._door.Parser``): the usage
    block is for ``--help``."""

    def error(self, message: str) -> NoReturn:
        line = " | ".join(part.strip() for part in message.splitlines() if part.strip())
        self.exit(2, f"{self.prog}: error: {quiet(line)} (see {self.prog} --help)\n")
