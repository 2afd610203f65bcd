"""The producer-id quota core stays pure: importing it pulls in no trio, and it reads no clock."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODULES = ("quotas.bloom", "quotas.producer_id_quota")


def test_importing_the_pid_quota_core_leaves_trio_out():
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in MODULES)
        + "leaked = sorted(m for m in sys.modules\n"
        + "                if m == 'trio' or m.startswith(('trio.', 'minibroker', 'storage')))\n"
        + "print(','.join(leaked))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_no_clock_reads_in_the_pid_quota_core():
    forbidden = re.compile(r"time\.time|monotonic|perf_counter|datetime\.now|import time\b|threading")
    for name in MODULES:
        source = (ROOT / (name.replace(".", "/") + ".py")).read_text()
        assert not forbidden.search(source), name
