"""Tool definitions are data: a frozen tool-defs.json, checked strictly when loaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopkernel import UsageError
from loopkernel.tools import ToolLayer, ToolSource, load_tool_defs, parse_tool_defs
from loopkernel.tools._schema import SchemaCache, json_problem
from loopkernel.tools.testkit import FAULTS_DEFS, RECORD_DEFS


def tool(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "add",
        "description": "Add two numbers.",
        "effect": "read_only",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"sum": {"type": "number"}},
            "required": ["sum"],
        },
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def test_a_defs_file_loads_verbatim(tmp_path: Path) -> None:
    doc = {"name": "math", "tools": [tool()]}
    path = tmp_path / "tool-defs.json"
    path.write_text(json.dumps(doc))
    defs = load_tool_defs(path)
    assert defs.name == "math" and defs.names() == ["add"]
    assert defs.get("add") is not None and "add" in defs and "sub" not in defs
    # to_json gives back exactly what the file said
    assert [t.to_json() for t in defs] == doc["tools"]


def test_the_shipped_tool_sets_load() -> None:
    faults, record = load_tool_defs(FAULTS_DEFS), load_tool_defs(RECORD_DEFS)
    assert {"wrong_type", "slow", "fail", "crash", "garbage"} <= set(faults.names())
    assert {t.name: t.effect for t in record} == {
        "record": "idempotent",
        "commit": "irreversible",
        "entries": "read_only",
    }


@pytest.mark.parametrize(
    ("doc", "fault"),
    [
        ([tool()], "top level must be an object"),
        ({"tools": []}, "non-empty list"),
        ({"tools": [tool()], "version": 2}, "unknown top-level key"),
        ({"tools": [tool(effect="destructive")]}, "effect 'destructive'"),
        ({"tools": [tool(outputSchema=None)]}, "missing key(s) 'outputSchema'"),
        ({"tools": [tool(timeout=3)]}, "unknown key(s) 'timeout'"),
        ({"tools": [tool(name="has space")]}, "name 'has space'"),
        ({"tools": [tool(inputSchema={"type": "array"})]}, '"type": "object" at its root'),
        (
            {"tools": [tool(outputSchema={"type": "object", "properties": {"x": {"type": 5}}})]},
            "not a valid JSON Schema",
        ),
        ({"tools": [tool(), tool()]}, "duplicate tool name 'add'"),
    ],
)
def test_a_bad_defs_document_is_refused_with_the_reason(doc: Any, fault: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_tool_defs(doc, origin="x.json")
    assert fault in str(info.value) and "x.json" in str(info.value)


def test_an_unreadable_defs_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read tool defs"):
        load_tool_defs(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError, match="is not JSON"):
        load_tool_defs(tmp_path / "bad.json")


def test_validation_is_strict_not_coercing() -> None:
    schemas = SchemaCache()
    out = schemas.validator(
        {
            "type": "object",
            "properties": {"price": {"type": "number"}, "n": {"type": "integer"}},
            "additionalProperties": False,
        }
    )
    assert out.error({"price": 0.4, "n": 3}) is None
    assert out.error({"price": "0.40"}) == "$.price: '0.40' is not of type 'number'"
    assert out.error({"n": True}) == "$.n: True is not of type 'integer'"
    assert out.error({"n": 1.5}) is not None
    assert "Additional properties" in (out.error({"extra": 1}) or "")


def test_validators_are_compiled_once_per_schema() -> None:
    schemas = SchemaCache()
    schema = {"type": "object"}
    assert schemas.validator(schema) is schemas.validator(schema)
    assert schemas.validator(schema) is not schemas.validator({"type": "object"})
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        schemas.validator({"type": "nonsense"})


def test_values_that_are_not_plain_json_are_named() -> None:
    assert json_problem({"a": [1, "x", None, {"b": 2.5}]}) is None
    assert json_problem({"a": float("nan")}) is not None
    assert json_problem({"a": {1: "x"}}) == "object key 1 is not a string"
    assert json_problem({"a": {1, 2}}) is not None


def test_a_source_is_checked_when_configured() -> None:
    src = ToolSource.from_command("k8s", "npx -y 'some server' --read-only", timeouts={"logs": 5})
    assert src.command == ("npx", "-y", "some server", "--read-only")
    assert ToolSource(name="x", command=["a", "b"]).command == ("a", "b")  # type: ignore[arg-type]
    for bad, fault in [
        ({"command": "npx server"}, "sequence of arguments"),
        ({"command": ()}, "needs a command line"),
        ({"command": ("x",), "effects": {"t": "dangerous"}}, "effect of 't'"),
        ({"command": ("x",), "timeouts": {"t": 0}}, "timeout of 't' must be > 0"),
        ({"command": ("x",), "max_restarts": -1}, "max_restarts"),
    ]:
        with pytest.raises(UsageError, match=fault):
            ToolSource(name="x", **bad)
    with pytest.raises(UsageError, match="cannot parse"):
        ToolSource.from_command("x", "npx 'unclosed")
    with pytest.raises(UsageError, match="unique"):
        ToolLayer(None, [src, src])  # type: ignore[arg-type]
