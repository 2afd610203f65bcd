"""The quota core stays pure: no trio, no broker or storage imports, no clock reads."""

import pathlib
import re
import subprocess
import sys

QUOTAS = pathlib.Path(__file__).resolve().parent.parent / "quotas"
CORE_MODULES = ["quotas", "quotas.rate", "quotas.callback", "quotas.client_quota", "quotas.config",
                "quotas.cluster", "quotas.examples.group_quota", "quotas.examples.partition_quota"]


def test_importing_the_quota_core_leaves_trio_out():
    code = (
        f"import {', '.join(CORE_MODULES)}; import sys; "
        "bad = [m for m in ('trio', 'minibroker', 'storage') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=QUOTAS.parent)


def test_no_clock_reads_in_quotas():
    clock = re.compile(r"\btime\.(time|monotonic|perf_counter)(_ns)?\(|datetime\.now\(|^\s*(import|from)\s+trio\b", re.M)
    hits = [
        f"{path.name}: {m.group(0)}"
        for path in sorted(QUOTAS.rglob("*.py"))
        for m in clock.finditer(path.read_text())
    ]
    assert hits == []
