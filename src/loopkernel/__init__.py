"""LoopKernel: a durable runtime for agentic AI work.

An agent run is a task graph that a planner patches while it runs; every decision is
journaled, so a run survives ``kill -9`` and can be audited and resumed.
"""
