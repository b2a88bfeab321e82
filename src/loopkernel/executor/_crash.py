"""The crash points, kept importable here: they live on the ground floor
(``loopkernel._hooks``), where the executor, the tool layer and the model layer all reach
them without importing each other."""

from loopkernel._hooks import POINTS, crashpoint

__all__ = ["POINTS", "crashpoint"]
