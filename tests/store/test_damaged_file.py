"""A damaged SQLite file is detected, not trusted (issue 32, item 2): each page of a small
database is overwritten in turn (a copy per page), and ``inspect --json`` and ``approve``
either give the undamaged answer or refuse with exit 9 and one line naming the way back
-- never a traceback, never a different answer, never a write into the damaged file."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel.errors import NotADatabase
from loopkernel.ids import RunId
from loopkernel.store import SQLiteStore
from loopkernel.store._damage import CHECK_ENV, Check, check_of_env

pytestmark = pytest.mark.slow

PAGE = 4096


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(), capture_output=True, text=True, timeout=120
    )


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def waiting_db(folder: Path) -> Path:
    db = folder / "runs.db"
    out = cli("--db", str(db), "run", "lk_testapps:gate", "--run-id", "g", "--quiet")
    assert out.returncode == 3, out.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == PAGE
    assert not (folder / "runs.db-wal").exists() or (folder / "runs.db-wal").stat().st_size == 0
    return db


def damage(source: Path, to: Path, page: int) -> None:
    """``source`` copied to ``to`` with page ``page`` (0-based) overwritten by noise."""
    data = bytearray(source.read_bytes())
    noise = random.Random(page).randbytes(PAGE)
    data[page * PAGE : (page + 1) * PAGE] = noise
    to.write_bytes(bytes(data))


def refused_in_one_line(out: subprocess.CompletedProcess[str]) -> bool:
    lines = out.stderr.strip().splitlines()
    return out.returncode == 9 and len(lines) == 1 and "Traceback" not in out.stderr


def test_every_damaged_page_is_refused_or_harmless(tmp_path: Path) -> None:
    pristine = waiting_db(tmp_path)
    truth = cli("--db", str(pristine), "inspect", "g", "--json")
    assert truth.returncode == 3, truth.stderr
    pages = pristine.stat().st_size // PAGE
    assert pages >= 8
    refused = 0
    for page in range(pages):
        folder = tmp_path / f"p{page}"
        folder.mkdir()
        db = folder / "runs.db"
        damage(pristine, db, page)
        before = sha(db)
        seen = cli("--db", str(db), "inspect", "g", "--json")
        if seen.returncode == 3:
            assert json.loads(seen.stdout) == json.loads(truth.stdout), page
        else:
            assert refused_in_one_line(seen), (page, seen.returncode, seen.stderr)
            if page > 0:  # page 1 holds the header: "not a SQLite database"
                assert "loopkernel export" in seen.stderr and ".recover" in seen.stderr
            refused += 1
        wrote = cli("--db", str(db), "approve", "g", "gate")
        if wrote.returncode == 9:
            assert refused_in_one_line(wrote), (page, wrote.stderr)
            assert sha(db) == before, page  # not one byte written
        else:
            assert wrote.returncode == 0, (page, wrote.stderr)
            with sqlite3.connect(db) as conn:  # it wrote: into a file that is whole
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)], page
        shutil.rmtree(folder)
    assert refused >= pages // 2  # most pages hold rows: most damage is seen


def test_damage_met_after_open_is_kept_and_nothing_more_is_written(tmp_path: Path) -> None:
    """The walk on open is off (``LOOPKERNEL_SQLITE_CHECK=off``); a page is damaged under
    an open store; the first error walks the file, and every later call is refused."""
    import asyncio

    pristine = waiting_db(tmp_path)

    async def go() -> None:
        store = SQLiteStore(pristine)
        store.check = Check.OFF
        await store.open()
        try:
            events = await store.events(RunId("g"))
            data = bytearray(pristine.read_bytes())  # every page but the header: noise
            for page in range(1, len(data) // PAGE):
                data[page * PAGE : (page + 1) * PAGE] = random.Random(page).randbytes(PAGE)
            pristine.write_bytes(bytes(data))
            with pytest.raises(NotADatabase, match="damaged"):
                for _ in range(3):
                    await store.list_runs()
                    await store.events(RunId("g"))
            assert events
            with pytest.raises(NotADatabase, match="damaged"):
                await store.list_runs()
            assert store.damage is not None
        finally:
            await store.close()

    asyncio.run(go())


def test_the_walk_is_chosen_by_the_environment() -> None:
    assert check_of_env({}) is Check.QUICK
    assert check_of_env({CHECK_ENV: "FULL"}) is Check.FULL
    assert check_of_env({CHECK_ENV: "off"}) is Check.OFF
    assert check_of_env({CHECK_ENV: "nonsense"}) is Check.QUICK
