"""Where benchmarks write their JSON, with the machine and the date they ran on."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def write_results(name: str, payload: dict[str, Any], **machine: Any) -> Path:
    """Write ``bench/results/<name>.json``: ``payload`` plus ``machine`` and ``date``.

    ``machine`` adds facts to the machine record (a server version, the load average).
    """
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.json"
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
