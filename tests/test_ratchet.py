"""The ratchet (docs/structure.md): the tree's size measures may only go down; and every
driver error class has a meaning at ``Dialect.classify`` (httpx's
``test_httpcore_all_exceptions_mapped`` is the model)."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path
from types import ModuleType

import pytest

from loopkernel.errors import NotADatabase, StoreError, StoreUnavailable
from loopkernel.store._engine import DuplicateKey, LockHeld
from loopkernel.store._sqlite import SQLiteDialect

ROOT = Path(__file__).resolve().parent.parent


def _ratchet() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lk_ratchet", ROOT / "scripts" / "_ratchet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ratchet() -> ModuleType:
    return _ratchet()


def test_no_measure_grew_none_is_new_and_the_baseline_is_tight(ratchet: ModuleType) -> None:
    problems = ratchet.compare(ratchet.measure(), ratchet.load_baseline())
    assert not problems, "\n".join(
        [
            "the ratchet (docs/structure.md): split what grew; lower the baseline with "
            "`bash scripts/ratchet --write` when it shrank",
            *problems,
        ]
    )


def test_the_c901_ignores_are_the_files_the_baseline_lists(ratchet: ModuleType) -> None:
    text = (ROOT / "pyproject.toml").read_text()
    block = text[text.index(ratchet.BEGIN) : text.index(ratchet.END)]
    ignored = {line.split('"')[1] for line in block.splitlines() if line.startswith('"')}
    listed = {key.split("::")[0] for key in ratchet.load_baseline()["complexity"]}
    assert ignored == listed


def test_compare_refuses_growth_newcomers_and_slack(ratchet: ModuleType) -> None:
    base = {name: {} for name in ratchet.LIMITS}
    base["function_lines"] = {"a.py::f": 90, "a.py::g": 90, "a.py::gone": 85}
    now = {name: {} for name in ratchet.LIMITS}
    now["function_lines"] = {"a.py::f": 91, "a.py::g": 88, "a.py::new": 81}
    said = "\n".join(ratchet.compare(now, base))
    assert "a.py::f grew 90 -> 91" in said
    assert "a.py::g shrank 90 -> 88: lower the baseline" in said
    assert "a.py::new is 81" in said
    assert "a.py::gone is within the limit now" in said
    assert ratchet.compare(base, base) == []


def test_the_measures_count_what_they_say(ratchet: ModuleType, tmp_path: Path) -> None:
    import ast

    tree = ast.parse(
        "class C:\n"
        "    def m(self, a, b, c, d, e, f, *g): pass\n"
        "def top(a, b, c, d, e, f, g, **h):\n"
        "    def inner(): pass\n"
        "    return inner\n"
    )
    found = dict(ratchet._functions(tree))
    assert set(found) == {"C.m", "top", "top.inner"}
    methods = {id(f) for f in tree.body[0].body}  # type: ignore[attr-defined]
    assert ratchet._parameters(found["C.m"], id(found["C.m"]) in methods) == 7
    assert ratchet._parameters(found["top"], False) == 8
    assert ratchet._public("C.__init__") and not ratchet._public("_C.m")


def test_a_records_copy_with_changes_is_not_a_long_parameter_list(ratchet: ModuleType) -> None:
    import ast

    fields = "".join(f"    f{i}: int\n" for i in range(8))
    tree = ast.parse(
        "class R:\n"
        + fields
        + "    def evolve(self, *, "
        + ", ".join(f"f{i}=0" for i in range(8))
        + "): pass\n"
        + "    def other(self, *, "
        + ", ".join(f"f{i}=0" for i in range(7))
        + ", g=0): pass\n"
    )
    cls = tree.body[0]
    assert isinstance(cls, ast.ClassDef)
    found = dict(ratchet._functions(tree))
    assert ratchet._mirrors_fields(found["R.evolve"], ratchet._fields(cls))
    assert not ratchet._mirrors_fields(found["R.other"], ratchet._fields(cls))


def test_the_public_api_has_no_parameter_list_over_six(ratchet: ModuleType) -> None:
    # Knobs go in a frozen record with a meaning (ExecutionConfig, NewRun, Ask, CallRules,
    # Answerer ...), not in a longer list; a record's copy-with-changes is not counted.
    assert ratchet.api_parameters(ratchet.measure()) == {}
    keys = ratchet.api_keys()  # what counts as the API: exports and public modules
    assert "src/loopkernel/client.py::Client.execute" in keys
    assert "src/loopkernel/store/_engine.py::SQLStore.create_run" in keys  # SQLiteStore's
    assert not any(k.startswith(("bench/", "src/loopkernel_apps/")) for k in keys)


def test_src_has_no_import_circle(ratchet: ModuleType) -> None:
    # The last one was the store's _protocol <-> _fork <-> _codec (Fork lives in _protocol).
    assert ratchet.circles() == []


def test_task_sites_are_told_apart_by_their_owner(ratchet: ModuleType) -> None:
    kind = ratchet.site_kind
    assert kind("t = asyncio.create_task(f())") == "bare_task_sites"
    assert kind("t = asyncio.ensure_future(f())") == "bare_task_sites"
    assert kind("t = loop.create_task(f())") == "bare_task_sites"
    assert kind("t = asyncio.get_running_loop().create_task(f())") == "bare_task_sites"
    assert kind("t = group.create_task(f())") == "group_task_sites"
    assert kind("t = self._group.create_task(f())") == "group_task_sites"
    assert kind("t = threading.Thread(target=f)") == "thread_sites"
    sites = ratchet.task_sites()
    assert sites and all(s.startswith("src/") for s in sites)
    assert not any("# create_task(" in s for s in sites)  # a comment is not a site
    figures = ratchet.summary()
    assert figures["import_circles"] == 0 and figures["task_groups"] >= 5
    assert figures["bare_task_sites"] + figures["group_task_sites"] + figures[
        "thread_sites"
    ] == len(sites)


# -- every driver error class has a meaning ------------------------------------------------


def _classes(root: type[BaseException]) -> list[type[BaseException]]:
    out = [root]
    for sub in root.__subclasses__():
        out.extend(c for c in _classes(sub) if c not in out)
    return out


def _sqlite(code: int | None, cls: type[sqlite3.Error], text: str = "boom") -> sqlite3.Error:
    exc = cls(text)
    if code is not None:
        exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    return exc


SQLITE_CODES: dict[int, type[Exception]] = {
    5: LockHeld,  # SQLITE_BUSY: the engine waits, off the loop, then StoreUnavailable
    6: StoreUnavailable,  # SQLITE_LOCKED
    7: StoreUnavailable,  # SQLITE_NOMEM
    10: StoreUnavailable,  # SQLITE_IOERR
    13: StoreUnavailable,  # SQLITE_FULL
    15: StoreUnavailable,  # SQLITE_PROTOCOL
    8: NotADatabase,  # SQLITE_READONLY
    11: NotADatabase,  # SQLITE_CORRUPT
    26: NotADatabase,  # SQLITE_NOTADB
}
"""The result codes that mean something to the store; any other is a bug in its SQL,
raised as it is."""


@pytest.mark.parametrize("cls", _classes(sqlite3.Error), ids=lambda c: c.__name__)
def test_every_sqlite3_error_class_is_classified(cls: type[sqlite3.Error], tmp_path: Path) -> None:
    dialect = SQLiteDialect(tmp_path / "runs.db", str(tmp_path / "runs.db"), "full")
    passing = issubclass(cls, sqlite3.OperationalError | sqlite3.InternalError)
    for code, meaning in SQLITE_CODES.items():
        meant = dialect.classify(_sqlite(code, cls))
        if meaning is StoreUnavailable and not passing:
            # a passing fault is an OperationalError or InternalError; not this class
            assert meant is not None and not isinstance(meant, StoreUnavailable), (code, meant)
        elif meaning is LockHeld and not passing:
            assert not isinstance(meant, StoreUnavailable), (code, meant)
        else:
            assert isinstance(meant, meaning), (cls, code, meant)
    plain = _sqlite(1, cls)  # SQLITE_ERROR: our SQL is wrong
    assert dialect.classify(plain) is plain
    unique = cls("UNIQUE constraint failed: runs.run_id")
    if issubclass(cls, sqlite3.IntegrityError):
        assert isinstance(dialect.classify(unique), DuplicateKey)
    assert dialect.classify(ValueError("not the driver's")) is None


def test_real_sqlite_faults_are_classified(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    dialect = SQLiteDialect(db, str(db), "full")
    one = sqlite3.connect(db, isolation_level=None, timeout=0)
    two = sqlite3.connect(db, isolation_level=None, timeout=0)
    one.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
    one.execute("INSERT INTO t VALUES ('a')")
    seen: list[object] = []
    for conn, sql in [(one, "INSERT INTO t VALUES ('a')"), (two, "BEGIN IMMEDIATE")]:
        if conn is two:
            one.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(sql)
        except sqlite3.Error as exc:
            seen.append(dialect.classify(exc))
    one.execute("ROLLBACK")
    one.close()
    two.close()
    assert isinstance(seen[0], DuplicateKey) and isinstance(seen[1], LockHeld)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(sqlite3.DatabaseError) as caught:
        sqlite3.connect(junk).execute("SELECT * FROM sqlite_master")
    assert isinstance(SQLiteDialect(junk, str(junk), "full").classify(caught.value), NotADatabase)


def test_every_psycopg_error_class_is_classified() -> None:
    import psycopg  # a dev dependency: missing, this fails (no silent skips)
    from psycopg import errors as pg

    from loopkernel.store._postgres import PostgresDialect

    dialect = PostgresDialect("postgresql://127.0.0.1/x")
    classes = _classes(psycopg.Error)
    assert len(classes) > 200  # the SQLSTATE classes are there: the walk saw them
    # What each DB-API category means to the store: a fault that may pass, a duplicate
    # key, or a bug in the store's own SQL (raised as it is, a ``None`` meaning).
    raised_as_is = (
        pg.ProgrammingError,
        pg.DataError,
        pg.IntegrityError,
        pg.InternalError,
        pg.NotSupportedError,
        pg.InterfaceError,
        pg.DatabaseError,
        pg.Warning,
        psycopg.Error,
    )
    for cls in classes:
        meant = dialect.classify(cls("boom"))
        if issubclass(cls, pg.UniqueViolation):
            assert isinstance(meant, DuplicateKey), cls
        elif issubclass(cls, pg.OperationalError | pg.IdleInTransactionSessionTimeout):
            assert isinstance(meant, StoreUnavailable) and isinstance(meant, StoreError), cls
        else:
            assert issubclass(cls, raised_as_is), f"{cls}: a category with no meaning yet"
            assert meant is None, cls
