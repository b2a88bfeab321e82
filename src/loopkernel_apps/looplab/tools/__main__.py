import sys

from loopkernel_apps.looplab.tools import main

sys.exit(main())
