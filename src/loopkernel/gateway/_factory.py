"""Which provider serves a configuration: the factory over the provider modules (kept apart
so that ``_providers`` and ``_more_providers`` import one way only)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loopkernel.gateway._config import ProviderConfig
from loopkernel.gateway._more_providers import (
    AzureOpenAIProvider,
    GeminiProvider,
    OllamaProvider,
)
from loopkernel.gateway._providers import AnthropicProvider, OpenAIProvider, Provider


def make_provider(
    config: ProviderConfig, api_key: str | None, base_url: str | None = None
) -> Provider:
    """The provider for ``config`` (``base_url`` overrides it: the local model's server)."""
    if base_url is not None:
        config = replace(config, base_url=base_url)
    if config.kind == "anthropic":
        return AnthropicProvider(config, api_key)
    if config.kind in ("azure", "gemini", "ollama"):
        kinds: dict[str, Any] = {
            "azure": AzureOpenAIProvider,
            "gemini": GeminiProvider,
            "ollama": OllamaProvider,
        }
        made: Provider = kinds[config.kind](config, api_key)
        return made
    return OpenAIProvider(config, api_key)
