"""docs/planner.md runs as written: each example, after the page's shared helper, prints
exactly the output shown under it."""

from __future__ import annotations

import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "planner.md"
FENCE = re.compile(r"```(\w*)\n(.*?)```", flags=re.S)


def blocks() -> list[tuple[str, str]]:
    """Every fenced block of the page: (language, text)."""
    return FENCE.findall(PAGE.read_text())


def examples() -> list[tuple[str, str]]:
    """Each python block followed by a text block: (code, the output it prints)."""
    found = blocks()
    return [
        (code, out)
        for (lang, code), (next_lang, out) in pairwise(found)
        if lang == "python" and next_lang == "text"
    ]


def helper() -> str:
    """The page's first python block: the ``run`` helper every example uses."""
    return next(code for lang, code in blocks() if lang == "python")


def test_the_page_has_an_example_for_each_pattern() -> None:
    code = "\n".join(block for block, _ in examples())
    for name in ("Flow(", "for_each(", "retry(", "repeat(", "quorum(", "gate(", "guard("):
        assert name in code, f"docs/planner.md has no runnable example of {name}"


@pytest.mark.parametrize("index", range(len(examples())))
def test_each_example_prints_what_the_page_shows(tmp_path: Path, index: int) -> None:
    code, expected = examples()[index]
    script = tmp_path / "example.py"
    script.write_text(helper() + "\n\n" + code)
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected
