"""The README's Python example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_example_runs_and_prints_what_it_says(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the README lost its example"
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "status=<RunStatus.SUCCEEDED: 'succeeded'>, verdict=6)" in out.stdout
    (said,) = re.findall(r"# (RunOutcome\(.*\))", blocks[0])  # what the comment promises
    printed = re.sub(r"run_id='run-[0-9a-f]{12}'", "run_id='run-…'", out.stdout.strip())
    assert printed == said
