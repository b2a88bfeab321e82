"""JSON-lines files the project writes (a tool's ``KeyLedger``, looplab's records, traces):
whole fsynced lines; a short write on a really full disk (a tmpfs filled to its last page)
is an error that leaves the file as it was; a torn tail is cut off on load and its effect
re-sent under its key; a bad line in the middle is never skipped."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from lk_helpers import tmpfs
from loopkernel.errors import UsageError
from loopkernel.testing import read_trace
from loopkernel.tools import KeyLedger, read_ledger

PAGE = 4096


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs."""
    with tmpfs(tmp_path / "disk", "64k") as where:
        yield where


def fill_up(disk: Path) -> Path:
    """Take every free page of ``disk``; the file to delete to free them."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(b"\0" * PAGE)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return filler


def test_a_short_write_on_a_full_disk_is_an_error_and_leaves_whole_lines(
    tiny_disk: Path,
) -> None:
    path = tiny_disk / "ledger.jsonl"
    ledger = KeyLedger(path)
    ledger.append("r/a/0", "act", {"pad": ""})
    # Grow the file to 4000 bytes: its one page then has 96 bytes of room, and no page is free.
    pad = 4000 - path.stat().st_size - len(b'{"key":"r/a/1","result":{"pad":""},"tool":"act"}\n')
    ledger.append("r/a/1", "act", {"pad": "x" * pad})
    assert path.stat().st_size == 4000
    filler = fill_up(tiny_disk)

    with pytest.raises(OSError) as short:
        ledger.append("r/a/2", "act", {"pad": "y" * 200})
    assert short.value.errno == errno.ENOSPC and "short write" in str(short.value)
    assert path.stat().st_size == 4000  # the fragment was cut off again
    assert path.read_bytes().endswith(b"\n")
    assert "r/a/2" not in ledger and len(ledger) == 2  # not recorded: it runs again

    filler.unlink()
    ledger.append("r/a/2", "act", {"pad": "y" * 200})
    assert [e["key"] for e in read_ledger(path)] == ["r/a/0", "r/a/1", "r/a/2"]
    assert [e["key"] for e in KeyLedger(path).entries()] == ["r/a/0", "r/a/1", "r/a/2"]


def test_a_torn_tail_is_cut_on_load_and_its_effect_re_sent_under_its_key(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = KeyLedger(path)
    ledger.append("r/a/0", "act", {"n": 1})
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"key":"r/a/1","result":{"n"')  # a crash inside the write

    reopened = KeyLedger(path)
    assert path.read_bytes() == whole  # the torn tail is gone from the file
    assert "r/a/1" not in reopened
    ran: list[str] = []

    async def produce() -> dict[str, int]:
        ran.append("r/a/1")
        return {"n": 2}

    assert asyncio.run(reopened.once("r/a/1", "act", produce)) == {"n": 2}
    assert ran == ["r/a/1"]  # re-sent under its key, the effect happens (once)
    assert asyncio.run(reopened.once("r/a/1", "act", produce)) == {"n": 2}
    assert ran == ["r/a/1"]
    assert [e["key"] for e in read_ledger(path)] == ["r/a/0", "r/a/1"]


def test_a_bad_line_in_the_middle_is_an_error_not_dropped(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b'{"key":"a","result":1,"tool":"t"}\n{"key":"b","res\n{"key":"c"}\n')
    with pytest.raises(UsageError, match=r"line 2 is not JSON"):
        KeyLedger(path)
    assert path.read_bytes().count(b"\n") == 3  # untouched


def test_a_trace_does_not_count_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.txt"
    path.write_bytes(b"start a\ndone a\nstart b")
    assert read_trace(path) == {("start", "a"): 1, ("done", "a"): 1}
