"""The public surface: what `import loopkernel` exports, what it costs, how layers import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import loopkernel

SRC = Path(loopkernel.__file__).parent


def test_all_is_sorted_exported_and_complete() -> None:
    assert sorted(loopkernel.__all__, key=str.lower) == sorted(
        set(loopkernel.__all__), key=str.lower
    )
    for name in loopkernel.__all__:
        assert hasattr(loopkernel, name), name
    for name in ("Kernel", "Planner", "Store", "GraphPatch", "Task", "TaskSpec"):
        assert name in loopkernel.__all__


def test_import_loopkernel_loads_no_mcp_no_http_no_database_driver() -> None:
    code = (
        "import sys, loopkernel, loopkernel.client, loopkernel.cli;"
        "heavy = {'mcp', 'httpx', 'anyio', 'pydantic', 'psycopg', 'psycopg_pool', 'jsonschema',"
        " 'langgraph', 'opentelemetry', 'starlette', 'uvicorn'};"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_layers_import_downward_only() -> None:
    allowed = {
        "graph": {"loopkernel.errors", "loopkernel.ids", "loopkernel.graph"},
        "policy": {"loopkernel.errors", "loopkernel.ids", "loopkernel.graph", "loopkernel.policy"},
        "evidence": {
            "loopkernel.errors",
            "loopkernel.ids",
            "loopkernel.graph",
            "loopkernel.evidence",
        },
        "store": {
            "loopkernel.errors",
            "loopkernel.ids",
            "loopkernel.graph",
            "loopkernel.evidence",
            "loopkernel.store",
        },
    }
    for layer, ok in allowed.items():
        folder = SRC / layer
        if not folder.exists():
            continue
        for path in folder.rglob("*.py"):
            for module in _imports(path):
                if module.startswith("loopkernel"):
                    assert any(module == a or module.startswith(a + ".") for a in ok), (
                        f"{path.relative_to(SRC)} imports {module}"
                    )


def test_apps_use_the_public_api_only() -> None:
    apps = SRC.parent / "loopkernel_apps"
    # loopkernel.client and loopkernel.cli: for the commands an app contributes
    # (entry point group loopkernel.commands), which start and render runs as the CLI does.
    public = {
        "loopkernel",
        "loopkernel.cli",
        "loopkernel.client",
        "loopkernel.planner",
        "loopkernel.policy",
        "loopkernel.testing",
        "loopkernel.tools",
        "loopkernel.models",
        "loopkernel.evidence",  # redaction: one redactor, one marker
    }
    for path in apps.rglob("*.py"):
        for module in _imports(path):
            if module.startswith("loopkernel.") or module == "loopkernel":
                assert module in public or module.startswith("loopkernel_apps"), (path, module)
