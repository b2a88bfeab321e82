import asyncio
import sys

from bench.langgraph_loop.loop import main

sys.exit(asyncio.run(main()))
