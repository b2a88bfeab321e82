"""The gateway's configuration: providers, prices, limits, where it listens, its ledger.

Built from the command line, or from a TOML file (``--config``) that may name several
providers::

    listen = "127.0.0.1:8765"            # or "unix:/run/loopkernel/gateway.sock"
    ledger = "gateway-ledger.db"

    [limits]                              # omitted = unlimited
    run_usd = 0.50
    day_usd = 20.0
    run_tokens = 200000
    run_model_seconds = 120               # a run's calls wait at most this long in all

    [[providers]]                         # the first one is the default
    name = "gpt"                          # what a call's ``model`` field may name
    kind = "openai"                       # openai | anthropic | local
    base_url = "https://api.openai.com/v1"
    model = "gpt-4o-mini"
    key_env = "OPENAI_API_KEY"            # or key_file = "/etc/loopkernel/openai.key" (0600)
    price_in = 0.15                       # USD per million input tokens
    price_out = 0.60                      # USD per million output tokens

Prices are data: nothing in the code knows what a model costs.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from loopkernel.errors import UsageError
from loopkernel.models._http import Address, parse_address

__all__ = [
    "GatewayConfig",
    "Limits",
    "ProviderConfig",
    "ProviderKind",
    "load_config",
    "read_key_file",
]

ProviderKind = Literal["openai", "anthropic", "azure", "gemini", "ollama", "local"]
_KINDS: frozenset[str] = frozenset({"openai", "anthropic", "azure", "gemini", "ollama", "local"})
_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "azure": "AZURE_OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "ollama": "OLLAMA_API_KEY",
}
LOCAL_MODELS = ("smollm2",)


def _number(where: str, value: Any, *, integer: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{where} must be a number, not {value!r}")
    if integer and not isinstance(value, int):
        raise UsageError(f"{where} must be a whole number, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{where} must be finite and >= 0, not {value!r}")
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """What the gateway lets calls spend. ``None`` means unlimited."""

    run_usd: float | None = None
    """USD one run's calls may cost (reservations of calls in flight count)."""
    day_usd: float | None = None
    """USD all calls of a UTC day may cost."""
    run_tokens: int | None = None
    """Tokens (input + output) one run's calls may use."""
    run_model_seconds: float | None = None
    """Seconds one run's calls may wait on providers in all (since the gateway started);
    a call's deadline is cut to what is left."""

    def __post_init__(self) -> None:
        _number("limits.run_usd", self.run_usd)
        _number("limits.day_usd", self.day_usd)
        _number("limits.run_tokens", self.run_tokens, integer=True)
        _number("limits.run_model_seconds", self.run_model_seconds)


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderConfig:
    """One upstream model."""

    name: str
    """What a request's ``model`` field names it by."""
    kind: ProviderKind
    """``openai`` (and every OpenAI-compatible server), ``anthropic``, ``azure`` (Azure
    OpenAI: ``base_url`` the resource's endpoint, ``model`` the deployment), ``gemini``,
    ``ollama`` (its native API), or ``local``."""
    model: str
    """The provider's model name (``local``: the bundled model, ``smollm2``)."""
    base_url: str | None = None
    """The API's base URL (``None``: the SDK's default)."""
    key_env: str | None = None
    """The gateway's environment variable that holds the key."""
    key_file: str | None = None
    """A file (mode 0600) that holds the key; wins over ``key_env``."""
    price_in: float = 0.0
    """USD per million input tokens."""
    price_out: float = 0.0
    """USD per million output tokens."""
    api_version: str | None = None
    """Azure OpenAI's ``api-version`` (default ``2024-10-21``)."""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise UsageError(
                f"provider {self.name!r}: kind must be one of "
                f"{', '.join(sorted(_KINDS))}, not {self.kind!r}"
            )
        if self.kind == "azure" and not self.base_url:
            raise UsageError(
                f"provider {self.name!r}: azure needs base_url, the resource's endpoint "
                "(https://NAME.openai.azure.com)"
            )
        if not self.name or not self.model:
            raise UsageError("a provider needs a name and a model")
        if self.kind == "local" and self.model not in LOCAL_MODELS:
            raise UsageError(
                f"no bundled local model {self.model!r} (known: {', '.join(LOCAL_MODELS)})"
            )
        _number(f"provider {self.name!r}: price_in", self.price_in)
        _number(f"provider {self.name!r}: price_out", self.price_out)

    @property
    def is_loopback(self) -> bool:
        """Whether the provider is on this machine (a local server may need no key)."""
        if self.kind == "local":
            return True
        if self.base_url is None:
            return False
        host = urlsplit(self.base_url).hostname or ""
        return host in ("127.0.0.1", "localhost", "::1")

    def api_key(self, env: Mapping[str, str]) -> str | None:
        """The key from ``key_file`` or the gateway's own environment; None when there is
        none (allowed only for a loopback server)."""
        if self.kind == "local":
            return None
        if self.key_file is not None:
            return read_key_file(self.key_file)
        name = self.key_env or _KEY_ENV[self.kind]
        key = env.get(name, "").strip()
        if key:
            return key
        if self.is_loopback or self.kind == "ollama":  # Ollama asks for no key of its own
            return None
        raise UsageError(
            f"provider {self.name!r} needs an API key: set {name} in the gateway's "
            "environment, or give --key-file (mode 0600)"
        )

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.price_in + output_tokens * self.price_out) / 1_000_000


def read_key_file(path: str) -> str:
    """The key in ``path``; refused unless only its owner can read it (mode 0600 or 0400)."""
    try:
        info = os.stat(path)
    except OSError as err:
        raise UsageError(f"cannot read key file {path}: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"key file {path} is not a regular file")
    if info.st_mode & 0o077:
        raise UsageError(
            f"key file {path} has mode {stat.S_IMODE(info.st_mode):04o}; "
            f"it must be readable by its owner only: chmod 600 {path}"
        )
    key = Path(path).read_text().strip()
    if not key:
        raise UsageError(f"key file {path} is empty")
    return key


@dataclass(frozen=True, kw_only=True, slots=True)
class GatewayConfig:
    """Everything a gateway process needs."""

    providers: tuple[ProviderConfig, ...]
    """Upstream models; the first is the default."""
    listen: Address = field(default_factory=lambda: Address(host="127.0.0.1", port=8765))
    """``127.0.0.1:PORT`` (0 picks a free port) or a Unix socket (created 0600)."""
    ledger: str = "gateway-ledger.db"
    """The SQLite ledger of calls (created 0600)."""
    limits: Limits = field(default_factory=Limits)
    retries: int = 4
    """Retries of a 429 / 5xx / connection error before ``ModelUnavailable``."""
    backoff: float = 0.5
    """The first retry's wait in seconds; doubled each time (with jitter), capped at 8 s.
    A ``Retry-After`` from the provider wins when it is longer (still within the deadline)."""
    max_timeout: float = 300.0
    """The longest deadline a call may ask for."""
    breaker_after: int = 3
    """Timeouts or outages in a row after which a run's calls are refused at once
    (``ModelUnavailable``, kind ``breaker_open``); 0: never."""
    breaker_seconds: float = 600.0
    """How long the breaker stays open; then one call may try again."""

    def __post_init__(self) -> None:
        if not self.providers:
            raise UsageError("the gateway needs at least one provider")
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise UsageError(f"provider names must be unique: {names}")
        if self.listen.host is not None and self.listen.host not in (
            "127.0.0.1",
            "::1",
            "localhost",
        ):
            raise UsageError(
                f"the gateway listens on loopback or a Unix socket only, not {self.listen.host}"
            )
        if self.retries < 0 or self.backoff < 0:
            raise UsageError("retries and backoff must be >= 0")
        if self.breaker_after < 0 or self.breaker_seconds < 0:
            raise UsageError("breaker_after and breaker_seconds must be >= 0")
        limits = self.limits
        if limits.run_usd is not None or limits.day_usd is not None:
            free = [
                p.name
                for p in self.providers
                if p.kind != "local" and not (p.price_in or p.price_out)
            ]
            if free:
                raise UsageError(
                    f"USD limits are set but provider(s) {', '.join(free)} have no price: "
                    "give --price-in/--price-out (USD per million tokens) or price_in/price_out"
                )

    def provider(self, name: str | None) -> ProviderConfig:
        if name is None:
            return self.providers[0]
        for p in self.providers:
            if p.name == name or p.model == name:
                return p
        known = ", ".join(p.name for p in self.providers)
        raise UsageError(f"the gateway has no model {name!r} (known: {known})")


def load_config(path: str, **overrides: Any) -> GatewayConfig:
    """Read a TOML config file; keyword ``overrides`` (from flags) win over its values."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as err:
        raise UsageError(f"cannot read gateway config {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"gateway config {path} is not valid TOML: {err}") from None
    known = {
        "listen",
        "ledger",
        "limits",
        "providers",
        "retries",
        "backoff",
        "max_timeout",
        "breaker_after",
        "breaker_seconds",
    }
    unknown = set(data) - known
    if unknown:
        raise UsageError(f"gateway config {path}: unknown key(s) {', '.join(sorted(unknown))}")
    providers = []
    for i, item in enumerate(data.get("providers", [])):
        if not isinstance(item, dict):
            raise UsageError(f"gateway config {path}: providers[{i}] must be a table")
        fields = {
            "name",
            "kind",
            "model",
            "base_url",
            "key_env",
            "key_file",
            "price_in",
            "price_out",
            "api_version",
        }
        bad = set(item) - fields
        if bad:
            raise UsageError(
                f"gateway config {path}: providers[{i}] has unknown key(s) {', '.join(sorted(bad))}"
            )
        item = dict(item)
        item.setdefault("name", item.get("model", f"p{i}"))
        providers.append(ProviderConfig(**item))
    limits = data.get("limits", {})
    limit_keys = {"run_usd", "day_usd", "run_tokens", "run_model_seconds"}
    if not isinstance(limits, dict) or set(limits) - limit_keys:
        raise UsageError(
            f"gateway config {path}: [limits] takes run_usd, day_usd, run_tokens, run_model_seconds"
        )
    values: dict[str, Any] = {
        "providers": tuple(overrides.pop("providers", None) or providers),
        "limits": Limits(**{**limits, **(overrides.pop("limits", None) or {})}),
    }
    if "listen" in data:
        values["listen"] = parse_address(str(data["listen"]))
    for key in ("ledger", "retries", "backoff", "max_timeout", "breaker_after", "breaker_seconds"):
        if key in data:
            values[key] = data[key]
    values.update({k: v for k, v in overrides.items() if v is not None})
    return GatewayConfig(**values)
