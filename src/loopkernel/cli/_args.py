"""Argument types shared by the ``loopkernel`` commands: each refuses bad input with a
message argparse prints, so a handler only ever sees valid values."""

from __future__ import annotations

import argparse

from loopkernel.errors import UsageError
from loopkernel.graph import JSON
from loopkernel.ids import RunId, TaskId, check_id

__all__ = [
    "approval_payload",
    "count",
    "json_value",
    "key_value",
    "max_events",
    "positive",
    "run_id",
    "setting",
    "task_id",
]


def positive(text: str) -> float:
    """A number above zero (seconds, deadlines)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def count(text: str) -> int:
    """A whole number of at least one."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def whole(text: str) -> int:
    """A whole number of at least zero."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be at least 0")
    return value


def max_events(text: str) -> int:
    """The runaway guard: a whole number of at least 2 (``run_started`` and one more)."""
    value = count(text)
    if value < 2:
        raise argparse.ArgumentTypeError("max_events must be at least 2")
    return value


def json_value(text: str) -> JSON:
    """Any JSON value that passes the value door as run parameters (``loopkernel.graph.door``)."""
    from loopkernel.graph.door import Entry, ValueRefused, parse

    try:
        return parse(text, Entry.PARAMS)
    except ValueRefused as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def approval_payload(text: str) -> JSON:
    """An approval's payload: a JSON object that passes the value door (at most
    ``MAX_PAYLOAD_BYTES`` of UTF-8, valid Unicode, finite, bounded depth)."""
    from loopkernel.client import parse_payload

    try:
        value = parse_payload(text)
    except UsageError as exc:  # ValueRefused is one
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` with a non-empty key; the value is kept as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE")
    return key, value


def setting(text: str) -> tuple[str, JSON]:
    """``KEY=VALUE`` for an app parameter: VALUE is JSON, or else a plain string."""
    from loopkernel.graph.door import Entry, Rule, ValueRefused, admit_text, parse

    key, value = key_value(text)
    try:
        admit_text(key, Entry.PARAMS)
        return key, parse(value, Entry.PARAMS)
    except ValueRefused as exc:
        if exc.attrs["rule"] != Rule.NOT_JSON or exc.attrs["where"] != "$":
            raise argparse.ArgumentTypeError(str(exc)) from None
    try:  # not JSON: a plain string, through the same door
        return key, admit_text(value, Entry.PARAMS)
    except ValueRefused as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_id(text: str) -> RunId:
    """A run id that follows the id grammar (``loopkernel.ids.ID_PATTERN``)."""
    try:
        return RunId(check_id(text))
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def task_id(text: str) -> TaskId:
    """A task id that follows the id grammar."""
    try:
        return TaskId(check_id(text, "task id"))
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
