"""Helpers for the looplab tests (importable: ``tests`` is on the pytest pythonpath)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loopkernel.client import Client

# Fixed outcomes of the default-parameter runs (the digest covers params, tasks, effects).
DIGESTS = {
    "baseline": "6b02b22f6da538bbb48d2ca18dc45ba153666183c8046d42d71437d28ef6e0c9",
    "overspend": "0ae2e9a0a76d981631b7e3143ec6b95c60840bc954646fe0762f80def2730b33",
    "verify_stuck": "fba4172c0e55ddedf99f843e530549e22ffdf670eae98c65a4a69a16eeea1069",
    "irreversible": "adb5ec82f4cc427792ea7f8e12a8cbf0086391afd6c2f0b48f1f29c570515033",
}

RECORDS = {
    "baseline": [
        "step 1 (fetch) done after 1 attempt(s)",
        "step 2 (transform) done after 2 attempt(s)",
        "step 3 (report) done after 1 attempt(s)",
    ],
    "overspend": [
        "step 1 (fetch) done after 1 attempt(s)",
        "step 2 (transform) done after 1 attempt(s)",
        "escalated at step 3 (train): spending 0.5000 USD on top of 0.7000 USD would pass "
        "max_usd=1 (total 1.2000); raise Budget.max_usd to allow it",
    ],
    "verify_stuck": [
        "step 1 (fetch) done after 1 attempt(s)",
        "escalated at step 2 (transform): verification failed 3 times in a row "
        "(verify_stuck_after=3); the loop is stuck, a human must look",
    ],
}

APPLIED = {
    "baseline": ["fetch#1", "transform#1", "transform#2", "report#1"],
    "overspend": ["fetch#1", "transform#1"],
    "verify_stuck": ["fetch#1", "transform#1", "transform#2", "transform#3"],
}


def run_inprocess(db: Path, run_id: str, scenario: str, **overrides: Any) -> dict[str, Any]:
    """Start and execute a looplab run in this process; its inspection as JSON."""

    async def go() -> dict[str, Any]:
        async with Client(str(db)) as client:
            await client.start("looplab", scenario=scenario, overrides=overrides, run_id=run_id)
            await client.execute(run_id)
            return (await client.inspect(run_id, journal=True)).to_json()

    return asyncio.run(go())
