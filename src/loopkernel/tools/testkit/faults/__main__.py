import sys

from loopkernel.tools.testkit.faults import main

sys.exit(main())
