"""``loopkernel gateway`` (also ``python -m loopkernel.gateway``): start the model gateway.

::

    export LOOPKERNEL_GATEWAY_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')
    OPENAI_API_KEY=sk-... loopkernel gateway --provider openai \\
        --base-url https://api.openai.com/v1 --model gpt-4o-mini --listen 127.0.0.1:8765
    loopkernel gateway --local smollm2 --listen unix:/tmp/lk-gateway.sock
    loopkernel gateway --config gateway.toml

Prints one line ``loopkernel gateway: listening on ADDRESS ...`` on stdout once it serves;
one line per call on stderr. Exit codes: 0 stopped by SIGINT/SIGTERM, 2 bad configuration
(nothing written, no ledger created).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from loopkernel.errors import UsageError
from loopkernel.gateway._config import (
    _KEY_ENV,
    LOCAL_MODELS,
    GatewayConfig,
    Limits,
    ProviderConfig,
    load_config,
)
from loopkernel.gateway._harden import harden
from loopkernel.models._client import ENV_TOKEN
from loopkernel.models._http import parse_address
from loopkernel.models._scrub import SecretSafeParser

__all__ = ["build_parser", "config_from_args", "main"]

USAGE = 2


def _address(text: str) -> Any:
    try:
        return parse_address(text)
    except UsageError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value


def build_parser(prog: str = "loopkernel gateway") -> argparse.ArgumentParser:
    p = SecretSafeParser(
        prog=prog,
        description="The model gateway: the only process that holds provider keys. The "
        f"runtime reaches it with {ENV_TOKEN} (read from this process's environment too).",
    )
    src = p.add_argument_group("the model (or --config for several)")
    src.add_argument(
        "--provider",
        choices=("openai", "anthropic", "azure", "gemini", "ollama"),
        help="the provider's API",
    )
    src.add_argument("--base-url", help="the API's base URL (e.g. http://127.0.0.1:8080/v1)")
    src.add_argument("--model", help="the provider's model name")
    src.add_argument(
        "--local",
        choices=LOCAL_MODELS,
        help="serve the bundled offline model through a real llama.cpp server",
    )
    src.add_argument("--config", metavar="FILE", help="a TOML file: providers, prices, limits")
    src.add_argument(
        "--key-file",
        metavar="PATH",
        help="read the provider key from this file (must be mode 0600) instead of "
        "OPENAI_API_KEY / ANTHROPIC_API_KEY",
    )
    src.add_argument("--price-in", type=_non_negative, help="USD per million input tokens")
    src.add_argument("--price-out", type=_non_negative, help="USD per million output tokens")
    p.add_argument(
        "--listen",
        type=_address,
        default=None,
        metavar="HOST:PORT|unix:PATH",
        help="where to listen: loopback (port 0 picks one) or a Unix socket (created 0600); "
        "default 127.0.0.1:8765",
    )
    p.add_argument("--ledger", help="the ledger file (default gateway-ledger.db; created 0600)")
    lim = p.add_argument_group("limits (unlimited when not given)")
    lim.add_argument("--run-usd", type=_non_negative, help="USD per run")
    lim.add_argument("--day-usd", type=_non_negative, help="USD per UTC day")
    lim.add_argument("--run-tokens", type=_count, help="tokens (in + out) per run")
    lim.add_argument(
        "--run-model-seconds", type=_non_negative, help="seconds a run's calls may wait in all"
    )
    p.add_argument("--retries", type=_count, help="retries of 429/5xx per call (default 4)")
    p.add_argument("--backoff", type=_non_negative, help="first retry wait, seconds (default 0.5)")
    return p


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    limits = {
        k: v
        for k, v in (
            ("run_usd", args.run_usd),
            ("day_usd", args.day_usd),
            ("run_tokens", args.run_tokens),
            ("run_model_seconds", args.run_model_seconds),
        )
        if v is not None
    }
    providers: list[ProviderConfig] = []
    if args.local is not None:
        if args.provider or args.base_url:
            raise UsageError("--local serves the bundled model: leave out --provider/--base-url")
        providers.append(ProviderConfig(name=args.local, kind="local", model=args.local))
    elif args.provider is not None:
        if not args.model:
            raise UsageError(f"--provider {args.provider} needs --model NAME")
        providers.append(
            ProviderConfig(
                name=args.model,
                kind=args.provider,
                model=args.model,
                base_url=args.base_url,
                key_file=args.key_file,
                price_in=args.price_in or 0.0,
                price_out=args.price_out or 0.0,
            )
        )
    elif args.base_url or args.model or args.key_file:
        raise UsageError(
            "--base-url, --model and --key-file need --provider "
            "openai|anthropic|azure|gemini|ollama"
        )
    overrides: dict[str, Any] = {
        "listen": args.listen,
        "ledger": args.ledger,
        "retries": args.retries,
        "backoff": args.backoff,
    }
    if args.config is not None:
        return load_config(
            args.config, providers=tuple(providers) or None, limits=limits, **overrides
        )
    if not providers:
        raise UsageError(
            "name a model: --provider openai|anthropic --model NAME [--base-url URL], "
            "--local smollm2, or --config FILE"
        )
    values = {k: v for k, v in overrides.items() if v is not None}
    return GatewayConfig(providers=tuple(providers), limits=Limits(**limits), **values)


def key_variables(config: GatewayConfig) -> list[str]:
    """The environment variables the providers of ``config`` read their keys from."""
    return [
        p.key_env or _KEY_ENV[p.kind]
        for p in config.providers
        if p.kind != "local" and p.key_file is None
    ]


async def _serve(config: GatewayConfig, token: str) -> int:
    from loopkernel.gateway._server import Gateway

    gateway = Gateway(config, token=token, env=os.environ)
    # The keys are read: guard them from the rest of the machine (gateway/_harden.py).
    harden([*key_variables(config), ENV_TOKEN])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        address = await gateway.start()
        for name, local in gateway.locals.items():
            if local.stats is not None:
                print(
                    f"loopkernel gateway: local model {name} loaded in "
                    f"{local.stats.load_seconds:.2f} s from {local.stats.model_path}",
                    flush=True,
                )
        models = ", ".join(f"{p.kind} {p.model}" for p in config.providers)
        print(
            f"loopkernel gateway: listening on {address} ({models}); ledger {config.ledger}",
            flush=True,
        )
        async with asyncio.TaskGroup() as group:  # a server that fails ends the gateway
            serving = group.create_task(gateway.serve_forever(), name="gateway server")
            await stop.wait()
            serving.cancel()
    finally:
        await gateway.close()
    print("loopkernel gateway: stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "loopkernel gateway") -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        config = config_from_args(args)
        token = os.environ.get(ENV_TOKEN, "")
        return asyncio.run(_serve(config, token))
    except UsageError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return USAGE
    except OSError as err:  # the address is taken, the socket's folder is missing ...
        print(f"{prog}: cannot listen: {err}", file=sys.stderr)
        return USAGE  # a bad configuration, as docs/cli.md says
    except KeyboardInterrupt:
        return 0
