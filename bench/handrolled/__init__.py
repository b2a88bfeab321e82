"""The looplab loop written by hand: ``python -m bench.handrolled``."""
