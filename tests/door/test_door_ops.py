"""The door, the rest (issue 24 section 5, issue 25 section 3): each refusal one line with
its documented exit code, nothing left behind, and the printed commands work pasted."""

from __future__ import annotations

import argparse
import io
import json
import logging
import re
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, ROOT, cli_env
from loopkernel.cli._door import setup_logging
from loopkernel.cli._main import build_parser

pytestmark = pytest.mark.slow

DUMP = ROOT / "examples/incidents/oom-payments/dump"


def cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args],
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def one_line(out: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr and "usage:" not in out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


BLOCK_TOOLS = """
import sys

class _NoToolsExtra:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in ("mcp", "jsonschema"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoToolsExtra())
"""


@pytest.fixture
def no_tools_extra(tmp_path: Path) -> dict[str, str]:
    """A subprocess environment where neither ``mcp`` nor ``jsonschema`` imports: the
    ``tools`` extra is not installed."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(BLOCK_TOOLS)
    env = cli_env()
    env["PYTHONPATH"] = f"{shim}:{env['PYTHONPATH']}"
    check = subprocess.run(
        [sys.executable, "-c", "import jsonschema"], env=env, capture_output=True
    )
    assert check.returncode != 0  # the shim works
    return env


@pytest.mark.parametrize(
    "command",
    [
        ["run", "looplab"],
        ["investigate", "why?", "--dump", str(DUMP), "--namespace", "prod"],
    ],
    ids=["run-looplab", "investigate"],
)
def test_without_the_tools_extra_one_line_names_the_install(
    no_tools_extra: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    db = tmp_path / "runs.db"
    out = cli("--db", str(db), *command, env=no_tools_extra, cwd=tmp_path)
    one_line(out, 2, "pip install -e '.[tools]' in a clone", "the built wheel with [tools]")
    assert not db.exists()


def test_serve_on_a_mistyped_database_exits_9_and_creates_nothing(tmp_path: Path) -> None:
    out = cli("--db", str(tmp_path / "typo.db"), "serve", "--port", "0")
    one_line(out, 9, "no LoopKernel database at")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("question", "extra", "message"),
    [
        ("why?", ["--set", "max_rounds=abc"], "max_rounds"),
        ("", [], "question"),
        ("   ", [], "question"),
        ("x" * 100_000, [], "at most 2000 characters"),
    ],
    ids=["bad-set", "empty", "blank", "100k"],
)
def test_investigate_refuses_bad_input_before_a_database_exists(
    tmp_path: Path, question: str, extra: list[str], message: str
) -> None:
    db = tmp_path / "runs.db"
    out = cli(
        "--db", str(db), "investigate", question, "--dump", str(DUMP), "--namespace", "prod",
        *extra,
    )  # fmt: skip
    one_line(out, 2, message)
    assert not db.exists()


def _interrupt(args: list[str], pattern: str, stream: str) -> tuple[int, str]:
    """Start ``loopkernel ARGS``, SIGINT it once a line of ``stream`` matches ``pattern``."""
    proc = subprocess.Popen(
        [*LOOPKERNEL, *args], env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    watched, other = (
        (proc.stdout, proc.stderr) if stream == "stdout" else (proc.stderr, proc.stdout)
    )
    seen = []
    for line in watched:
        seen.append(line)
        if re.search(pattern, line):
            break
    proc.send_signal(signal.SIGINT)
    rest = watched.read()
    other_text = other.read()
    proc.stdout.close()
    proc.stderr.close()
    code = proc.wait(60)
    err = other_text if stream == "stdout" else "".join(seen) + rest
    return code, err


def test_ctrl_c_prints_a_resume_command_that_works_pasted(tmp_path: Path) -> None:
    db = str(tmp_path / "elsewhere.db")
    code, err = _interrupt(
        ["--db", db, "run", "lk_workers:relay", "--set", "hang=b", "--run-id", "hc"],
        r"task_completed\s+a\b",
        "stdout",
    )
    assert code == 130, err
    last = err.strip().splitlines()[-1]
    assert last == f"loopkernel: interrupted; resume with: loopkernel --db {db} resume hc"
    pasted = last.split("resume with: ", 1)[1].split()[1:]  # the command, without its name
    out = cli(*pasted)
    assert out.returncode == 0, out.stderr  # resumed from the database it names: succeeded
    assert "run hc: succeeded" in out.stdout


def test_investigate_prints_the_resume_command_on_ctrl_c(tmp_path: Path) -> None:
    db = str(tmp_path / "sre.db")
    code, err = _interrupt(
        [
            "--db", db, "investigate", "why is payments restarting?", "--dump", str(DUMP),
            "--namespace", "prod", "--run-id", "inv",
        ],
        r"^run inv started",
        "stderr",
    )  # fmt: skip
    assert code == 130, err
    assert err.strip().splitlines()[-1] == (
        f"loopkernel: interrupted; resume with: loopkernel --db {db} resume inv"
    )
    assert "Traceback" not in err


def test_wait_after_a_local_approval_says_who_takes_it_up(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    assert cli("--db", db, "run", "lk_testapps:gate", "--run-id", "g").returncode == 3
    before = cli("--db", db, "wait", "g")
    assert before.returncode == 3
    assert "waiting for a human: task gate: ship it?" in before.stdout
    assert f"else: loopkernel --db {db} resume g" in before.stdout
    assert cli("--db", db, "approve", "g", "gate").returncode == 0
    after = cli("--db", db, "wait", "g")
    assert after.returncode == 3
    assert "waiting for a human" not in after.stdout
    assert "task gate: answered, not taken up yet" in after.stdout
    assert f"else: loopkernel --db {db} resume g" in after.stdout
    data = json.loads(cli("--db", db, "wait", "g", "--json").stdout)
    assert data["waiting"] == [
        {"task_id": "gate", "reason": "ship it?", "kind": "human", "until": None, "answered": True}
    ]
    assert cli("--db", db, "resume", "g").returncode == 0


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("[1,2]", "must be a JSON object ({...}), not an array"),
        ('"yes"', "not a string"),
        ("3", "not a number"),
        (json.dumps({"note": "x" * 70_000}), "at most 65536 bytes"),
    ],
    ids=["array", "string", "number", "70k"],
)
def test_an_approval_payload_is_a_bounded_json_object(
    tmp_path: Path, payload: str, message: str
) -> None:
    db = str(tmp_path / "runs.db")
    assert cli("--db", db, "run", "lk_testapps:gate", "--run-id", "g").returncode == 3
    one_line(cli("--db", db, "approve", "g", "gate", "--payload", payload), 2, message)
    events = json.loads(cli("--db", db, "inspect", "g", "--json").stdout)["journal"]
    assert "human_input" not in [e["kind"] for e in events]  # nothing journaled
    ok = cli("--db", db, "approve", "g", "gate", "--payload", '{"by": "ops"}')
    assert ok.returncode == 0, ok.stderr


REFUSALS = [
    [],
    ["nope"],
    ["run"],
    ["run", "speculation", "--concurrency", "0"],
    ["run", "speculation", "--max-events", "1"],
    ["run", "speculation", "--set", "novalue"],
    ["run", "speculation", "--planner", "magic"],
    ["resume"],
    ["resume", "a/b"],
    ["approve", "r"],
    ["approve", "r", "t", "--payload", "{nope"],
    ["inspect", "r", "--at", "x"],
    ["runs", "--limit", "0"],
    ["runs", "--status", "sleeping"],
    ["runs", "--since", "yesterday"],
    ["export", "r"],
    ["wait", "r", "--timeout", "-1"],
    ["worker", "--lease", "0"],
    ["fork", "r"],
    ["prune"],
    ["prune", "--older-than", "soon"],
    ["delete"],
    ["completion", "zsh"],
    ["serve", "--port", "70000"],
    ["investigate", "why?"],
    ["tools"],
]


@pytest.mark.parametrize("args", REFUSALS, ids=lambda a: " ".join(a) or "(none)")
def test_every_refused_command_line_is_one_line_with_exit_2(
    tmp_path: Path, args: list[str]
) -> None:
    out = cli(*args, cwd=tmp_path)
    one_line(out, 2, "error:", "--help)")
    assert list(tmp_path.iterdir()) == []


def test_verbose_adds_the_usage_block_to_a_refusal(tmp_path: Path) -> None:
    out = cli("--verbose", "run", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0].startswith("loopkernel run: error: the following")
    assert "usage: loopkernel run" in out.stderr


def test_a_library_warning_is_one_line_and_verbose_shows_all_of_it() -> None:
    def emit(argv: list[str]) -> str:
        args = build_parser(app_commands=False).parse_args(argv)
        err = io.StringIO()
        with redirect_stderr(err):
            setup_logging(args)
            try:
                raise ConnectionError("connection refused\nIs the server running?")
            except ConnectionError:
                logging.getLogger("lk_test.pool").warning(
                    "error connecting in 'pool-1':\n  attempt 1\n  attempt 2", exc_info=True
                )
            logging.getLogger("lk_test.pool").info("a detail")
        logging.getLogger().handlers.clear()
        return err.getvalue()

    quiet = emit(["runs"])
    assert quiet.splitlines() == [
        "loopkernel: lk_test.pool: error connecting in 'pool-1': | attempt 1 | attempt 2"
    ]
    loud = emit(["run", "speculation", "--verbose"])
    assert "Traceback" in loud and "Is the server running?" in loud and "a detail" in loud
    assert emit(["resume", "r", "--log-level", "error"]) == ""


def test_looplab_dir_is_the_owner_s_only_whatever_the_umask(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    env = cli_env(LOOPLAB_DIR=str(lab))
    proc = subprocess.run(
        ["sh", "-c", 'umask 000 && exec "$@"', "sh", *LOOPKERNEL, "--db", str(tmp_path / "r.db"),
         "run", "looplab", "--quiet"],
        env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert lab.is_dir() and (lab.stat().st_mode & 0o777) == 0o700
    for path in lab.rglob("*"):
        assert path.stat().st_mode & 0o077 == 0, path


def test_version_is_the_installed_one() -> None:
    from importlib.metadata import version

    out = cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"loopkernel {version('loopkernel')}"


def test_verbose_and_log_level_are_taken_where_the_issue_asks() -> None:
    parser = build_parser(app_commands=False)
    for argv in (
        ["run", "speculation", "--verbose", "--log-level", "debug"],
        ["resume", "r", "-v"],
        ["worker", "--log-level", "info"],
        ["serve", "--verbose"],
        ["--verbose", "runs"],
    ):
        args = parser.parse_args(argv)
        assert isinstance(args, argparse.Namespace)
        assert args.verbose or args.log_level, argv


def test_store_retry_is_a_bound_on_the_total(tmp_path: Path) -> None:
    """Each attempt's lock wait counts in ``store_retry``: the client gives up within the
    bound, not at a deadline that each attempt may overrun by a whole busy timeout."""
    import asyncio
    import sqlite3

    from loopkernel import SQLiteStore
    from loopkernel.client import Client, Listeners
    from loopkernel.errors import StoreUnavailable
    from loopkernel.executor import ExecutionConfig

    db = tmp_path / "runs.db"
    busy, bound = 1.0, 2.0
    pauses: list[float] = []
    elapsed: list[float] = []

    async def go() -> str:
        store = SQLiteStore(db, lock_wait_s=busy)
        await store.open()
        try:
            client = Client(store=store)
            _, started = await client.start("lk_testapps:gate", run_id="g")
            locker = sqlite3.connect(db, isolation_level=None, timeout=30)
            locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            try:
                began = time.monotonic()
                with pytest.raises(StoreUnavailable) as caught:
                    await client.execute(
                        started.run_id,
                        config=ExecutionConfig(store_retry_s=bound),
                        listeners=Listeners(on_retry=lambda e, p: pauses.append(p)),
                    )
                elapsed.append(time.monotonic() - began)
            finally:
                locker.execute("ROLLBACK")
                locker.close()
            return str(caught.value)
        finally:
            await store.close()

    message = asyncio.run(go())
    assert "gave up after 2 s of retries" in message
    assert pauses  # it did retry
    # the lock waits and the pauses between attempts add up to the bound; one more busy
    # timeout past it is what an attempt that does not count its lock wait would take
    assert elapsed[0] < bound + busy / 2, (elapsed, pauses)


def test_a_printed_command_never_repeats_a_database_password() -> None:
    from loopkernel.cli._door import resume_command

    url = "postgresql://ops:s3cret@db.internal:5432/runs?sslmode=require"
    line = resume_command(argparse.Namespace(db=url), "r1")
    assert "s3cret" not in line
    assert line == (
        "loopkernel --db 'postgresql://ops:PASSWORD@db.internal:5432/runs?sslmode=require' "
        "resume r1"
    )
    assert resume_command(argparse.Namespace(db="/tmp/a b.db"), "r1") == (
        "loopkernel --db '/tmp/a b.db' resume r1"
    )
    assert resume_command(argparse.Namespace(db=None), "r1") == "loopkernel resume r1"
