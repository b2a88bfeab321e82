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


def test_what_an_app_hands_to_app_parts_is_exported() -> None:
    """An app uses only what ``loopkernel`` exports (DESIGN.md section 10): each value
    ``AppParts`` takes is importable from it, not only from a subpackage."""
    from loopkernel.executor import ApprovalTimeout

    assert "ApprovalTimeout" in loopkernel.__all__
    assert loopkernel.ApprovalTimeout is ApprovalTimeout


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
            # the crash points only (the group commit's batch_written/batch_committed);
            # _hooks itself imports nothing but the bottom (ROOMS below)
            "loopkernel._hooks",
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


BASE = {"loopkernel.errors", "loopkernel.ids", "loopkernel.graph"}
"""The bottom: what every room may import."""
# Each room and what it may import: the ground floor (hooks, the effect journal) sits
# above the store and below every room that makes calls; nothing in it imports a room.
ROOMS: dict[str, set[str]] = {
    "_hooks.py": BASE,
    "_jsonl.py": BASE,
    # telemetry redacts what an exporter sees with the journal's one redaction
    "telemetry": BASE | {"loopkernel.telemetry", "loopkernel.evidence"},
    "_effects.py": BASE
    | {"loopkernel._hooks", "loopkernel.evidence", "loopkernel.store", "loopkernel.telemetry"},
    "tools": BASE
    | {
        "loopkernel._hooks",
        "loopkernel._effects",
        "loopkernel._jsonl",
        "loopkernel.evidence",
        "loopkernel.policy",
        "loopkernel.store",
        "loopkernel.telemetry",
        "loopkernel.tools",
    },
    "models": BASE
    | {
        "loopkernel._hooks",
        "loopkernel._effects",
        "loopkernel.evidence",
        "loopkernel.store",
        "loopkernel.telemetry",
        "loopkernel.models",
    },
}


def _module_of(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _may(module: str, ok: set[str]) -> bool:
    if module == "loopkernel":  # `from loopkernel import telemetry` names a submodule
        return "loopkernel.telemetry" in ok
    return any(module == a or module.startswith(a + ".") for a in ok)


def test_the_ground_floor_tools_and_models_import_nothing_above_them() -> None:
    for room, ok in ROOMS.items():
        where = SRC / room
        paths = [where] if where.is_file() else sorted(where.rglob("*.py"))
        assert paths, room
        for path in paths:
            for module in _imports(path):
                if module == "loopkernel" or module.startswith("loopkernel."):
                    assert _may(module, ok), f"{path.relative_to(SRC)} imports {module}"


def _private_imports(path: Path) -> list[tuple[str, str]]:
    """``(module, owner)`` for each import of a private module of another package."""
    here = _module_of(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    for module in _imports(path):
        parts = module.split(".")
        if parts[0] != "loopkernel":
            continue
        private = next((i for i, p in enumerate(parts[1:], 1) if p.startswith("_")), None)
        if private is None or private == 1:  # loopkernel._hooks: the ground floor
            continue
        owner = ".".join(parts[:private])
        if not (package == owner or package.startswith(owner + ".")):
            found.append((module, owner))
    return found


def test_nothing_outside_the_executor_imports_its_private_modules() -> None:
    # `loopkernel.executor._context` from tools/ and models/ was the arrow back up and an
    # import circle (issue 20); the crash points and the context protocol are now on the
    # ground floor (loopkernel._hooks), the effect journal too (loopkernel._effects).
    for path in SRC.rglob("*.py"):
        for module, owner in _private_imports(path):
            assert owner != "loopkernel.executor", f"{path.relative_to(SRC)} imports {module}"
    for room in ("tools", "models", "_effects.py", "_hooks.py"):
        where = SRC / room
        for path in [where] if where.is_file() else where.rglob("*.py"):
            assert _private_imports(path) == [], path.relative_to(SRC)


def test_apps_use_the_public_api_only() -> None:
    apps = SRC.parent / "loopkernel_apps"
    # loopkernel.client and loopkernel.cli: for the commands an app contributes
    # (entry point group loopkernel.commands), which start and render runs as the CLI does.
    public = {
        "loopkernel",
        "loopkernel.cli",
        "loopkernel.client",
        "loopkernel.planner",
        "loopkernel.planner.llm",  # a public module: the allowlist's postconditions
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
