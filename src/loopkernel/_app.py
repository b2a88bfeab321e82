"""Applications: a named bundle of a planner, workers and parameters that a CLI can run.

A run stores its app's name and its final parameters, so ``resume`` (in any process)
rebuilds exactly the planner and workers it ran with.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from loopkernel.errors import UsageError
from loopkernel.executor import PatchGuard, ToolCaller, Worker
from loopkernel.graph import JSON
from loopkernel.planner import Flow, Planner
from loopkernel.store import Store

__all__ = ["App", "AppParts", "load_app"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AppParts:
    """What an app builds for one run."""

    planner: Planner
    """Answers the run's events."""
    workers: Mapping[str, Worker]
    """The worker registry: the authority surface of the run."""
    tool_layer: Callable[[Store], ToolCaller] | None = None
    """Builds the run's tool layer from the run's store (a ``ToolLayer`` journals its
    effects there), if the app calls tools."""
    guard: PatchGuard | None = None
    """Policy the executor consults on every patch (e.g. ``Policy(...).guard()``)."""

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

    def params(
        self, scenario: str | None = None, overrides: Mapping[str, JSON] | None = None
    ) -> dict[str, JSON]:
        """Defaults, then the scenario's values, then ``overrides``; unknown keys are refused."""
        params = dict(self.defaults)
        if scenario is not None:
            if scenario not in self.scenarios:
                known = ", ".join(sorted(self.scenarios)) or "none"
                raise UsageError(f"app {self.name!r} has no scenario {scenario!r} (known: {known})")
            params.update(self.scenarios[scenario])
            params["scenario"] = scenario
        for key, value in (overrides or {}).items():
            if key not in self.defaults:
                known = ", ".join(sorted(self.defaults)) or "none"
                raise UsageError(f"app {self.name!r} has no parameter {key!r} (known: {known})")
            params[key] = value
        return params


def load_app(name: str) -> App:
    """An app by name (entry point group ``loopkernel.apps``) or by ``module:attribute``."""
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            found: Any = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"cannot load app {name!r}: {exc}") from None
    else:
        matches = entry_points(group="loopkernel.apps", name=name)
        if not matches:
            known = ", ".join(sorted(ep.name for ep in entry_points(group="loopkernel.apps")))
            raise UsageError(f"no app {name!r} (known: {known or 'none'}; or use module:attr)")
        found = next(iter(matches)).load()
    if not isinstance(found, App):
        raise UsageError(f"{name!r} is a {type(found).__name__}, not a loopkernel App")
    return found
