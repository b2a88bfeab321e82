"""Databases at the door: a command never creates a database it only reads, never touches
a file that is not LoopKernel's, and says in one line what is wrong with a path
(exit 9: not a usable database; 8: unavailable; 2: usage). Issue 8, section 3."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, cli_env, unavailable

pytestmark = pytest.mark.slow

READERS = [
    ["inspect", "r1"],
    ["runs"],
    ["resume", "r1"],
    ["export", "r1", "--to", "OUT"],
    ["cancel", "r1"],
    ["approve", "r1", "t"],
    ["wait", "r1"],
]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(), capture_output=True, text=True, timeout=60
    )


def one_line(out: subprocess.CompletedProcess[str], code: int, message: str) -> None:
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_commands(db: Path, tmp_path: Path) -> list[list[str]]:
    return [
        ["--db", str(db), *(str(tmp_path / "out.db") if a == "OUT" else a for a in args)]
        for args in READERS
    ]


def test_reading_commands_never_create_a_database(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    for args in read_commands(db, tmp_path):
        one_line(cli(*args), 9, f"no LoopKernel database at {db}")
    assert list(tmp_path.iterdir()) == []


def test_a_foreign_sqlite_file_is_never_touched(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.close()
    before = digest(db)
    for args in [*read_commands(db, tmp_path), ["--db", str(db), "run", "speculation"]]:
        one_line(cli(*args), 9, "another application's SQLite database (tables: customers)")
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal, no -shm


def test_a_foreign_file_marked_by_its_application_id_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA application_id = 1234")
    conn.close()
    before = digest(db)
    one_line(cli("--db", str(db), "run", "speculation"), 9, "application_id 0x4d2")
    assert digest(db) == before


def test_an_empty_sqlite_file_is_a_new_database_only_for_commands_that_create_runs(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    db.touch()
    one_line(cli("--db", str(db), "runs"), 9, "no LoopKernel database")
    out = cli("--db", str(db), "run", "speculation", "--scenario", "fast", "--quiet")
    assert out.returncode == 0, out.stderr
    assert cli("--db", str(db), "runs").returncode == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        ("directory", "is a directory"),
        ("text", "is not a SQLite database"),
        # a damaged file is named as such, with the way out (store/_damage.py)
        ("truncated", "is damaged"),
        ("corrupt", "is damaged"),
        ("meta_value", "damaged meta table"),
        ("meta_columns", "not a usable LoopKernel database"),
    ],
)
def test_an_unusable_path_gives_one_line_and_exit_9(
    tmp_path: Path, make: str, message: str
) -> None:
    db = tmp_path / "runs.db"
    if make == "directory":
        db.mkdir()
    elif make == "text":
        db.write_text("hello, I am a text file\n" * 100)
    else:
        assert cli("--db", str(db), "run", "speculation", "--scenario", "fast").returncode == 0
        data = db.read_bytes()
        if make == "truncated":
            db.write_bytes(data[: len(data) // 3])
        elif make == "corrupt":
            db.write_bytes(data[:100] + bytes(range(256)) * ((len(data) - 100) // 256 + 1))
        elif make == "meta_value":
            with sqlite3.connect(db) as conn:
                conn.execute("UPDATE meta SET value = 'two' WHERE key = 'schema_version'")
            conn.close()
        else:
            with sqlite3.connect(db) as conn:
                conn.execute("DROP TABLE meta")
                conn.execute("CREATE TABLE meta (k TEXT, v TEXT)")
            conn.close()
    for args in [["runs"], ["inspect", "r1"], ["run", "speculation"]]:
        one_line(cli("--db", str(db), *args), 9, message)


def test_an_immutable_database_gives_one_line(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    assert cli("--db", str(db), "run", "speculation", "--scenario", "fast").returncode == 0
    chattr = subprocess.run(["chattr", "+i", str(db)], capture_output=True, text=True)
    if chattr.returncode != 0:
        unavailable(
            "root-only (a full disk, an immutable file)",
            "LOOPKERNEL_TEST_ROOT",
            f"chattr +i is not allowed here: {chattr.stderr.strip()}",
        )
    try:
        one_line(cli("--db", str(db), "run", "speculation"), 9, str(db))
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)


def test_export_into_a_missing_folder_is_a_usage_error(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    out = cli("--db", str(db), "run", "speculation", "--scenario", "fast", "--run-id", "r1")
    assert out.returncode == 0, out.stderr
    target = tmp_path / "nowhere" / "copy.db"
    one_line(cli("--db", str(db), "export", "r1", "--to", str(target)), 2, "no directory")
    assert not target.parent.exists()


def test_postgresql_that_does_not_answer_gives_one_line_and_exit_8() -> None:
    url = "postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=2"
    for args in [["runs"], ["inspect", "r1"], ["run", "speculation"], ["submit", "speculation"]]:
        one_line(cli("--db", url, *args), 8, "cannot connect to PostgreSQL")


def test_a_store_error_never_exits_1(tmp_path: Path) -> None:
    """1 means "the run failed"; a database the code cannot use is 9."""
    db = tmp_path / "runs.db"
    assert cli("--db", str(db), "run", "speculation", "--scenario", "fast").returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    conn.close()
    one_line(cli("--db", str(db), "runs"), 9, "Upgrade loopkernel")
    out = cli("--db", str(db), "inspect", "r1", "--json")
    assert out.returncode == 9 and json.dumps({}) not in out.stdout


def _corrupt_one_page(db: Path, table: str) -> None:
    """Overwrite the page holding ``table``'s rows (its B-tree root, the only page of a
    small table) with garbage: the header, the schema and every other page stay whole."""
    with sqlite3.connect(db) as conn:
        (page,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    with open(db, "r+b") as f:
        f.seek((page[0] - 1) * size)
        f.write(bytes(range(256)) * (size // 256))


def test_a_database_with_one_corrupt_page_gives_one_line_and_exit_9(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    out = cli("--db", str(db), "run", "speculation", "--scenario", "fast", "--run-id", "r1")
    assert out.returncode == 0, out.stderr
    assert (
        not db.with_name("runs.db-wal").exists() or db.with_name("runs.db-wal").stat().st_size == 0
    )
    _corrupt_one_page(db, "tasks")
    commands = [
        ["runs"],
        ["inspect", "r1"],
        ["resume", "r1"],
        ["export", "r1", "--to", str(tmp_path / "out.db")],
        ["run", "speculation", "--scenario", "fast"],
    ]
    for args in commands:
        one_line(cli("--db", str(db), *args), 9, "is damaged")
    assert not (tmp_path / "out.db").exists()


def test_an_existing_empty_file_becomes_a_private_database(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    db.touch()
    db.chmod(0o644)
    out = cli("--db", str(db), "run", "speculation", "--scenario", "fast", "--run-id", "r1")
    assert out.returncode == 0, out.stderr
    assert db.stat().st_mode & 0o777 == 0o600  # results and tool outputs: not for everyone
    assert cli("--db", str(db), "inspect", "r1").returncode == 0


@pytest.mark.postgres
def test_postgresql_reading_commands_create_no_tables(pg_database: str) -> None:
    from lk_stores import Backend, fresh_pg_schema

    url = fresh_pg_schema(pg_database)
    for args in [["runs"], ["inspect", "r1"], ["resume", "r1"]]:
        one_line(cli("--db", url, *args), 9, "no LoopKernel database at postgresql://")
    listed = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()"
    assert Backend(kind="postgres", url=url).sql(listed) == [(0,)]
    out = cli("--db", url, "run", "speculation", "--scenario", "fast", "--run-id", "r1")
    assert out.returncode == 0, out.stderr  # a command that runs work creates them
    assert cli("--db", url, "runs").returncode == 0


@pytest.mark.postgres
def test_postgresql_with_another_applications_events_table_is_refused(pg_database: str) -> None:
    from lk_stores import Backend, fresh_pg_schema

    url = fresh_pg_schema(pg_database)
    theirs = Backend(kind="postgres", url=url)
    theirs.sql("CREATE TABLE events (id serial PRIMARY KEY, what text)")
    for args in [["runs"], ["run", "speculation", "--scenario", "fast"]]:
        one_line(cli("--db", url, *args), 9, "already has tables LoopKernel did not make (events)")
    listed = (
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    )
    assert theirs.sql(listed) == [("events",)]  # untouched
