"""Where benchmarks write their JSON, with the machine and the date they ran on."""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
"""The committed results: only full runs write here."""
QUICK_RESULTS = Path(tempfile.gettempdir()) / "loopkernel-bench-quick"
"""Where ``--quick`` runs write, so a smoke run never overwrites the committed numbers."""


def results_dir(quick: bool) -> Path:
    return QUICK_RESULTS if quick else RESULTS


def write_results(
    name: str, payload: dict[str, Any], *, quick: bool = False, **machine: Any
) -> Path:
    """Write ``<name>.json`` in ``bench/results`` (``quick``: in ``QUICK_RESULTS``):
    ``payload`` plus ``machine`` and ``date``.

    ``machine`` adds facts to the machine record (a server version, the load average).
    """
    where = results_dir(quick)
    where.mkdir(parents=True, exist_ok=True)
    out = where / f"{name}.json"
    record = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            **machine,
        },
        "date": time.strftime("%Y-%m-%d"),
        **payload,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwrote {out}")
    return out
