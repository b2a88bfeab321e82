"""``loopkernel fork`` and ``inspect --at``: a run from a prefix of another's journal.

The replay is checked against the store itself (a run replayed to its last event is its
materialized state), then forks are resumed and compared by digest with the original,
on both stores.
"""

from __future__ import annotations

from typing import Any

import pytest

from lk_stores import Backend
from loopkernel.client import Answerer, Client
from loopkernel.errors import UsageError
from loopkernel.graph import RunStatus
from loopkernel.store import Store
from loopkernel.testing import run_cli

pytestmark = pytest.mark.slow


async def _finished(client: Client, app: str, run_id: str, scenario: str) -> None:
    await client.start(app, scenario=scenario, run_id=run_id)
    await client.execute(run_id)


def _run(backend: Backend, body: Any) -> Any:
    async def go(store: Store) -> Any:
        return await body(Client(store=store))

    return backend.run(go)


@pytest.mark.parametrize(("app", "scenario"), [("speculation", "fast"), ("looplab", "baseline")])
def test_a_run_replayed_to_its_last_event_is_its_materialized_state(
    backend: Backend, app: str, scenario: str
) -> None:
    async def body(client: Client) -> tuple[Any, Any]:
        await _finished(client, app, "orig", scenario)
        now = await client.inspect("orig")
        past = await client.inspect("orig", at=now.info.last_seq)
        return now, past

    now, past = _run(backend, body)
    assert past.tasks == now.tasks
    assert past.edges == now.edges
    assert past.info.status is now.info.status
    assert past.digest == now.digest


def test_each_speculation_fork_resumes_to_the_original_digest(backend: Backend) -> None:
    async def body(client: Client) -> tuple[str, list[tuple[int, str, str]]]:
        await _finished(client, "speculation", "orig", "fast")
        original = await client.inspect("orig")
        out = []
        for seq in range(1, original.info.last_seq + 1):
            fork = await client.fork("orig", at=seq, new_run_id=f"fork-{seq}")
            outcome = await client.execute(fork.run_id)
            got = await client.inspect(fork.run_id)
            assert got.origin == ("orig", seq)
            out.append((seq, outcome.status.value, got.digest))
        assert (await client.inspect("orig")).digest == original.digest  # untouched
        return original.digest, out

    digest, forks = _run(backend, body)
    assert len(forks) == 7
    for seq, status, got in forks:
        assert (seq, status, got) == (seq, "succeeded", digest)


def test_a_looplab_fork_before_the_approval_can_be_rejected_instead(backend: Backend) -> None:
    async def body(client: Client) -> dict[str, Any]:
        await client.start("looplab", scenario="irreversible", run_id="orig")
        waiting = await client.execute("orig")
        assert waiting.status is RunStatus.WAITING
        (parked,) = await client.waiting("orig")
        asked = (await client.info("orig")).last_seq
        await client.decide("orig", parked.task_id, "approve", answerer=Answerer(local=True))
        assert (await client.execute("orig")).status is RunStatus.SUCCEEDED
        before = (await client.inspect("orig", journal=True)).to_json()

        fork = await client.fork("orig", at=asked, new_run_id="no")
        assert (await client.info("no")).status is RunStatus.WAITING
        await client.decide("no", parked.task_id, "reject", answerer=Answerer(token=fork.token))
        outcome = await client.execute("no")
        after = (await client.inspect("orig", journal=True)).to_json()
        forked = (await client.inspect("no", journal=True)).to_json()
        return {"before": before, "after": after, "fork": forked, "outcome": outcome, "at": asked}

    got = _run(backend, body)
    assert got["outcome"].status is RunStatus.CANCELLED
    assert got["after"] == got["before"]
    fork, original, at = got["fork"], got["before"], got["at"]
    assert fork["forked_from"] == {"run_id": "orig", "seq": at}
    assert fork["journal"][:at] == original["journal"][:at]
    assert fork["journal"][at]["kind"] == "human_input"
    assert fork["journal"][at]["data"]["decision"] == "reject"
    # The effects of work finished before the fork are the fork's own, under its keys;
    # nothing the original did after the fork point was copied.
    assert fork["patches"][:at] == original["patches"][:at]


def test_a_fork_keeps_finished_effects_under_its_own_keys(backend: Backend) -> None:
    async def body(client: Client) -> tuple[Any, Any, int]:
        await _finished(client, "looplab", "orig", "baseline")
        events = (await client.inspect("orig", journal=True)).events or []
        at = next(e.seq for e in events if e.task_id == "act:2.1")
        await client.fork("orig", at=at, new_run_id="f")
        return await client.store.effects("orig"), await client.store.effects("f"), at

    original, forked, _ = _run(backend, body)
    assert forked, "the fork keeps the effects of the tasks finished by then"
    assert all(e.key.startswith("f/") and e.run_id == "f" for e in forked)
    assert {(e.task_id, e.call_index) for e in forked} < {
        (e.task_id, e.call_index) for e in original
    }
    assert all(e.status == "done" for e in forked)


def test_bad_forks_are_refused(lite_backend: Backend) -> None:
    async def body(client: Client) -> list[str]:
        await _finished(client, "speculation", "orig", "fast")
        errors = []
        for kwargs in ({"at": 99}, {"at": 3, "new_run_id": "orig"}):
            with pytest.raises(UsageError) as exc:
                await client.fork("orig", **kwargs)
            errors.append(str(exc.value))
        await client.fork("orig", at=2, new_run_id="taken")
        with pytest.raises(UsageError) as exc:
            await client.fork("orig", at=2, new_run_id="taken")
        errors.append(str(exc.value))
        return errors

    errors = _run(lite_backend, body)
    assert "no event #99" in errors[0]
    assert "a run id of its own" in errors[1]
    assert "already exists" in errors[2]


def test_the_cli_forks_and_inspects_as_of_a_seq(lite_backend: Backend) -> None:
    def cli(*args: str) -> Any:
        return run_cli(args, db=lite_backend.url)

    assert cli("run", "speculation", "--scenario", "fast", "--run-id", "o").returncode == 0
    shown = cli("inspect", "o", "--at", "3")
    assert shown.returncode == 6  # as of #3 the run was still running
    assert "as of:   event #3" in shown.stdout
    forked = cli("fork", "o", "--at", "3", "--run-id", "o2")
    assert forked.returncode == 0, forked.stderr
    assert "forked from o at event #3" in forked.stdout
    assert "next: loopkernel --db " in forked.stdout and " resume o2" in forked.stdout
    assert cli("resume", "o2", "--quiet").returncode == 0
    shown = cli("inspect", "o2")
    assert "forked:  from o at event #3" in shown.stdout
    bad = cli("fork", "o", "--at", "0")
    assert bad.returncode == 2
    missing = cli("fork", "nope", "--at", "1")
    assert missing.returncode == 2
    assert "no run nope" in missing.stderr


def test_runs_filters_by_status_and_app(lite_backend: Backend) -> None:
    def cli(*args: str) -> Any:
        return run_cli(args, db=lite_backend.url)

    assert cli("run", "speculation", "--scenario", "fast", "--run-id", "a").returncode == 0
    assert cli("fork", "a", "--at", "2", "--run-id", "b").returncode == 0  # left running
    done = cli("runs", "--status", "succeeded")
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["a"]
    running = cli("runs", "--status", "running", "--app", "speculation")
    assert [line.split()[0] for line in running.stdout.splitlines()] == ["b"]
    assert cli("runs", "--app", "looplab").stdout == ""
    assert cli("runs", "--status", "bogus").returncode == 2
