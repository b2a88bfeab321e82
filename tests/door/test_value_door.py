"""The value door (issue 32, item 1): every value that enters the journal -- run
parameters, approval payloads, task and tool results -- is valid Unicode, finite JSON of
bounded depth and size, checked before anything is journaled. A value an older database
already holds that the door would refuse fails the task that reads it, by name."""

from __future__ import annotations

import asyncio
import math
import subprocess
import time
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lk_helpers import LOOPKERNEL, cli_env
from loopkernel import RunStatus
from loopkernel.client import Answerer, Client, parse_payload
from loopkernel.graph.door import LIMITS, Entry, Rule, ValueRefused, admit, parse
from loopkernel.ids import RunId, TaskId

if TYPE_CHECKING:
    from lk_stores import Backend
    from loopkernel.store import Store


def rule_of(exc: pytest.ExceptionInfo[ValueRefused]) -> str:
    return str(exc.value.attrs["rule"])


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ({"a": "\ud800"}, Rule.NOT_UNICODE),
        (["ok", {"k\udcff": 1}], Rule.NOT_UNICODE),
        ({"a": "nul\x00"}, Rule.NOT_UNICODE),
        ({"a": math.nan}, Rule.NOT_FINITE),
        ([math.inf], Rule.NOT_FINITE),
        ({1: "int key"}, Rule.NOT_JSON),
        ({"a": b"bytes"}, Rule.NOT_JSON),
        ({"a": {1, 2}}, Rule.NOT_JSON),
        ({"a": 10**5000}, Rule.TOO_LARGE),
        ({"a": "x" * (LIMITS[Entry.PARAMS].max_string_bytes + 1)}, Rule.STRING_TOO_LONG),
        (["x" * 1000] * 2000, Rule.TOO_LARGE),
    ],
)
def test_the_door_refuses_by_a_named_rule(value: Any, rule: Rule) -> None:
    with pytest.raises(ValueRefused) as info:
        admit(value, Entry.PARAMS)
    assert rule_of(info) == rule


def test_a_value_nested_100000_deep_is_refused_not_a_recursion_error() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueRefused) as info:
        admit(deep, Entry.PARAMS)
    assert rule_of(info) == Rule.TOO_DEEP
    for text in ("[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000):
        with pytest.raises(ValueRefused) as info:
            parse(text, Entry.PARAMS)
        assert rule_of(info) == Rule.TOO_DEEP
    # brackets inside strings are text, not nesting
    assert parse('{"a": "' + "[" * 1000 + '"}', Entry.PAYLOAD) == {"a": "[" * 1000}


def test_text_is_parsed_strictly() -> None:
    for text, rule in [
        ('{"a": NaN}', Rule.NOT_FINITE),
        ('{"a": -Infinity}', Rule.NOT_FINITE),
        ('{"a": "\\ud800"}', Rule.NOT_UNICODE),
        (b'{"a": "\xff"}', Rule.NOT_UNICODE),
        ("{nope", Rule.NOT_JSON),
        (" " * (64 * 1024 + 1), Rule.TOO_LARGE),
    ]:
        with pytest.raises(ValueRefused) as info:
            parse(text, Entry.PAYLOAD)
        assert rule_of(info) == rule, text
    assert parse('{"a": "é\\u00e9", "b": [1.5, null, true]}', Entry.PAYLOAD) == {
        "a": "éé",
        "b": [1.5, None, True],
    }
    assert parse_payload(b'{"by": "ana"}') == {"by": "ana"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPKERNEL, *args], env=cli_env(), capture_output=True, text=True, timeout=60
    )


def test_the_command_line_refuses_bad_values_with_one_line_and_nothing_journaled(
    backend: Backend,
) -> None:
    url = backend.url
    out = cli("--db", url, "run", "lk_testapps:gate", "--run-id", "g", "--quiet")
    assert out.returncode == 3, out.stderr
    before = backend.run(lambda store: store.events(RunId("g")))
    for payload, rule in [
        ('{"a": "\\ud800"}', "not_unicode"),
        ('{"a": NaN}', "not_finite"),
        ("[" * 100_000, "too_large"),
        ("[" * 1000 + "]" * 1000, "too_deep"),
    ]:
        out = cli("--db", url, "approve", "g", "gate", "--payload", payload)
        assert out.returncode == 2, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and rule in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    after = backend.run(lambda store: store.events(RunId("g")))
    assert after == before  # nothing journaled
    ok = cli("--db", url, "approve", "g", "gate", "--payload", '{"by": "ana é"}')
    assert ok.returncode == 0, ok.stderr
    assert cli("--db", url, "resume", "g", "--quiet").returncode == 0


def test_invalid_utf8_and_deep_json_in_run_parameters_exit_2(tmp_path: Any) -> None:
    db = str(tmp_path / "runs.db")
    for setting in [b"scenario=\xff\xfe", b"x=" + b"[" * 100_000, b"x=NaN"]:
        out = subprocess.run(
            [*LOOPKERNEL, "--db", db, "run", "speculation", "--set", setting],  # type: ignore[list-item]
            env=cli_env(),
            capture_output=True,
            timeout=60,
        )
        err = out.stderr.decode("utf-8", "replace")
        assert out.returncode == 2, err
        assert len(err.strip().splitlines()) == 1 and "refused" in err and "Traceback" not in err
    assert not (tmp_path / "runs.db").exists()  # refused before a database is made


def test_a_50_mb_parameter_is_refused_at_once(backend: Backend) -> None:
    async def go(store: Store) -> float:
        began = time.perf_counter()
        with pytest.raises(ValueRefused) as info:
            await Client(store=store).start("lk_doorapps:gate_v", overrides={"v": "x" * 50_000_000})
        assert rule_of(info) == Rule.STRING_TOO_LONG
        assert await store.list_runs() == []
        return time.perf_counter() - began

    backend.run(go)


def test_a_payload_an_older_database_holds_fails_the_task_that_reads_it(
    backend: Backend,
) -> None:
    """A lone surrogate journaled before the door existed (written here past the door,
    straight into the store): the task that returns it fails with the door's reason;
    the executor and the run's other work are unharmed."""

    async def go(store: Store) -> None:
        client = Client(store=store)
        _, started = await client.start("lk_testapps:gate", run_id="old")
        first = await client.execute(started.run_id)
        assert first.status is RunStatus.WAITING
        await store.add_human_input(
            RunId("old"), TaskId("gate"), decision="approve", payload={"by": "\ud800"}
        )
        outcome = await client.execute("old")
        assert outcome.status is RunStatus.FAILED, outcome
        tasks = {t["task_id"]: t for t in (await client.inspect("old")).tasks}
        error: Any = tasks["gate"]["error"]
        assert tasks["prep"]["state"] == "succeeded"
        assert error["kind"] == "value_refused" and error["rule"] == "not_unicode", error

    backend.run(go)


_KEYS = st.text(max_size=6)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)  # lone surrogates and NUL included
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_VALUES)
def test_any_value_is_refused_at_the_door_or_comes_back_equal_after_a_resume(
    tmp_path_factory: pytest.TempPathFactory, value: Any
) -> None:
    """Run parameters and an approval payload hold the value; after a resume the run's
    parameters and the journaled answer give it back equal, and the run succeeds."""
    db = tmp_path_factory.mktemp("door") / "runs.db"

    async def go() -> None:
        from loopkernel.store import SQLiteStore

        store = SQLiteStore(db)
        await store.open()
        try:
            client = Client(store=store)
            try:
                admit({"v": value}, Entry.PAYLOAD)
            except ValueRefused:
                with pytest.raises(ValueRefused):
                    await client.start("lk_doorapps:gate_v", overrides={"v": value})
                with pytest.raises(ValueRefused):
                    await client.decide(
                        "any",
                        "gate",
                        "approve",
                        payload={"v": value},
                        answerer=Answerer(local=True),
                    )
                assert await store.list_runs() == []
                return
            _, started = await client.start("lk_doorapps:gate_v", overrides={"v": value})
            rid = started.run_id
            assert (await client.execute(rid)).status is RunStatus.WAITING
            await client.decide(
                rid, "gate", "approve", payload={"v": value}, answerer=Answerer(local=True)
            )
            assert (await client.execute(rid)).status is RunStatus.SUCCEEDED
            info = await store.get_run(rid)
            assert info.params["v"] == value
            answers = [e for e in await store.events(rid) if e.kind == "human_input"]
            assert answers[0].data["payload"] == {"v": value}
        finally:
            await store.close()

    asyncio.run(go())


def test_the_limits_are_documented_once_as_they_are() -> None:
    """docs/cli.md's table of the door's limits is ``LIMITS``, row for row."""
    from lk_helpers import ROOT

    text = (ROOT / "docs" / "cli.md").read_text()
    rows = {
        cells[0]: tuple(int(c.replace(",", "")) for c in cells[1:])
        for line in text.split("## Values at the door")[1].splitlines()
        if line.startswith("| ")
        and (cells := [c.strip() for c in line.strip("|").split("|")])
        and cells[1].replace(",", "").isdigit()
    }
    assert rows == {
        e.value: (lim.max_depth, lim.max_bytes, lim.max_string_bytes) for e, lim in LIMITS.items()
    }
