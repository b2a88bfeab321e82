from loopkernel_apps.sre.fix import main

raise SystemExit(main())
