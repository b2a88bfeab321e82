"""A test kit for LoopKernel users: execution traces and a crash helper.

* ``trace(what, task_id)`` / ``read_trace(path)``: count executions across processes.
* ``run_cli(args, db=..., crash_at="point:n")`` / ``was_killed(proc)``: run ``loopkernel``
  in a subprocess that SIGKILLs itself at a named crash point (see ``docs/durability.md``).
"""

from loopkernel.testing._crash import run_cli, was_killed
from loopkernel.testing._trace import read_trace, trace

__all__ = ["read_trace", "run_cli", "trace", "was_killed"]
