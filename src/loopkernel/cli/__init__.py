"""The ``loopkernel`` command.

What an app's own commands (entry point group ``loopkernel.commands``) may use:
``EXIT_CODES`` (run status -> exit code, ``docs/cli.md``), ``Progress`` (the live
one-line-per-event view), ``setting`` (the ``KEY=VALUE`` argument type of ``--set``) and
``shown_url`` (a store's URL as a command prints it: never its password).
"""

from loopkernel.cli._args import setting
from loopkernel.cli._door import shown_url
from loopkernel.cli._main import EXIT_CODES, main
from loopkernel.cli._render import Progress

__all__ = ["EXIT_CODES", "Progress", "main", "setting", "shown_url"]
