"""minibroker.testing.process_cpu, which the benchmarks read a broker's CPU time with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, threading, time
from minibroker.testing import process_cpu

def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

spin(0.05)
before = time.process_time()
user0, system0, _ = process_cpu(os.getpid())
after = time.process_time()
# exact: within a millisecond of the kernel's count for the process, not a 10 ms clock tick
assert before - 0.001 <= user0 + system0 <= after + 0.001, (before, user0 + system0, after)
assert user0 > 0 and system0 >= 0
spin(0.1)
user1, system1, _ = process_cpu(os.getpid())
assert 0.09 <= (user1 + system1) - (user0 + system0) <= 0.3
# a thread that has exited is gone from /proc/PID/task: its time is not lost (the ticks count it)
worker = threading.Thread(target=spin, args=(0.2,))
worker.start()
worker.join()
user2, system2, _ = process_cpu(os.getpid())
assert (user2 + system2) - (user1 + system1) >= 0.17, (user1 + system1, user2 + system2)
print("ok")
"""


def test_process_cpu_is_the_schedulers_exact_count_and_keeps_exited_threads():
    """In a process of its own: the total agrees with CLOCK_PROCESS_CPUTIME_ID to well under one
    10 ms clock tick, work done in between is counted, and so is the work of a thread that has
    exited since (then from the clock ticks, which count it)."""
    result = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
