"""``python -m loopkernel`` is the ``loopkernel`` command."""

import sys

from loopkernel.cli import main

sys.exit(main())
