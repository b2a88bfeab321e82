"""The investigation service without a browser: the scope table, the limits, the archive
rules, and ask -> follow-up on both stores (the follow-up sends no tool call for evidence
that is still current, and none of it when the dump changed)."""

from __future__ import annotations

import asyncio
import json
import os
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from lk_service import ALICE, CASE, member, people_file, tar_with
from lk_sre import incident
from lk_stores import Backend
from loopkernel import UsageError
from loopkernel.client import Client
from loopkernel_apps.sre._archive import ArchiveRefused, unpack
from loopkernel_apps.sre._people import ScopeRefused, check_scope, load_people
from loopkernel_apps.sre._service import Investigations

Q = "why is the payments deployment restarting?"


def test_scope_is_checked_before_anything_is_read(tmp_path: Path) -> None:
    people = load_people(people_file(tmp_path))
    alice, bob = people.user("alice"), people.user("bob")
    check_scope(alice, "prod", Q)
    with pytest.raises(ScopeRefused, match="bob may not investigate namespace prod"):
        check_scope(bob, "prod", Q)
    with pytest.raises(ScopeRefused, match="names namespace kube-system"):
        check_scope(alice, "prod", "is kube-system involved?")
    with pytest.raises(ScopeRefused, match="may not read cluster eu"):
        check_scope(alice, "prod", Q, "eu")
    with pytest.raises(ScopeRefused, match="not a user"):
        people.user("mallory")
    assert people.by_token(ALICE) == alice
    assert people.by_token("alice-token-for-the-service-test") is None


def test_a_bad_table_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"users": {"x": {"token": "short", "namespaces": ["a"]}}}')
    with pytest.raises(UsageError, match="at least 16 characters"):
        load_people(bad)
    bad.write_text('{"users": {"x": {"namespaces": "a"}}}')
    with pytest.raises(UsageError, match="namespaces must be a list"):
        load_people(bad)


def test_archives_are_refused_whole_before_a_byte_is_written(tmp_path: Path) -> None:
    ok = member("dump/nodes.json")
    cases = [
        (tar_with(tmp_path / "1.tgz", ok, member("../x")), "'..'"),
        (tar_with(tmp_path / "2.tgz", ok, member("/abs")), "absolute"),
        (tar_with(tmp_path / "3.tgz", ok, member("dump/l", tarfile.SYMTYPE, "/")), "symbolic"),
        (tar_with(tmp_path / "4.tgz", ok, member("dump/h", tarfile.LNKTYPE, "x")), "hard link"),
        (tar_with(tmp_path / "5.tgz", ok, member("dump/f", tarfile.FIFOTYPE)), "device"),
        (tar_with(tmp_path / "6.tgz", ok, data=b"x" * 5000), "unpacks to over"),
    ]
    link = tmp_path / "7.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo("dump/link")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    cases.append((link, "symbolic"))
    bomb = tmp_path / "8.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("dump/zeros", b"\0" * 100_000)
    cases.append((bomb, "unpacks to over"))
    for n, (archive, words) in enumerate(cases):
        into = tmp_path / f"out{n}"
        with pytest.raises(ArchiveRefused, match=words) as caught:
            unpack(archive, into, max_unpacked_bytes=4096)
        assert "\n" not in str(caught.value)
        assert not into.exists()  # nothing of it kept
    good = unpack(tar_with(tmp_path / "g.tgz", ok), tmp_path / "good", max_unpacked_bytes=4096)
    assert good == tmp_path / "good" / "dump" and (good / "nodes.json").read_bytes() == b"{}"
    assert (good / "nodes.json").stat().st_mode & 0o777 == 0o600


async def _ask_and_follow(url: str, tmp: Path, touch: bool) -> dict[str, Any]:
    dump = tmp / "dump"
    import shutil

    shutil.copytree(incident(CASE)["dump"], dump)
    async with Client(url) as client:
        svc = Investigations(client, load_people(people_file(tmp)))
        first = await svc.ask(user="alice", question=Q, namespace="prod", dump=str(dump))
        assert (await client.execute(first)).status.value == "succeeded"
        if touch:  # the dump changed since: nothing read before is current
            later = time.time() + 5
            os.utime(dump / "prod" / "pods.json", (later, later))
        second = await svc.follow_up(user="alice", parent=first, question="and its logs?")
        with pytest.raises(ScopeRefused):
            await svc.follow_up(user="bob", parent=first, question="and its logs?")
        assert (await client.execute(second)).status.value == "succeeded"
        thread = await svc.thread(second)
        info = await client.info(second)
        return {
            "first": len(await client.effects(first)),
            "second": len(await client.effects(second)),
            "thread": [(t.run_id, t.parent, t.asked_by) for t in thread],
            "ids": (first, second),
            "service": info.params["service"],  # type: ignore[index, call-overload]
        }


@pytest.mark.parametrize("touch", [False, True], ids=["unchanged", "changed"])
def test_a_follow_up_reuses_current_evidence_on_both_stores(
    backend: Backend, tmp_path: Path, touch: bool
) -> None:
    got = asyncio.run(_ask_and_follow(backend.url, tmp_path, touch))
    first, second = got["ids"]
    assert got["thread"] == [(first, None, "alice"), (second, first, "alice")]
    assert got["service"]["history"][0]["question"] == Q
    assert got["service"]["asked_by"] == "alice" and got["service"]["parent"] == first
    if touch:
        assert got["service"]["reuse"] == [] and got["second"] == got["first"]
    else:
        assert len(got["service"]["reuse"]) == got["first"] > 0 and got["second"] == 0


async def _limited(url: str, tmp: Path) -> list[str]:
    refused = []
    async with Client(url) as client:
        svc = Investigations(client, load_people(people_file(tmp, per_hour=3, max_queued=2)))
        for _ in range(3):
            try:
                await svc.ask(
                    user="alice", question=Q, namespace="prod", dump=incident(CASE)["dump"]
                )
            except ScopeRefused as exc:
                refused.append(str(exc))
        runs = await client.list_runs(10)
        await client.execute(runs[0].run_id)
        await client.execute(runs[1].run_id)
        for _ in range(2):
            try:
                await svc.ask(
                    user="alice", question=Q, namespace="prod", dump=incident(CASE)["dump"]
                )
            except ScopeRefused as exc:
                refused.append(str(exc))
    return refused


def test_queue_and_rate_limits_per_user_are_counted_from_the_store(
    backend: Backend, tmp_path: Path
) -> None:
    refused = asyncio.run(_limited(backend.url, tmp_path))
    assert refused == [
        "refused: alice has 2 questions not finished (at most 2); wait for one to end",
        "refused: alice asked 3 questions in the last hour (at most 3)",
    ]


def test_the_command_line_refuses_out_of_scope_before_a_database_exists(tmp_path: Path) -> None:
    from loopkernel.testing import run_cli

    table = people_file(tmp_path)
    case = incident(CASE)
    args = ["investigate", Q, "--dump", case["dump"], "--namespace", "prod", "--submit"]
    out = run_cli([*args, "--user", "bob", "--people", str(table)], db=tmp_path / "runs.db")
    assert out.returncode == 2, out.stderr
    assert "refused: bob may not investigate namespace prod" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs.db").exists()
    asked = run_cli(
        [*args, "--user", "alice", "--people", str(table), "--json"], db=tmp_path / "runs.db"
    )
    assert asked.returncode == 0, asked.stderr
    got = json.loads(asked.stdout)
    assert got["asked_by"] == "alice"
    shown = run_cli(["inspect", got["run_id"], "--json"], db=tmp_path / "runs.db")
    assert json.loads(shown.stdout)["params"]["service"]["asked_by"] == "alice"
