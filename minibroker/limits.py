"""Resource limits: how many partitions, connections and buffered request bytes the broker takes on.

Kafka's names and defaults wherever Kafka has the limit (docs/limits.md).

Connections (ConnectionQuotas, used by the accept loop in minibroker.server):

- `max.connections` (default unlimited): at the limit the broker stops accepting until a
  connection closes; new ones wait in the listen backlog (Kafka's acceptor blocks the same way).
- `max.connections.per.ip` (default unlimited) and `max.connections.per.ip.overrides`
  (`host:count,...`, hosts resolved at start): a connection beyond its address's limit is closed
  as soon as it is accepted (Kafka's TooManyConnectionsException).
- `connections.max.idle.ms` (default 600000; -1: never) and `sasl.server.max.receive.size`
  (default 524288, the largest frame before SASL authentication completes) are applied by the
  connection loop.

Request memory (RequestMemoryPool): `queued.max.request.bytes` (default -1: unbounded). When set,
the bytes of requests read but not yet handled are bounded: a connection whose next frame does not
fit waits, reading nothing more, until memory is released. As Kafka's SimpleMemoryPool (non-strict)
a frame is admitted while any memory is free, so one larger than what is left still goes through
and nothing can wait forever.

Partitions:

- `max.broker.partitions` (the name KIP-578 proposed; Kafka shipped no such limit), default 50,000.
  An idle partition holds no file descriptor (minibroker.storage.file_cache), but it costs about 3 KB of
  memory and a directory, so a client naming thousands of new topics in every Metadata request
  could otherwise grow the broker without bound.
- KRaft's own per-request cap: a CreateTopics asking for more than 10,000 partitions in all is
  refused whole with POLICY_VIOLATION "Excessively large number of partitions per request."

"""

from __future__ import annotations

import logging
from collections import Counter

import trio

log = logging.getLogger(__name__)

MAX_PARTITIONS_PER_REQUEST = 10_000  # KRaft's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH


def partitions_in_use(logs) -> int:
    return sum(info.num_partitions for info in logs.topics())


def over_cap_message(name: str, wanted: int, in_use: int, cap: int) -> str:
    return (
        f"Unable to create topic {name} with {wanted} partition(s): the broker holds {in_use} of "
        f"max.broker.partitions={cap}."
    )


# ---- connections ---------------------------------------------------------------------------------


class ConnectionQuotas:
    """Open connections, broker-wide and per address (Kafka's ConnectionQuotas).

    Each connection also holds a descriptor of the process's budget (`share`, see
    minibroker.descriptors): the broker-wide limit is `max.connections` or the share's cap, whichever
    is less, so connections can never take the descriptors segment files need."""

    def __init__(self, max_connections: int, max_per_ip: int, overrides: dict[str, int], share=None) -> None:
        self.share = share
        if share is not None and share.cap < max_connections:
            max_connections = share.cap
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = dict(overrides)
        self.count = 0
        self.per_ip: Counter[str] = Counter()
        self.accept_waits = 0  # times accepting paused at max.connections
        self.rejected_per_ip = 0  # connections closed for max.connections.per.ip
        self._freed: trio.Event | None = None

    def ip_limit(self, ip: str) -> int:
        return self.overrides.get(ip, self.max_per_ip)

    async def wait_for_slot(self) -> None:
        """Return once a connection may be accepted (at once below max.connections)."""
        if self.count < self.max_connections:
            return
        self.accept_waits += 1
        log.warning("max.connections=%d reached: accepting no more connections until one closes",
                    self.max_connections)
        while self.count >= self.max_connections:
            if self._freed is None:
                self._freed = trio.Event()
            await self._freed.wait()

    def admit(self, ip: str) -> bool:
        """Count a new connection from `ip`; False (and nothing counted) when over its limit."""
        if self.per_ip[ip] >= self.ip_limit(ip):
            self.rejected_per_ip += 1
            return False
        if self.share is not None and not self.share.try_acquire():
            # Only descriptors outside the budget can be short here (the cap keeps count below it).
            return False
        self.count += 1
        self.per_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        if self.share is not None:
            self.share.release()
        self.count -= 1
        self.per_ip[ip] -= 1
        if not self.per_ip[ip]:
            del self.per_ip[ip]
        if self._freed is not None:
            self._freed.set()
            self._freed = None


# ---- request memory ------------------------------------------------------------------------------


class RequestMemoryPool:
    """Bytes of requests read and not yet handled, bounded by queued.max.request.bytes (-1: not)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self.waits = 0  # times a connection waited for memory
        self._freed: trio.Event | None = None

    @property
    def bounded(self) -> bool:
        return self.max_bytes > 0

    async def acquire(self, size: int) -> None:
        """Take `size` bytes, waiting while none are free (non-strict, as Kafka's broker pool)."""
        if not self.bounded:
            return
        if self.used >= self.max_bytes:
            self.waits += 1
            while self.used >= self.max_bytes:
                if self._freed is None:
                    self._freed = trio.Event()
                await self._freed.wait()
        self.used += size

    def release(self, size: int) -> None:
        if not self.bounded:
            return
        self.used -= size
        if self._freed is not None:
            self._freed.set()
            self._freed = None
