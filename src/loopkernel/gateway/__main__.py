"""``python -m loopkernel.gateway`` is ``loopkernel gateway``."""

import sys

from loopkernel.gateway._cli import main

sys.exit(main(prog="python -m loopkernel.gateway"))
