"""The size ratchet: measures of the tree that may only go down (docs/structure.md).

Four measures, each with a limit; whatever passes its limit today is listed in
``tests/ratchet_baseline.json`` with its measure, and may not grow:

==================  =====  ==================================================
measure             limit  of what
==================  =====  ==================================================
``module_lines``    800    every ``.py`` module under src/ and bench/
``function_lines``  80     every function and method (its ``def`` to its end)
``complexity``      15     McCabe complexity per function, as ruff's C901 says
``parameters``      6      parameters of a public function (``self``/``cls``
                           not counted; ``*args``/``**kwargs`` count one each)
==================  =====  ==================================================

``python scripts/_ratchet.py`` prints the current measures over their limits beside the
baseline; ``--write`` rewrites the baseline from the tree and the ruff per-file ignores
of C901 in pyproject.toml (between the ratchet's markers). ``tests/test_ratchet.py``
fails when an item grows, a new one appears, or one shrank below its entry (lower the
baseline then: ``--write``).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "ratchet_baseline.json"
PYPROJECT = ROOT / "pyproject.toml"
MEASURED = ("src", "bench")
"""Where sizes and parameter counts are measured (tests and scripts are not)."""
COMPLEXITY_MEASURED = ("src", "tests", "bench", "scripts")
"""Where ruff's C901 applies (everything ruff checks)."""

LIMITS = {"module_lines": 800, "function_lines": 80, "complexity": 15, "parameters": 6}
BEGIN = "# ratchet: begin (scripts/ratchet --write; may only shrink)"
END = "# ratchet: end"

Measures = dict[str, dict[str, int]]


def _modules(roots: tuple[str, ...]) -> Iterator[Path]:
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function with its dotted name (``Class.method``, ``outer.inner``)."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, Any]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    if in_class and names and names[0].arg in ("self", "cls"):
        count -= 1
    return count


def _fields(cls: ast.ClassDef) -> set[str]:
    """The names a class body annotates: a record's fields."""
    return {
        node.target.id
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def _mirrors_fields(fn: ast.FunctionDef | ast.AsyncFunctionDef, fields: set[str]) -> bool:
    """A record's copy-with-changes (``Task.evolve``, ``dataclasses.replace``'s shape):
    keyword-only parameters that are exactly the record's own fields. Its parameter list is
    the record; grouping it would be the record again, so it is not counted."""
    a = fn.args
    names = {p.arg for p in a.kwonlyargs}
    return bool(fields) and not a.posonlyargs and len(a.args) <= 1 and names == fields


def _public(dotted: str) -> bool:
    """A name any part of which is private (``_x``) is not public; ``__init__`` is."""
    return not any(p.startswith("_") and p != "__init__" for p in dotted.split("."))


def _put(table: dict[str, int], key: str, value: int) -> None:
    table[key] = max(value, table.get(key, 0))


def measure() -> Measures:
    """The items over their limits now, by measure."""
    out: Measures = {name: {} for name in LIMITS}
    for path in _modules(MEASURED):
        text = path.read_text()
        rel = _rel(path)
        lines = len(text.splitlines())
        if lines > LIMITS["module_lines"]:
            out["module_lines"][rel] = lines
        tree = ast.parse(text)
        fields = {
            id(f): _fields(c) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body
        }
        for dotted, fn in _functions(tree):
            length = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if length > LIMITS["function_lines"]:
                _put(out["function_lines"], f"{rel}::{dotted}", length)
            params = _parameters(fn, id(fn) in fields)
            if (
                params > LIMITS["parameters"]
                and _public(dotted)
                and not _mirrors_fields(fn, fields.get(id(fn), set()))
            ):
                _put(out["parameters"], f"{rel}::{dotted}", params)
    out["complexity"] = complexity()
    return out


API_PACKAGE = "loopkernel"
"""The package whose public API has no parameter list over the limit (apps, tests and
bench are its callers, not its API)."""


def _api_modules() -> Iterator[str]:
    """The public modules of ``loopkernel``: every module no part of whose dotted name is
    private (``loopkernel.client``, ``loopkernel.planner.llm``, each package's
    ``__init__``)."""
    for path in _modules(("src",)):
        name = _module_name(path)
        if name.split(".")[0] == API_PACKAGE and not any(
            p.startswith("_") for p in name.split(".")
        ):
            yield name


def api_keys() -> set[str]:
    """``path::dotted`` of every function of the public API: what a public module exports
    (its ``__all__``, else the public names it defines), a class's public methods and
    ``__init__`` (inherited ones too, where the package defines them). Read by importing
    the package, so that a name re-exported from a private module counts where it is
    defined."""
    import importlib
    import inspect

    src = str(ROOT / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    keys: set[str] = set()

    def add(fn: Any) -> None:
        fn = inspect.unwrap(getattr(fn, "__func__", fn))
        module = getattr(fn, "__module__", "") or ""
        if not inspect.isfunction(fn) or module.split(".")[0] != API_PACKAGE:
            return
        file = inspect.getsourcefile(fn)
        if file is not None and Path(file).resolve().is_relative_to(ROOT):
            keys.add(f"{_rel(Path(file).resolve())}::{fn.__qualname__.replace('.<locals>', '')}")

    for name in _api_modules():
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        if exported is None:
            exported = [
                n
                for n, v in vars(module).items()
                if not n.startswith("_") and getattr(v, "__module__", None) == name
            ]
        for attr in exported:
            value = getattr(module, attr)
            if inspect.isclass(value):
                for owner in value.__mro__:
                    for method, member in vars(owner).items():
                        if _public(method):
                            add(member.fget if isinstance(member, property) else member)
            else:
                add(value)
    return keys


def api_parameters(now: Measures) -> dict[str, int]:
    """The ``parameters`` items that are the public API's (must stay empty)."""
    keys = api_keys()
    return {key: n for key, n in now["parameters"].items() if key in keys}


_TOO_COMPLEX = re.compile(r"^`(?P<name>[^`]+)` is too complex \((?P<n>\d+) > \d+\)$")


def complexity() -> dict[str, int]:
    """McCabe complexity over the limit, per ``path::function``, from ruff's C901 with
    no configuration (so the per-file ignores that keep the tree green do not hide it)."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    limit = LIMITS["complexity"]
    done = subprocess.run(
        [
            ruff,
            "check",
            "--isolated",
            "--select",
            "C901",
            "--config",
            f"lint.mccabe.max-complexity = {limit}",
            "--output-format",
            "json",
            "--exit-zero",
            *COMPLEXITY_MEASURED,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, int] = {}
    for item in json.loads(done.stdout):
        match = _TOO_COMPLEX.match(item["message"])
        assert match, item["message"]
        rel = _rel(Path(item["filename"]))
        _put(found, f"{rel}::{match['name']}", int(match["n"]))
    return found


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT / "src").with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports when it runs (at the top or inside a
    function). An import under ``if TYPE_CHECKING:`` never runs (it names a type for the
    checker), so it is no edge: a circle is one that Python would walk."""
    paths = {_module_name(p): p for p in _modules(("src",))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found.update(t for t in targets if t in paths and t != name)
        graph[name] = found
    return graph


def circles() -> list[list[str]]:
    """The import graph's strongly connected components of more than one module
    (Tarjan), each sorted; a package's ``__init__`` importing its own modules is not
    counted (that edge always exists)."""
    graph = import_graph()
    for name, deps in graph.items():
        graph[name] = {d for d in deps if not d.startswith(f"{name}.")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


_TASK_SITE = re.compile(r"\b(create_task|ensure_future|Thread)\(")
_TASK_GROUP = re.compile(r"\b(TaskGroup|create_task_group)\(")


def task_sites() -> list[str]:
    """``path:line: text`` of every place under src/ that starts an asyncio task
    (``create_task``, ``ensure_future``) or a thread (``Thread(``), comments aside; a
    ``TaskGroup``'s own ``create_task`` counts too: read the list beside the owners."""
    found = []
    for path in _modules(("src",)):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _TASK_SITE.search(code):
                found.append(f"{_rel(path)}:{number}: {line.strip()}")
    return found


_BARE = re.compile(
    r"\b(asyncio\.(create_task|ensure_future)|loop\.create_task|get_running_loop\(\)\.create_task)\("
)


def site_kind(code: str) -> str:
    """``thread_sites``, ``bare_task_sites`` (``asyncio.create_task``, ``ensure_future``,
    ``loop.create_task``: the task's owner is whoever keeps it), or ``group_task_sites``
    (``group.create_task``: a ``TaskGroup`` owns it)."""
    if "Thread(" in code:
        return "thread_sites"
    return "bare_task_sites" if _BARE.search(code) else "group_task_sites"


def task_groups() -> int:
    """How many ``asyncio.TaskGroup()`` / ``anyio.create_task_group()`` owners src/ has."""
    return sum(
        len(_TASK_GROUP.findall(line.split("#", 1)[0]))
        for path in _modules(("src",))
        for line in path.read_text().splitlines()
    )


def summary() -> dict[str, int]:
    """The tree's figures for docs/structure.md: how many items pass each limit, the
    import circles, the task and thread sites, the TaskGroups."""
    now = measure()
    figures = {name: len(items) for name, items in now.items()}
    figures["api_parameters"] = len(api_parameters(now))
    figures["import_circles"] = len(circles())
    kinds = [site_kind(site.split(": ", 1)[1]) for site in task_sites()]
    for kind in ("bare_task_sites", "group_task_sites", "thread_sites"):
        figures[kind] = kinds.count(kind)
    figures["task_groups"] = task_groups()
    return figures


def load_baseline() -> Measures:
    data = json.loads(BASELINE.read_text())
    return {name: dict(data.get(name, {})) for name in LIMITS}


def compare(now: Measures, baseline: Measures) -> list[str]:
    """What the test refuses: growth, newcomers, and entries above what they measure."""
    problems: list[str] = []
    for name, limit in LIMITS.items():
        base, cur = baseline[name], now[name]
        for key in sorted(set(base) | set(cur)):
            was, is_ = base.get(key), cur.get(key)
            if was is None:
                problems.append(f"{name}: {key} is {is_} (limit {limit}): split it")
            elif is_ is None:
                problems.append(
                    f"{name}: {key} is within the limit now (baseline {was}): "
                    "drop it from the baseline (scripts/ratchet --write)"
                )
            elif is_ > was:
                problems.append(f"{name}: {key} grew {was} -> {is_} (limit {limit}): split it")
            elif is_ < was:
                problems.append(
                    f"{name}: {key} shrank {was} -> {is_}: lower the baseline "
                    "(scripts/ratchet --write)"
                )
    return problems


def write(now: Measures) -> None:
    BASELINE.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    files = sorted({key.split("::")[0] for key in now["complexity"]})
    block = "\n".join([BEGIN, *(f'"{f}" = ["C901"]' for f in files), END])
    text = PYPROJECT.read_text()
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    PYPROJECT.write_text(text[:start] + block + text[stop:])


def report(now: Measures, baseline: Measures) -> str:
    rows = []
    for name, limit in LIMITS.items():
        rows.append(f"\n{name} (limit {limit}): {len(now[name])} over")
        for key, value in sorted(now[name].items(), key=lambda kv: -kv[1]):
            was = baseline[name].get(key)
            mark = "new" if was is None else ("" if was == value else f"baseline {was}")
            rows.append(f"  {value:>5}  {key}  {mark}".rstrip())
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the baseline")
    parser.add_argument("--json", action="store_true", help="print the measures as JSON")
    parser.add_argument("--circles", action="store_true", help="print the import circles")
    parser.add_argument(
        "--summary",
        action="store_true",
        help="print the figures: counts over each limit, "
        "circles, task and thread sites (docs/structure.md's table)",
    )
    parser.add_argument("--sites", action="store_true", help="list the task and thread sites")
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="measure this tree instead (e.g. an old commit "
        "unpacked with git archive); the ruff of this environment counts complexity",
    )
    args = parser.parse_args(argv)
    if args.root is not None:
        global ROOT
        ROOT = args.root.resolve()
    if args.sites:
        for site in task_sites():
            print(f"{site_kind(site.split(': ', 1)[1]):>16}  {site}")
        return 0
    if args.summary:
        print(json.dumps(summary(), indent=1))
        return 0
    if args.circles:
        found = circles()
        for group in found:
            print("  " + " <-> ".join(group))
        print(f"{len(found)} import circle(s) under src/")
        return 0
    now = measure()
    if args.write:
        write(now)
        print(f"wrote {_rel(BASELINE)} and the C901 ignores of {_rel(PYPROJECT)}")
        return 0
    if args.json:
        print(json.dumps(now, indent=1, sort_keys=True))
        return 0
    baseline = load_baseline() if BASELINE.exists() else {n: {} for n in LIMITS}
    print(report(now, baseline))
    problems = compare(now, baseline)
    print(f"\n{len(problems)} difference(s) from the baseline")
    for p in problems:
        print(f"  {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
