"""Where model code may be imported from: the kernel never loads the gateway or a provider
SDK, and the model client is standard library only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import loopkernel

SRC = Path(loopkernel.__file__).parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_runtime_loads_no_gateway_no_provider_sdk_no_http_library() -> None:
    code = (
        "import sys, loopkernel, loopkernel.models, loopkernel.client, loopkernel.cli;"
        "heavy = {'openai', 'anthropic', 'xllamacpp', 'httpx', 'httpx2', 'jsonschema', 'mcp'};"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy"
        " or m.startswith('loopkernel.gateway')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_only_the_gateway_command_imports_the_gateway() -> None:
    allowed = {SRC / "cli" / "_gateway.py"}
    for path in SRC.rglob("*.py"):
        if (SRC / "gateway") in path.parents or path in allowed:
            continue
        for module in _imports(path):
            assert not module.startswith("loopkernel.gateway"), f"{path} imports {module}"
            assert module.split(".")[0] not in {"openai", "anthropic", "xllamacpp"}, path


def test_the_model_client_imports_downward_only() -> None:
    ok = (  # the effect journal and the hooks are on the ground floor, not in executor
        "loopkernel._effects",
        "loopkernel._hooks",
        "loopkernel.errors",
        "loopkernel.evidence",
        "loopkernel.graph",
        "loopkernel.ids",
        "loopkernel.store",
        "loopkernel.models",
        "loopkernel.telemetry",
    )
    for path in (SRC / "models").rglob("*.py"):
        for module in _imports(path):
            if module.startswith("loopkernel"):
                assert module.startswith(ok), f"{path.name} imports {module}"
