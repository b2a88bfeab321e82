"""Planners: the protocol, the snapshot they read, and a base class with defaults."""

from loopkernel.planner._protocol import BasePlanner, Planner, Snapshot

__all__ = ["BasePlanner", "Planner", "Snapshot"]
