"""Strict JSON Schema validation, shared by the client and the server host.

A real validator (``jsonschema``), never a coercing one: ``"0.40"`` where the schema says
``number`` is an error, and so is ``true`` where it says ``integer``. Validators are
compiled once per schema and kept; ``$ref`` resolves inside the schema document only
(no network, no file system). ``jsonschema`` is imported on first use, so loading the
tool layer costs nothing until a schema is checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from loopkernel.graph import JSON

__all__ = [
    "SchemaCache",
    "Validator",
    "canonical_json",
    "check_schema",
    "compile_schema",
    "first_error",
    "json_problem",
]


class Validator:
    """A compiled schema: ``error(instance)`` is ``None`` or one readable message."""

    __slots__ = ("_impl",)

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    def error(self, instance: JSON) -> str | None:
        return first_error(self._impl, instance)


class SchemaCache:
    """Compiled validators by schema object: compiling costs ~60x validating, so once each."""

    __slots__ = ("_compiled",)

    def __init__(self) -> None:
        # id(schema) -> (schema, validator); holding the schema keeps its id from being reused
        self._compiled: dict[int, tuple[Mapping[str, JSON], Validator]] = {}

    def validator(self, schema: Mapping[str, JSON]) -> Validator:
        """The compiled ``schema``; ``ValueError`` when it is not a valid JSON Schema."""
        hit = self._compiled.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        validator = compile_schema(schema)
        self._compiled[id(schema)] = (schema, validator)
        return validator


def _jsonschema() -> Any:
    """The ``jsonschema`` package (untyped), imported on first use."""
    import jsonschema.exceptions  # type: ignore[import-untyped]
    import jsonschema.validators  # type: ignore[import-untyped]

    return jsonschema


def _validator_class(schema: Mapping[str, JSON]) -> Any:
    return _jsonschema().validators.validator_for(schema)


def check_schema(schema: Mapping[str, JSON]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema, or ``None``."""
    try:
        _validator_class(schema).check_schema(schema)
    except _jsonschema().exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return f"is not a valid JSON Schema{f' at {where}' if where else ''}: {exc.message}"
    return None


def compile_schema(schema: Mapping[str, JSON]) -> Validator:
    """Compile ``schema``; ``ValueError`` when it is not a valid JSON Schema."""
    from referencing import Registry

    problem = check_schema(schema)
    if problem is not None:
        raise ValueError(f"schema {problem}")
    cls = _validator_class(schema)
    return Validator(cls(schema, registry=Registry()))


def first_error(impl: Any, instance: JSON) -> str | None:
    """The most relevant validation error as one line, with its JSON path, or ``None``."""
    from referencing.exceptions import Unresolvable

    try:
        err = _jsonschema().exceptions.best_match(impl.iter_errors(instance))
    except Unresolvable as exc:
        return f"the schema has a $ref that does not resolve: {exc}"
    if err is None:
        return None
    path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    return f"{path}: {err.message}"


def json_problem(value: JSON) -> str | None:
    """Why ``value`` is not plain JSON (NaN, a set, an object key that is not a string), or
    ``None``."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return _keys_problem(value)


def _keys_problem(value: JSON) -> str | None:
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"object key {k!r} is not a string"
            if (p := _keys_problem(v)) is not None:
                return p
    elif isinstance(value, list):
        for v in value:
            if (p := _keys_problem(v)) is not None:
                return p
    return None


def canonical_json(value: JSON) -> str:
    """One spelling of a JSON value (sorted keys, no spaces), for comparing values."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
