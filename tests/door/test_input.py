"""Input checked at the door: bad ids, bad parameters and bad flags are refused with one
line and exit 2 before anything is written (issue 8, section 3)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel import GraphPatch, Kernel, SQLiteStore, TaskSpec, UsageError
from loopkernel.client import Client
from loopkernel.errors import PatchRejected
from loopkernel.graph import GraphState, validate
from loopkernel.ids import RunId, check_id, valid_id
from loopkernel_apps.looplab.tools import file_stem, record_path

pytestmark = pytest.mark.slow


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(), capture_output=True, text=True, timeout=60, cwd=cwd
    )


def refused(out: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit 2, the message on stderr in one line, no traceback, nothing on stdout."""
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stdout == ""


BAD_IDS = ["a/b", "../escape", "x" * 300, "", " lead", "a b", "-dash", "x" * 10_000]


@pytest.mark.parametrize("bad", BAD_IDS, ids=lambda s: repr(s[:12]))
def test_a_bad_run_id_is_refused_before_the_database_exists(tmp_path: Path, bad: str) -> None:
    db = tmp_path / "runs.db"
    for command in ("run", "submit"):
        out = cli("--db", str(db), command, "speculation", f"--run-id={bad}")
        refused(out, "run id")
        assert not db.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["inspect", "resume", "cancel", "wait", "export"])
def test_every_command_checks_the_run_id_it_is_given(tmp_path: Path, command: str) -> None:
    extra = ["--to", str(tmp_path / "out.db")] if command == "export" else []
    refused(cli("--db", str(tmp_path / "runs.db"), command, "../escape", *extra), "run id")
    out = cli("--db", str(tmp_path / "runs.db"), "approve", "r1", "a/b")
    refused(out, "task id")
    assert list(tmp_path.iterdir()) == []


def test_the_id_grammar() -> None:
    assert all(valid_id(x) for x in ["a", "run-1", "plan:2", "A.b_c-d:e", "x" * 128])
    assert not any(valid_id(x) for x in [*BAD_IDS, "x" * 129, "é", "a\n", None, 3])
    with pytest.raises(UsageError, match="empty"):
        check_id("")
    with pytest.raises(UsageError, match="300 characters"):
        check_id("x" * 300)


def test_the_api_refuses_bad_ids_before_writing(tmp_path: Path) -> None:
    async def go() -> None:
        store = SQLiteStore(tmp_path / "runs.db")
        await store.open()
        kernel = Kernel(store, _Nothing(), {})
        for bad in BAD_IDS:
            with pytest.raises(UsageError):
                await kernel.start(app="t", run_id=bad)
            with pytest.raises(UsageError):
                await Client(store=store).start("speculation", run_id=bad)
        assert await store.list_runs() == []
        with pytest.raises(UsageError, match="run id"):
            await Client(store=store).inspect("a/b")
        await store.close()

    asyncio.run(go())


def test_a_patch_with_a_bad_task_id_is_rejected_whole() -> None:
    state = GraphState(run_id=RunId("r"), app="t", params=None)
    for bad in ["a/b", "", "x" * 200, "../t"]:
        patch = (
            GraphPatch()
            .add(TaskSpec(task_id="ok", skill="w"))
            .add(TaskSpec(task_id=bad, skill="w"))
        )
        with pytest.raises(PatchRejected) as info:
            validate(state, patch, {"w"})
        assert info.value.rule == "bad_task_id"  # type: ignore[attr-defined]


def test_looplab_never_builds_a_path_from_a_raw_run_id(tmp_path: Path) -> None:
    stems = {file_stem(r) for r in ["a.b", "a_b", "a:b", "a-b", "A.b"]}
    assert len(stems) == 5  # distinct runs, distinct records, even when they look alike
    for hostile in ["../escape", "a/b", "/etc/passwd", "x" * 10_000]:
        path = record_path(tmp_path, hostile)
        assert path.parent == tmp_path and len(path.name) < 100


@pytest.mark.parametrize(
    ("app", "setting", "message"),
    [
        ("speculation", "quorum={bad", "parameter quorum must be a whole number"),
        ("speculation", "quorum=0", "parameter quorum must be >= 1"),
        ("speculation", "delays=[1, -2]", "parameter delays[1] must be >= 0"),
        ("speculation", 'delays="x"', "parameter delays must be a JSON list"),
        ("looplab", "act_delay=-5", "parameter act_delay must be >= 0"),
        ("looplab", 'act_delay="x"', "parameter act_delay must be a number"),
        ("looplab", "inject=nope", "parameter inject must be one of"),
        ("looplab", "slow_step=99", "parameter slow_step must be <= 3"),
        ("looplab", "fault=oops", "parameter fault must be one of"),
        ("looplab", "tool_timeout=0", "parameter tool_timeout must be >="),
    ],
)
def test_bad_parameters_are_refused_before_the_run_is_journaled(
    tmp_path: Path, app: str, setting: str, message: str
) -> None:
    db = tmp_path / "runs.db"
    for command in ("run", "submit"):
        out = cli("--db", str(db), command, app, "--set", setting)
        refused(out, message)
        assert len(out.stderr.strip().splitlines()) == 1
    assert not db.exists()


def test_a_zero_concurrency_does_not_journal_an_orphan_run(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    refused(cli("--db", str(db), "run", "speculation", "--concurrency", "0"), "at least 1")
    refused(cli("--db", str(db), "worker", "--concurrency", "0"), "at least 1")
    refused(cli("--db", str(db), "wait", "r", "--interval", "0"), "must be > 0")
    assert not db.exists()


class _Nothing:
    def plan(self, snapshot: object, event: object) -> GraphPatch:
        return GraphPatch()
