"""The journal row and patch cell written in Python (``_rows``) are the markup the
templates drew before (kept in ``rows_reference/``): every branch, and every field that
comes from a run escaped the same way."""

from __future__ import annotations

import itertools
from pathlib import Path

from jinja2 import DictLoader, Environment

from loopkernel.web._rows import journal_row, patch_cell
from loopkernel.web._state import templates
from loopkernel.web._views import JournalRow, PatchView

REFERENCE = Path(__file__).parent / "rows_reference"
"""``_row.html`` and ``_patch.html`` as templates, before they were written in Python."""


def _reference() -> Environment:
    """The inspector's environment (filters, escaping) drawing the old templates."""
    env = templates()
    assert env.loader is not None
    macros = env.loader.get_source(env, "_macros.html")[0]
    ours = {name: (REFERENCE / name).read_text() for name in ("_row.html", "_patch.html")}
    env.loader = DictLoader({**ours, "_macros.html": macros})
    return env


PATCHES = [
    None,
    PatchView(planner="planner", outcome="applied", reason=None, ops=[], raw="[]"),
    PatchView(
        planner="sc<r>", outcome="rejected", reason="bad & <x>", ops=["add a", "<b>"], raw=""
    ),
    PatchView(planner="p", outcome="applied", reason="", ops=["x"], raw="[]"),
]


def test_rows_written_in_python_are_the_templates_markup() -> None:
    env = _reference()
    row_t, patch_t = env.get_template("_row.html"), env.get_template("_patch.html")
    cases = itertools.product(
        PATCHES,
        [True, False],
        [None, "", "t 1/\u00fc<"],
        [None, '{"a": "<x>"}'],
        [False, True],
        [None, 1000.5],
        [None, 0.25],
    )
    n = 0
    for patch, planned, task, data, cut, at, gap in cases:
        row = JournalRow(
            seq=7 + n,
            kind="task_<x>",
            task_id=task,
            summary="s & <q>\"'",
            data=data,
            patch=patch,
            planned=planned,
            cut=cut,
            at=at,
            offset=None if at is None else 12.5,
            gap=gap,
        )
        assert str(journal_row(row, "r/\u00fc x")) == row_t.render(row=row, run_id="r/\u00fc x")
        assert str(patch_cell(patch, planned)) == patch_t.render(patch=patch, planned=planned)
        n += 1
    assert n == 384
