import sys

from loopkernel_apps.sre.tools import main

sys.exit(main())
