"""minibroker.testing.process_cpu, which the benchmarks read a broker's CPU time with."""

from __future__ import annotations

import os
import time

from minibroker.testing import process_cpu


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_process_cpu_is_the_schedulers_exact_count_not_clock_ticks():
    """Read of this process: the total agrees with CLOCK_PROCESS_CPUTIME_ID (the kernel's exact
    count for all threads) to well under one 10 ms clock tick, user and system add up to it, and
    work done in between is counted."""
    _spin(0.05)
    before_clock = time.process_time()
    user0, system0, _ = process_cpu(os.getpid())
    after_clock = time.process_time()
    assert before_clock - 0.002 <= user0 + system0 <= after_clock + 0.002
    assert user0 > 0 and system0 >= 0
    _spin(0.1)
    user1, system1, _ = process_cpu(os.getpid())
    assert 0.09 <= (user1 + system1) - (user0 + system0) <= 0.3
