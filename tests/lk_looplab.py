"""Helpers for the looplab tests (importable: ``tests`` is on the pytest pythonpath)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loopkernel.client import Client


def run_inprocess(db: Path, run_id: str, scenario: str, **overrides: Any) -> dict[str, Any]:
    """Start and execute a looplab run in this process; its inspection as JSON."""

    async def go() -> dict[str, Any]:
        async with Client(str(db)) as client:
            await client.start("looplab", scenario=scenario, overrides=overrides, run_id=run_id)
            await client.execute(run_id)
            return (await client.inspect(run_id, journal=True)).to_json()

    return asyncio.run(go())
