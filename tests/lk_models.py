"""Helpers for the model tests: an in-process gateway in front of a scripted provider."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from loopkernel.gateway import Gateway, GatewayConfig, Limits, ProviderConfig
from loopkernel.models import Message, ModelClient
from loopkernel.models._http import Address
from loopkernel.testing import ScriptedProvider

TOKEN = "test-gateway-token-0123456789"
PROVIDER_KEY = "sk-test-provider-key-4f1c9e"


def ask(text: str = "hello?") -> list[Message]:
    return [Message(role="user", content=text)]


@contextlib.asynccontextmanager
async def gateway_for(
    provider: ScriptedProvider,
    tmp_path: Path,
    *,
    kind: str = "openai",
    limits: Limits | None = None,
    price_in: float = 0.0,
    price_out: float = 0.0,
    listen: Address | None = None,
    ledger: Path | None = None,
    **options: Any,
) -> AsyncIterator[tuple[Gateway, ModelClient]]:
    """A ``Gateway`` (in this process, on a free port) in front of ``provider``."""
    url = {"anthropic": provider.anthropic_url, "openai": provider.base_url}.get(
        kind, provider.root_url
    )
    config = GatewayConfig(
        providers=(
            ProviderConfig(
                name="scripted",
                kind=kind,  # type: ignore[arg-type]
                model="scripted-model",
                base_url=url,
                price_in=price_in,
                price_out=price_out,
            ),
        ),
        listen=listen or Address(host="127.0.0.1", port=0),
        ledger=str(ledger or tmp_path / "ledger.db"),
        limits=limits or Limits(),
        backoff=0.0,
        **options,
    )
    env = {
        name: PROVIDER_KEY
        for name in (
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "AZURE_OPENAI_API_KEY",
            "GEMINI_API_KEY",
        )
    }
    log = (tmp_path / "gateway.log").open("a")
    gateway = Gateway(config, token=TOKEN, env=env, log=log)
    address = await gateway.start()
    try:
        yield gateway, ModelClient(address, TOKEN)
    finally:
        await gateway.close()
        gateway.log.close()
