"""Applications: a named bundle of a planner, workers and parameters that a CLI can run.

A run stores its app's name and its final parameters, so ``resume`` (in any process)
rebuilds exactly the planner and workers it ran with.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from loopkernel.errors import UsageError
from loopkernel.executor import ApprovalTimeout, PatchGuard, TaskContext, ToolCaller, Worker
from loopkernel.graph import JSON
from loopkernel.planner import Flow, Planner
from loopkernel.store import Store

__all__ = ["App", "AppParts", "Param", "load_app", "registered"]

ParamKind = Literal["int", "number", "str", "bool", "list", "object"]

_UNSET: Any = object()
"""``Param.default`` when the parameter has none."""

_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "number": (int, float),
    "str": (str,),
    "bool": (bool,),
    "list": (list,),
    "object": (dict,),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Param:
    """The type and range of one app parameter, checked before a run is journaled."""

    kind: ParamKind
    """The JSON type: ``int``, ``number`` (int or float), ``str``, ``bool``, ``list``,
    ``object``."""
    minimum: float | None = None
    """Smallest value of a number, or fewest items of a list."""
    maximum: float | None = None
    """Largest value of a number, or most items of a list."""
    choices: tuple[JSON, ...] | None = None
    """The only values allowed, if set."""
    items: Param | None = None
    """Each item of a list must pass this."""
    help: str = ""
    """What it means, for the error message."""
    default: JSON = _UNSET
    """The value when neither a scenario nor ``--set`` gives one (unset: none; the app's
    ``defaults`` may give it instead)."""

    def check(self, name: str, value: JSON) -> None:
        """A ``UsageError`` naming the parameter and the rule ``value`` breaks, if any."""
        types = _KINDS[self.kind]
        if (isinstance(value, bool) and self.kind != "bool") or not isinstance(value, types):
            raise UsageError(f"parameter {name} must be {_a(self.kind)}, not {_shown(value)}")
        if self.choices is not None and value not in self.choices:
            known = ", ".join(_shown(c) for c in self.choices)
            raise UsageError(f"parameter {name} must be one of {known}, not {_shown(value)}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if value != value or value in (float("inf"), float("-inf")):
                raise UsageError(f"parameter {name} must be a finite number")
            size: float = value
        elif isinstance(value, list):
            size = len(value)
        else:
            return
        what = "items" if isinstance(value, list) else ""
        if self.minimum is not None and size < self.minimum:
            raise UsageError(
                f"parameter {name} must have at least {_n(self.minimum)} {what}".rstrip()
                if what
                else f"parameter {name} must be >= {_n(self.minimum)}, not {_shown(value)}"
            )
        if self.maximum is not None and size > self.maximum:
            raise UsageError(
                f"parameter {name} must have at most {_n(self.maximum)} {what}".rstrip()
                if what
                else f"parameter {name} must be <= {_n(self.maximum)}, not {_shown(value)}"
            )
        if isinstance(value, list) and self.items is not None:
            for i, item in enumerate(value):
                self.items.check(f"{name}[{i}]", item)


def _a(kind: str) -> str:
    return {
        "int": "a whole number",
        "number": "a number",
        "str": "a string",
        "bool": "true or false",
        "list": "a JSON list",
        "object": "a JSON object",
    }[kind]


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _shown(value: JSON) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True, kw_only=True, slots=True)
class AppParts:
    """What an app builds for one run."""

    planner: Planner
    """Answers the run's events."""
    workers: Mapping[str, Worker | Callable[[TaskContext], Any]]
    """The worker registry: the authority surface of the run (``async def`` workers, or
    plain ``def`` ones, which the kernel runs in a thread)."""
    tool_layer: Callable[[Store], ToolCaller] | None = None
    """Builds the run's tool layer from the run's store (a ``ToolLayer`` journals its
    effects there), if the app calls tools."""
    guard: PatchGuard | None = None
    """Policy the executor consults on every patch (e.g. ``Policy(...).guard()``)."""
    approval_timeout: ApprovalTimeout | None = None
    """What becomes of an approval nobody answers in time (``None``: it waits forever)."""
    clock: Callable[[], float] | None = None
    """The run's wall clock for timers (seconds since the epoch); ``None``: ``time.time``.
    Tests give a fake one."""

    def __post_init__(self) -> None:
        if isinstance(self.planner, Flow):  # a step naming an unregistered skill: now, not mid-run
            self.planner.check_workers(self.workers)


@dataclass(frozen=True, kw_only=True, slots=True)
class App:
    """A runnable application."""

    name: str
    """What ``loopkernel run NAME`` calls it."""
    description: str
    """One line for ``--help``."""
    build: Callable[[Mapping[str, JSON]], AppParts]
    """Builds the planner and workers from the run's parameters."""
    defaults: Mapping[str, JSON] = field(default_factory=dict)
    """Parameters and their default values; ``--set`` may change only these."""
    scenarios: Mapping[str, Mapping[str, JSON]] = field(default_factory=dict)
    """Named sets of parameter overrides; ``--scenario NAME``."""
    parameters: Mapping[str, Param] = field(default_factory=dict)
    """Types and ranges of the parameters: ``params()`` refuses a value that breaks them,
    so a bad ``--set`` fails with one line before anything is journaled."""
    version: str | None = None
    """This app's version, recorded on the runs it starts and on each patch it journals.
    ``None``: the version of the installed distribution that holds ``build``'s module,
    else ``"0"`` (``app_version()``)."""
    compatible_with: tuple[str, ...] | None = None
    """The versions whose runs this version may resume, besides its own; ``None``: any.
    A resume of a run of another version is refused (``IncompatibleVersion``, exit 10)."""
    approver_key: str | None = None
    """When set, an approval from ``loopkernel serve`` carries the approver in its payload
    under this key: the signed-in operator's name (``serve --operators``), put there by the
    server, never the form's; without a named operator the key is left out."""

    def app_version(self) -> str:
        """``version``, or the version of the distribution that ships the app, or ``"0"``."""
        if self.version is not None:
            return self.version
        return _distribution_version(getattr(self.build, "__module__", "") or "")

    def all_defaults(self) -> dict[str, JSON]:
        """``defaults``, and the default of each declared parameter that has one."""
        declared = {k: p.default for k, p in self.parameters.items() if p.default is not _UNSET}
        return {**self.defaults, **declared}

    def params(
        self, scenario: str | None = None, overrides: Mapping[str, JSON] | None = None
    ) -> dict[str, JSON]:
        """Defaults, then the scenario's values, then ``overrides``; unknown keys are refused."""
        defaults = self.all_defaults()
        params = dict(defaults)
        if scenario is not None:
            if scenario not in self.scenarios:
                known = ", ".join(sorted(self.scenarios)) or "none"
                raise UsageError(f"app {self.name!r} has no scenario {scenario!r} (known: {known})")
            params.update(self.scenarios[scenario])
            params["scenario"] = scenario
        for key, value in (overrides or {}).items():
            if key not in defaults:
                known = ", ".join(sorted(defaults)) or "none"
                raise UsageError(f"app {self.name!r} has no parameter {key!r} (known: {known})")
            params[key] = value
        self.check(params)
        return params

    def check(self, params: Mapping[str, JSON]) -> None:
        """``UsageError`` naming the first parameter whose value breaks its declaration."""
        for key, spec in self.parameters.items():
            if key in params:
                spec.check(key, params[key])


@functools.lru_cache(maxsize=32)
def _distribution_version(module: str) -> str:
    """Read once per module: ``packages_distributions`` scans every installed one."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    top = module.partition(".")[0]
    for dist in packages_distributions().get(top, []):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "0"


def registered(name: str) -> bool:
    """Whether ``name`` is an installed app (entry point group ``loopkernel.apps``): the
    apps a worker runs without being told to."""
    from importlib.metadata import entry_points  # ~10 ms: only when an app is looked up

    return bool(entry_points(group="loopkernel.apps", name=name))


def load_app(name: str) -> App:
    """An app by name (entry point group ``loopkernel.apps``) or by ``module:attribute``."""
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            found: Any = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"cannot load app {name!r}: {exc}") from None
    else:
        from importlib.metadata import entry_points

        matches = entry_points(group="loopkernel.apps", name=name)
        if not matches:
            known = ", ".join(sorted(ep.name for ep in entry_points(group="loopkernel.apps")))
            raise UsageError(f"no app {name!r} (known: {known or 'none'}; or use module:attr)")
        found = next(iter(matches)).load()
    if not isinstance(found, App):
        raise UsageError(f"{name!r} is a {type(found).__name__}, not a loopkernel App")
    return found
