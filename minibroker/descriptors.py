"""The process's descriptor limit and its one budget (minibroker.storage.descriptors), in the shell.

At start the soft RLIMIT_NOFILE is raised toward the hard limit, as servers commonly do (the JVM
does it by default, -XX:+MaxFDLimit): a macOS shell's soft limit of 256 usually sits under a hard
limit in the thousands. The limit then sets one process-wide `DescriptorBudget`: the limit minus a
reserve for the descriptors nobody draws (stdio, listeners, the data directory's lock, trio's epoll,
a file opened for a moment to write an index or a topic file, the recovery threads' reads). Brokers
in this process take shares of it: open segment files (`log.max.open.files`, by default half the
budget) and, with the connection limits (max.connections, docs/limits.md), client connections (the other half).

How connections join (max.connections, minibroker/server.py): take one share per broker,
`budget.share("connections", cap=<max.connections, at most budget.capacity - the files' cap>)`
with no reclaim callback; at accept, `if not share.try_acquire():` refuse the connection (Kafka's
acceptor stops accepting at max.connections), and `share.release()` when it closes. try_acquire
asks the file cache to close an idle file when the budget is full, so a connection is never refused
for a descriptor an idle file holds.
"""

from __future__ import annotations

import logging
import resource
import threading

from minibroker.storage.descriptors import DescriptorBudget

log = logging.getLogger(__name__)

RESERVED = 64  # descriptors outside the budget (see the module docstring) ...
MIN_RESERVED_SHARE = 4  # ... but at most a quarter of a tiny limit
RAISE_CEILING = 1 << 20  # an "unlimited" hard limit is raised to this much, no further
MACOS_OPEN_MAX = 10240  # what macOS accepts for the soft limit whatever the hard one says

_budget: DescriptorBudget | None = None
_limits: tuple[int, int, int] | None = None  # (soft at start, soft now, hard)
_lock = threading.Lock()


def raise_open_files_limit() -> tuple[int, int, int]:
    """Raise the soft RLIMIT_NOFILE toward the hard limit; (soft before, soft now, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = RAISE_CEILING if hard == resource.RLIM_INFINITY else min(hard, RAISE_CEILING)
    if soft != resource.RLIM_INFINITY and soft < target:
        for attempt in (target, min(target, MACOS_OPEN_MAX)):
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (attempt, hard))
                break
            except (ValueError, OSError):
                continue
    now, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, now, hard


def budget_capacity(limit: int) -> int:
    """The budget left by a descriptor limit once the reserve is taken out."""
    return max(2, limit - min(RESERVED, max(2, limit // MIN_RESERVED_SHARE)))


def process_budget() -> DescriptorBudget:
    """The process's budget, made (and the limit raised, and logged) the first time."""
    global _budget, _limits
    with _lock:
        if _budget is None:
            before, soft, hard = raise_open_files_limit()
            limit = soft if soft != resource.RLIM_INFINITY else RAISE_CEILING
            _limits = (before, limit, hard)
            _budget = DescriptorBudget(budget_capacity(limit))
            raised = f" (raised from {before})" if before != soft else ""
            hard_text = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
            log.info("file descriptors: limit %d%s, hard limit %s; %d for segment files and "
                     "connections", limit, raised, hard_text, _budget.capacity)
        return _budget


def open_files_limit() -> int:
    """The soft descriptor limit the process budget was made from."""
    process_budget()
    assert _limits is not None
    return _limits[1]


def default_open_files_cap(budget: DescriptorBudget) -> int:
    """log.max.open.files when it is not set: half of the budget, the other half for connections."""
    return max(1, budget.capacity // 2)
