import sys

from loopkernel.tools.testkit.record import main

sys.exit(main())
