"""Helpers for the looplab tests (importable: ``tests`` is on the pytest pythonpath)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loopkernel.client import Client

# Fixed outcomes of the default-parameter runs (the digest covers params, tasks, effects).
DIGESTS = {
    "baseline": "d98bbacfc09e5aba25468fc5f9c666582ae55454b8f935087a009c3120c0d205",
    "overspend": "aadc4ed5b0e21f97c502e632007583cda329f5e1837470e8c083e23dd9e7f5e4",
    "verify_stuck": "2665bfa52d98b6a247c1e3f2df2028960bb9f9b2ea02288a0b064ed77e4e8ef8",
    "irreversible": "c6ae46c06c493fb1f3433e871e1301ee4af7d6bd3a3087bc0c5eec6e3fdaf323",
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
