"""The delayed-operation purgatory (Kafka's DelayedOperation / DelayedOperationPurgatory).

A request that cannot be answered yet (a Fetch below min_bytes, a group join waiting for members, a
follower's SyncGroup waiting for the leader's assignment) becomes a DelayedOperation and waits here.
(A quota throttle does not: the connection loop sleeps it out, server.py.) It is watched
under keys (a topic-partition, a group id); whoever changes what a key stands for calls
`check_and_complete(key)`, which retries the watchers. Each operation completes exactly once: either
`try_complete` finds its condition met, or its deadline passes and `on_expiration` runs first.

Kafka arms a hierarchical timing wheel per operation; here the waiting connection task owns the
deadline (on the broker's clock: `BrokerClock.move_on_at`, so moving the clock expires what is due),
which gives the same behaviour with trio's own timer queue. Kafka's order is kept: try, watch, try
again, then wait, so a completion that races the watch is not lost.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Iterable

import trio

from minibroker.clock import BrokerClock


class DelayedOperation:
    """Subclasses override `try_complete` (call `force_complete` when the condition holds),
    `on_complete` (build the result), and optionally `on_expiration`."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.completed = False
        self.expired = False
        self._done = trio.Event()

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        pass

    def force_complete(self) -> bool:
        """Complete now; False if it was already completed (exactly once)."""
        if self.completed:
            return False
        self.completed = True
        self.on_complete()
        self._done.set()
        return True


class Purgatory:
    def __init__(self, name: str, clock: BrokerClock | None = None) -> None:
        """`clock`: what the operations' deadlines are on (a new BrokerClock by default)."""
        self.name = name
        self.clock = clock if clock is not None else BrokerClock()
        self._watchers: defaultdict[Hashable, set[DelayedOperation]] = defaultdict(set)
        self.waiting = 0  # operations now in purgatory, for metrics
        self.expired = 0  # operations that reached their deadline, for metrics and tests

    async def wait(self, op: DelayedOperation, keys: Iterable[Hashable]) -> DelayedOperation:
        """Complete `op` now if possible, else watch `keys` until it completes or expires."""
        if op.try_complete():
            return op
        keys = list(keys)
        for key in keys:
            self._watchers[key].add(op)
        self.waiting += 1
        try:
            if not op.try_complete():
                with self.clock.move_on_at(op.deadline):
                    await op._done.wait()
                if not op.completed:
                    op.expired = True
                    self.expired += 1
                    op.on_expiration()
                    op.force_complete()
        finally:
            self.waiting -= 1
            for key in keys:
                watchers = self._watchers.get(key)
                if watchers is not None:
                    watchers.discard(op)
                    if not watchers:
                        del self._watchers[key]
        return op

    def check_and_complete(self, key: Hashable) -> int:
        """Retry the operations watching `key`; returns how many completed."""
        watchers = self._watchers.get(key)
        if not watchers:
            return 0
        return sum(1 for op in list(watchers) if not op.completed and op.try_complete())

    def complete_all(self) -> int:
        """Complete every operation waiting (its broker is going away): each reads what is there
        now, or the error it finds. Returns how many."""
        ops = {op for watchers in self._watchers.values() for op in watchers if not op.completed}
        return sum(1 for op in ops if op.force_complete())

    def watched(self, key: Hashable) -> int:
        return len(self._watchers.get(key, ()))
