import asyncio
import sys

from bench.handrolled.loop import main

sys.exit(asyncio.run(main()))
