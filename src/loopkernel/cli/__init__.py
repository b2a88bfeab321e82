"""The ``loopkernel`` command.

What an app's own commands (entry point group ``loopkernel.commands``) may use:
``EXIT_CODES`` (run status -> exit code, ``docs/cli.md``), ``Progress`` (the live
one-line-per-event view) and ``setting`` (the ``KEY=VALUE`` argument type of ``--set``).
"""

from loopkernel.cli._args import setting
from loopkernel.cli._main import EXIT_CODES, main
from loopkernel.cli._render import Progress

__all__ = ["EXIT_CODES", "Progress", "main", "setting"]
