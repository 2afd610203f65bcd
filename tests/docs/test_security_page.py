"""The security page runs as written: its test files (the one-line TLS fixture, an ACL refusal) in a
user's suite with the installed plugin, and its untitled Python snippet as a script."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.doc_commands import blocks

PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_the_security_pages_examples_run(tmp_path):
    found = [b for b in blocks(PAGE.read_text()) if b.lang == "python"]
    files = [b for b in found if b.title]
    assert [b.title for b in files] == ["test_tls.py", "test_acls.py"]
    for block in files:
        (tmp_path / block.title).write_text(block.text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
                            cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert re.search(r"\b2 passed\b", result.stdout)
    for i, block in enumerate(b for b in found if not b.title):
        script = tmp_path / f"snippet_{i}.py"
        script.write_text(block.text)
        run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
                             timeout=120)
        assert run.returncode == 0, run.stderr
        assert "127.0.0.1:" in run.stdout and "ca.pem" in run.stdout
