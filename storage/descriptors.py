"""The process's file descriptors as one budget, shared by open log files and client connections.

A process may hold at most RLIMIT_NOFILE descriptors, and everything that holds one draws on the
same table: segment files, sockets, the data directory's lock, trio's own. Formerly, with every
partition holding its files open from creation on, a broker under `ulimit -n 1024` failed near 330
partitions. So the holders that grow with use (segment files, log.max.open.files; connections,
max.connections) each take a `Share` of one `DescriptorBudget` and draw on it before opening
anything; what they cannot get, they go without (a file cache closes its least recently used file;
a listener refuses or waits), never the process as a whole.

    budget = DescriptorBudget(capacity)          # the soft limit minus a reserve, see minibroker.descriptors
    files = budget.share("files", cap=480, reclaim=cache.reclaim)
    if files.try_acquire(): ...open one...       # False: over the share's cap, or the budget is full
    files.release()                              # after closing it

A share draws at most `cap` descriptors, and all shares together at most `capacity`. When the budget
is full, `try_acquire` asks the OTHER shares' `reclaim` callbacks to give one back (a file cache
closes an idle file: a reopen costs microseconds) before it says no; a share with no `reclaim`
(connections: a client's socket cannot be taken back) is never asked. So connections can always
push idle files out, up to the connection cap, and files can never push out a connection.

The descriptors a process uses for a moment (an index file being written, a directory being
fsynced, a topic file being read) and the fixed ones (stdio, listeners, the lock, trio's epoll)
are not drawn from the budget: its capacity leaves a reserve for them.

Pure bookkeeping, thread-safe (start-up recovery opens files from worker threads): it opens and
closes nothing itself; reclaim callbacks run outside its lock, so they may take their own.
"""

from __future__ import annotations

import threading
from typing import Callable


class Share:
    """One kind of holder's part of a `DescriptorBudget`. Use `DescriptorBudget.share`."""

    def __init__(self, budget: DescriptorBudget, name: str, cap: int,
                 reclaim: Callable[[], bool] | None) -> None:
        self.budget = budget
        self.name = name
        self.cap = cap
        self.reclaim = reclaim  # give one descriptor back to the budget: True if one was closed
        self.in_use = 0
        self.refused = 0  # try_acquire calls answered False (for metrics and messages)

    def try_acquire(self) -> bool:
        """Count one more descriptor held by this share, if the cap and the budget allow."""
        return self.budget._acquire(self)

    def release(self) -> None:
        """Count one descriptor of this share as closed."""
        self.budget._release(self)

    def close(self) -> None:
        """Leave the budget (the share's holder has closed everything it held)."""
        self.budget._remove(self)

    def __repr__(self) -> str:
        return f"Share({self.name!r}, {self.in_use}/{self.cap})"


class DescriptorBudget:
    """At most `capacity` descriptors among all shares (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a descriptor budget needs a capacity of at least 1, not {capacity}")
        self.capacity = capacity
        self.in_use = 0
        self._shares: list[Share] = []
        self._lock = threading.Lock()

    def share(self, name: str, cap: int, reclaim: Callable[[], bool] | None = None) -> Share:
        """A new share of at most `cap` descriptors (several shares may have the same name: two
        brokers in one process each have their own "files")."""
        if cap < 1:
            raise ValueError(f"share {name!r} needs a cap of at least 1, not {cap}")
        share = Share(self, name, cap, reclaim)
        with self._lock:
            self._shares.append(share)
        return share

    @property
    def available(self) -> int:
        return self.capacity - self.in_use

    def describe(self) -> str:
        """'960 descriptors: 12 in use (files 10/480, connections 2/480)', for messages and logs."""
        with self._lock:
            parts = ", ".join(f"{s.name} {s.in_use}/{s.cap}" for s in self._shares)
            return f"{self.capacity} descriptors: {self.in_use} in use ({parts or 'no shares'})"

    # -- the Share methods ------------------------------------------------------------------------

    def _acquire(self, share: Share) -> bool:
        tried: set[int] = set()
        while True:
            with self._lock:
                if share.in_use >= share.cap:
                    share.refused += 1
                    return False
                if self.in_use < self.capacity:
                    share.in_use += 1
                    self.in_use += 1
                    return True
                others = [s for s in self._shares
                          if s is not share and s.reclaim is not None and s.in_use and id(s) not in tried]
            # Full: ask another share to give one back (outside the lock: its callback takes its own
            # lock, and may release into this budget).
            for other in others:
                if other.reclaim is not None and other.reclaim():
                    break
                tried.add(id(other))
            else:
                with self._lock:
                    share.refused += 1
                return False

    def _release(self, share: Share) -> None:
        with self._lock:
            if share.in_use <= 0:
                raise RuntimeError(f"{share!r} released more descriptors than it acquired")
            share.in_use -= 1
            self.in_use -= 1

    def _remove(self, share: Share) -> None:
        with self._lock:
            if share in self._shares:
                self._shares.remove(share)
                self.in_use -= share.in_use
                share.in_use = 0
