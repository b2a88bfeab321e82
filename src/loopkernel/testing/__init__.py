"""A test kit for LoopKernel users: execution traces, crash helpers, scripted planners."""

from loopkernel.testing._trace import read_trace, trace

__all__ = ["read_trace", "trace"]
