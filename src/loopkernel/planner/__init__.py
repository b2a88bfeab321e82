"""Planners: the protocol, the snapshot they read, and a base class with defaults."""

from loopkernel.planner._protocol import BasePlanner, Planner, Proposal, Snapshot

__all__ = ["BasePlanner", "Planner", "Proposal", "Snapshot"]
