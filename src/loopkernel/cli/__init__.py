"""The ``loopkernel`` command."""

from loopkernel.cli._main import main

__all__ = ["main"]
