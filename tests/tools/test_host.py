"""The server host: defs served verbatim, both schemas enforced, the idempotency key honoured."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loopkernel import UsageError
from loopkernel.tools import (
    CallInfo,
    KeyLedger,
    SourceSession,
    ToolHost,
    ToolSource,
    load_tool_defs,
    read_ledger,
)
from loopkernel.tools._host import _Refused
from loopkernel.tools.testkit import FAULTS_DEFS, RECORD_DEFS
from loopkernel.tools.testkit.faults import build_host as faults_host
from loopkernel.tools.testkit.record import build_host as record_host


def invoke(host: ToolHost, name: str, args: dict[str, Any], key: str | None = None) -> Any:
    return asyncio.run(host.invoke(name, args, CallInfo(tool=name, key=key)))


def refused(host: ToolHost, name: str, args: dict[str, Any], key: str | None = None) -> _Refused:
    with pytest.raises(_Refused) as info:
        invoke(host, name, args, key)
    return info.value


def test_the_server_refuses_output_that_breaks_its_schema() -> None:
    err = refused(faults_host(), "wrong_type", {})
    assert err.kind == "invalid_output"
    assert "'0.40' is not of type 'number'" in err.message


def test_the_server_checks_arguments_too() -> None:
    host = faults_host()
    assert invoke(host, "echo", {"text": "hi"}) == {"text": "hi"}
    err = refused(host, "echo", {"text": 5})
    assert err.kind == "invalid_arguments" and "$.text" in err.message
    assert refused(host, "echo", {"text": "a", "x": 1}).kind == "invalid_arguments"
    assert refused(host, "nope", {}).kind == "unknown_tool"


def test_a_raising_handler_becomes_a_handler_error_with_its_message() -> None:
    err = refused(faults_host(), "fail", {"message": "disk on fire"})
    assert err.kind == "handler_error"
    assert err.message == "fail: RuntimeError: disk on fire"


def test_plain_functions_are_handlers_too(tmp_path: Path) -> None:
    host = faults_host()
    marker = tmp_path / "marker"
    marker.write_text("")
    assert invoke(host, "crash_once", {"marker": str(marker)}) == {"survived": True}


def test_output_that_is_not_json_is_refused() -> None:
    host = ToolHost(load_tool_defs(FAULTS_DEFS))
    host.add("fail", lambda args, call: {"x": float("nan")})
    assert refused(host, "fail", {}).kind == "invalid_output"


def test_registration_is_checked_against_the_defs() -> None:
    host = ToolHost(load_tool_defs(FAULTS_DEFS))
    with pytest.raises(UsageError, match="declares no tool 'nope'"):
        host.add("nope", lambda args, call: {})
    host.add("echo", lambda args, call: args)
    with pytest.raises(UsageError, match="already has a handler"):
        host.add("echo", lambda args, call: args)
    with pytest.raises(UsageError, match="no handler for wrong_type"):
        host.check_complete()


def test_a_repeated_key_gets_the_first_answer_and_writes_once(tmp_path: Path) -> None:
    path = tmp_path / "record.jsonl"
    host = record_host(path)
    first = invoke(host, "record", {"entry": "a"}, key="r/t/0")
    again = invoke(host, "record", {"entry": "a"}, key="r/t/0")
    other = invoke(host, "record", {"entry": "b"}, key="r/t/1")
    assert first == again == {"seq": 1, "entry": "a"}
    assert other == {"seq": 2, "entry": "b"}
    assert [e["key"] for e in read_ledger(path)] == ["r/t/0", "r/t/1"]
    # a new server process (a restart) remembers every key its predecessor wrote
    assert invoke(record_host(path), "record", {"entry": "a"}, key="r/t/0") == first
    assert len(read_ledger(path)) == 2


def test_calls_without_a_key_are_not_deduplicated(tmp_path: Path) -> None:
    host = record_host(tmp_path / "r.jsonl")
    invoke(host, "record", {"entry": "a"})
    invoke(host, "record", {"entry": "a"})
    assert [e["result"]["seq"] for e in read_ledger(tmp_path / "r.jsonl")] == [1, 2]


def test_duplicate_refuse_is_one_line() -> None:
    host = ToolHost(load_tool_defs(RECORD_DEFS))
    ledger = KeyLedger()  # in memory
    host.add("record", lambda args, call: {"seq": 1, "entry": "x"}, once=ledger, duplicate="refuse")
    invoke(host, "record", {"entry": "x"}, key="k")
    err = refused(host, "record", {"entry": "x"}, key="k")
    assert err.kind == "duplicate_key" and "'k'" in err.message
    assert len(ledger) == 1


def test_a_failed_or_refused_call_journals_nothing(tmp_path: Path) -> None:
    host = ToolHost(load_tool_defs(RECORD_DEFS))
    ledger = KeyLedger(tmp_path / "l.jsonl")
    host.add("record", lambda args, call: {"seq": "one", "entry": "x"}, once=ledger)
    assert refused(host, "record", {"entry": "x"}, key="k").kind == "invalid_output"
    assert "k" not in ledger and read_ledger(tmp_path / "l.jsonl") == []


def test_concurrent_calls_with_one_key_run_the_handler_once() -> None:
    host = ToolHost(load_tool_defs(RECORD_DEFS))
    ledger = KeyLedger()
    runs = []

    async def slow_append(args: dict[str, Any], call: CallInfo) -> Any:
        runs.append(call.key)
        await asyncio.sleep(0.05)
        return {"seq": len(ledger) + 1, "entry": args["entry"]}

    host.add("record", slow_append, once=ledger)

    async def both() -> list[Any]:
        info = CallInfo(tool="record", key="k")
        return await asyncio.gather(*(host.invoke("record", {"entry": "x"}, info) for _ in "ab"))

    a, b = asyncio.run(both())
    assert a == b and runs == ["k"]


def test_a_torn_last_line_is_cut_off_on_open(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    good = json.dumps({"key": "k1", "tool": "record", "result": {"seq": 1}})
    path.write_text(good + "\n" + '{"key": "k2", "tool": "rec')
    ledger = KeyLedger(path)
    assert len(ledger) == 1 and "k1" in ledger and "k2" not in ledger
    ledger.append("k2", "record", {"seq": 2})
    assert [e["key"] for e in read_ledger(path)] == ["k1", "k2"]


@pytest.mark.slow
def test_tools_list_advertises_exactly_the_defs_schemas() -> None:
    """Over a real stdio session, read what tools/list says (no defs on the client side)."""
    source = ToolSource(
        name="faults", command=(sys.executable, "-m", "loopkernel.tools.testkit.faults")
    )

    async def listed() -> dict[str, Any]:
        async with SourceSession(source) as session:
            return {name: t.to_json() for name, t in session.tools.items()}

    got = asyncio.run(listed())
    want = json.loads(FAULTS_DEFS.read_text())["tools"]
    assert got == {t["name"]: t for t in want}
