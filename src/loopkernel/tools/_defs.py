"""Tool definitions as data: the frozen ``tool-defs.json`` a tool set is described by.

::

    {
      "name": "record",                       optional: the tool set's name
      "tools": [
        {
          "name": "record",
          "description": "Append an entry to the durable run record.",
          "effect": "idempotent",             read_only | idempotent | irreversible
          "inputSchema":  {"type": "object", ...},
          "outputSchema": {"type": "object", ...},
          "retry": {"attempts": 3, "backoff": 0.5, "maxBackoff": 5}     optional
          "keepSecrets": ["token_count"]     optional: result paths never redacted
          "keepArguments": ["query"]         optional: argument paths never redacted
          "dedupesByKey": true               optional: the server refuses a duplicate key
        }
      ]
    }

Both schemas are JSON Schema (2020-12 unless ``$schema`` says otherwise) with an object at
the root, as MCP's 2025-11-25 revision requires. Unknown keys are refused: a defs file is
a contract, and a typo in it must not pass silently.

``retry`` is the tool's policy for faults that may pass (a timeout, a dead server, a
handler out of disk; see ``docs/tools.md``): how many sends in all, and the backoff
between them (doubling up to ``maxBackoff``). Without it, a ``read_only`` or
``idempotent`` tool gets ``DEFAULT_RETRY``; an ``irreversible`` tool is sent once and
may not declare more.

A tool's result is redacted before it is journaled (``loopkernel.evidence.redact``:
secret-looking keys and credential-shaped text become ``[redacted:HASH]``);
``keepSecrets`` lists the result paths (``"a"``, ``"a.b"``) this tool opts out for. Its
arguments are redacted the same way before the intent is journaled (the journal compares
a replay by the sha256 of the raw arguments); ``keepArguments`` lists the argument paths
it opts out for.

``dedupesByKey`` (default false) declares that the server keeps its own record of the
idempotency key it is sent (``_meta["loopkernel/idempotency_key"]``) and answers a
duplicate without acting again. Only then is an ``irreversible`` call whose server died in
flight sent again; otherwise it is an unknown outcome for a human (``docs/tools.md``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias, cast, get_args

from loopkernel.errors import UsageError
from loopkernel.graph import JSON
from loopkernel.tools._schema import check_schema

__all__ = [
    "DEFAULT_RETRY",
    "EFFECTS",
    "NO_RETRY",
    "Effect",
    "RetryPolicy",
    "ToolDef",
    "ToolDefs",
    "load_tool_defs",
    "parse_tool_defs",
]

Effect: TypeAlias = Literal["read_only", "idempotent", "irreversible"]
"""What repeating a call does: nothing, nothing more, or something that cannot be undone."""

EFFECTS: frozenset[str] = frozenset(get_args(Effect))

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_TOOL_KEYS = frozenset({"name", "description", "effect", "inputSchema", "outputSchema"})
_OPTIONAL_KEYS = frozenset({"retry", "keepSecrets", "keepArguments", "dedupesByKey"})
_RETRY_KEYS = frozenset({"attempts", "backoff", "maxBackoff"})


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How a tool call that hit a fault that may pass is sent again, under the same key."""

    attempts: int = 3
    """Sends in all, the first included (1: never re-sent by the layer)."""
    backoff: float = 0.5
    """Seconds before the second send; doubled before each next one."""
    max_backoff: float = 5.0
    """The longest pause between two sends."""

    def __post_init__(self) -> None:
        if not (isinstance(self.attempts, int) and 1 <= self.attempts <= 100):
            raise UsageError(f"retry attempts must be an integer 1..100, not {self.attempts!r}")
        for name in ("backoff", "max_backoff"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 <= value <= 3600):
                raise UsageError(f"retry {name} must be 0..3600 seconds, not {value!r}")

    def delay(self, sent: int) -> float:
        """The pause after the ``sent``-th send failed."""
        return float(min(self.max_backoff, self.backoff * 2 ** (sent - 1)))

    def to_json(self) -> dict[str, JSON]:
        return {"attempts": self.attempts, "backoff": self.backoff, "maxBackoff": self.max_backoff}


DEFAULT_RETRY = RetryPolicy()
"""A ``read_only`` or ``idempotent`` tool that declares no policy: 3 sends, 0.5 s, 1 s."""
NO_RETRY = RetryPolicy(attempts=1)
"""An ``irreversible`` tool: sent once per execution of its task."""
_FILE_KEYS = frozenset({"name", "tools"})


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolDef:
    """One tool: its name, what it does, its two schemas and its effect class."""

    name: str
    """Unique in its tool set; what ``call_tool`` names."""
    description: str
    """What a caller (or a model) is told the tool does."""
    input_schema: Mapping[str, JSON]
    """JSON Schema the arguments must satisfy, checked before a call leaves the client."""
    output_schema: Mapping[str, JSON] | None
    """JSON Schema the structured result must satisfy, on the server and on receipt.
    ``None`` only for third-party tools that publish none."""
    effect: Effect
    """``read_only``, ``idempotent`` or ``irreversible``; the policy hook sees it."""
    retry: RetryPolicy | None = None
    """The declared retry policy; ``None``: the default for the effect (``retry_policy``)."""
    keep_secrets: tuple[str, ...] = ()
    """Result paths (``"a"``, ``"a.b"``) left out of redaction: the tool's opt-out."""
    keep_arguments: tuple[str, ...] = ()
    """Argument paths left out of redaction when the intent is journaled."""
    dedupes_by_key: bool = False
    """The server answers a duplicate idempotency key without acting again, so a call in
    flight when its server died may be sent again even when it is irreversible."""

    @property
    def retry_policy(self) -> RetryPolicy:
        """What the tool layer applies: the declared policy, else the effect's default."""
        if self.effect == "irreversible":
            return NO_RETRY
        return self.retry or DEFAULT_RETRY

    def to_json(self) -> dict[str, JSON]:
        """The defs-file form (camelCase schema keys, as on the MCP wire)."""
        out: dict[str, JSON] = {
            "name": self.name,
            "description": self.description,
            "effect": self.effect,
            "inputSchema": dict(self.input_schema),
        }
        if self.output_schema is not None:
            out["outputSchema"] = dict(self.output_schema)
        if self.retry is not None:
            out["retry"] = self.retry.to_json()
        if self.keep_secrets:
            out["keepSecrets"] = list(self.keep_secrets)
        if self.keep_arguments:
            out["keepArguments"] = list(self.keep_arguments)
        if self.dedupes_by_key:
            out["dedupesByKey"] = True
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolDefs:
    """A tool set: the parsed contents of one ``tool-defs.json``."""

    name: str
    """The set's name (the file's ``name``, else the file's parent directory)."""
    tools: tuple[ToolDef, ...]
    """In file order."""

    def __iter__(self) -> Iterator[ToolDef]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, name: object) -> bool:
        return any(t.name == name for t in self.tools)

    def get(self, name: str) -> ToolDef | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None

    def names(self) -> list[str]:
        return [t.name for t in self.tools]


def load_tool_defs(path: str | os.PathLike[str]) -> ToolDefs:
    """Read and check a ``tool-defs.json``; ``UsageError`` names the file and the fault."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read tool defs {p}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"tool defs {p} is not JSON: {exc}") from None
    return parse_tool_defs(data, origin=str(p), default_name=p.parent.name or "tools")


def parse_tool_defs(data: JSON, *, origin: str = "<defs>", default_name: str = "tools") -> ToolDefs:
    """Check a defs document (already parsed JSON) and return it as values."""

    def bad(msg: str) -> UsageError:
        return UsageError(f"tool defs {origin}: {msg}")

    if not isinstance(data, dict):
        raise bad('the top level must be an object {"tools": [...]}')
    if extra := sorted(set(data) - _FILE_KEYS):
        raise bad(f"unknown top-level key(s) {', '.join(map(repr, extra))}; allowed: name, tools")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise bad("'name' must be a non-empty string")
    tools = data.get("tools")
    if not isinstance(tools, list) or not tools:
        raise bad("'tools' must be a non-empty list")
    seen: set[str] = set()
    out: list[ToolDef] = []
    for i, raw in enumerate(tools):

        def bad_tool(msg: str, i: int = i) -> UsageError:
            return bad(f"tools[{i}]: {msg}")

        tool = _parse_tool(raw, bad_tool)
        if tool.name in seen:
            raise bad(f"tools[{i}]: duplicate tool name {tool.name!r}")
        seen.add(tool.name)
        out.append(tool)
    return ToolDefs(name=name, tools=tuple(out))


def _parse_tool(raw: JSON, bad: Callable[[str], UsageError]) -> ToolDef:
    if not isinstance(raw, dict):
        raise bad("each tool must be an object")
    missing = sorted(_TOOL_KEYS - set(raw))
    if missing:
        raise bad(f"missing key(s) {', '.join(map(repr, missing))}")
    if extra := sorted(set(raw) - _TOOL_KEYS - _OPTIONAL_KEYS):
        allowed = ", ".join(sorted(_TOOL_KEYS | _OPTIONAL_KEYS))
        raise bad(f"unknown key(s) {', '.join(map(repr, extra))}; allowed: {allowed}")
    name, description, effect = raw["name"], raw["description"], raw["effect"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise bad(f"name {name!r} must be 1-128 characters of A-Z a-z 0-9 _ . -")
    if not isinstance(description, str):
        raise bad(f"{name}: description must be a string")
    if effect not in EFFECTS:
        raise bad(f"{name}: effect {effect!r} must be one of {', '.join(sorted(EFFECTS))}")
    schemas = []
    for key in ("inputSchema", "outputSchema"):
        schema = raw[key]
        problem = object_schema_problem(schema)
        if problem:
            raise bad(f"{name}: {key} {problem}")
        schemas.append(schema)
    keep = raw.get("keepSecrets", [])
    if not isinstance(keep, list) or not all(isinstance(k, str) and k for k in keep):
        raise bad(f'{name}: keepSecrets must be a list of result paths like "a.b"')
    keep_args = raw.get("keepArguments", [])
    if not isinstance(keep_args, list) or not all(isinstance(k, str) and k for k in keep_args):
        raise bad(f'{name}: keepArguments must be a list of argument paths like "a.b"')
    dedupes = raw.get("dedupesByKey", False)
    if not isinstance(dedupes, bool):
        raise bad(f"{name}: dedupesByKey must be true or false")
    return ToolDef(
        name=name,
        description=description,
        effect=effect,
        input_schema=schemas[0],
        output_schema=schemas[1],
        retry=_parse_retry(name, effect, raw.get("retry"), bad),
        keep_secrets=tuple(keep),
        keep_arguments=tuple(keep_args),
        dedupes_by_key=dedupes,
    )


def retry_of(name: str, effect: str, raw: JSON) -> RetryPolicy | None:
    """A retry policy as a defs file or a ``tools/list`` ``_meta`` states it."""

    def bad(msg: str) -> UsageError:
        return UsageError(f"tool {msg}")

    return _parse_retry(name, effect, raw, bad)


def _parse_retry(
    name: str, effect: str, raw: JSON, bad: Callable[[str], UsageError]
) -> RetryPolicy | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - _RETRY_KEYS or not raw:
        raise bad(f"{name}: retry must be an object with attempts, backoff, maxBackoff")
    try:
        policy = RetryPolicy(
            attempts=raw.get("attempts", DEFAULT_RETRY.attempts),
            backoff=raw.get("backoff", DEFAULT_RETRY.backoff),
            max_backoff=raw.get("maxBackoff", DEFAULT_RETRY.max_backoff),
        )
    except UsageError as exc:
        raise bad(f"{name}: {exc.message}") from None
    if effect == "irreversible" and policy.attempts > 1:
        raise bad(
            f"{name}: an irreversible tool is never re-sent by the layer (retry attempts must "
            "be 1); a run stopped by its fault re-sends it under the same idempotency key "
            "only when resumed"
        )
    return policy


def object_schema_problem(schema: JSON) -> str | None:
    """Why ``schema`` is not a valid JSON Schema with an object at its root, or ``None``."""
    if not isinstance(schema, dict):
        return "must be a JSON Schema object"
    if schema.get("type") != "object":
        return 'must have "type": "object" at its root (MCP 2025-11-25)'
    return check_schema(schema)


def effect_of(value: JSON) -> Effect | None:
    """``value`` as an effect class, or ``None`` when it is not one."""
    return cast(Effect, value) if isinstance(value, str) and value in EFFECTS else None
