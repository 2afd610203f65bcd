"""docs/control.md's Python example runs as written, as a user's test file (the plugin from the
installed package)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.doc_commands import blocks

PAGE = Path(__file__).resolve().parents[2] / "docs" / "control.md"


def test_the_control_pages_example_runs(tmp_path):
    files = [b for b in blocks(PAGE.read_text()) if b.lang == "python" and b.title]
    assert files and all(b.title.startswith("test_") for b in files)
    for block in files:
        (tmp_path / block.title).write_text(block.text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
                            cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert f"{len(files)} passed" in result.stdout
