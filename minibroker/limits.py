"""Resource limits: how many partitions, connections and buffered request bytes the broker takes on.

Kafka's names and defaults wherever Kafka has the limit (README "Limits and failure behaviour").

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

Partitions and files:

- Open files. Like the JVM (which raises its soft RLIMIT_NOFILE to the hard limit at start,
  -XX:+MaxFDLimit), the broker raises its soft limit to the hard one.
- `max.broker.partitions` (the name KIP-578 proposed; Kafka shipped no such limit). Every partition
  holds at least three files open (`.log`, `.index`, `.timeindex`) plus one per older segment, so
  a client that names thousands of new topics would otherwise take every file descriptor and leave
  the broker unable to accept a connection or roll a segment until restarted. By default the cap
  is derived from the open-file limit: (RLIMIT_NOFILE - reserve) / 4, which keeps `reserve`
  descriptors (1024, or half the limit when that is less) for connections and the rest, and budgets
  four per partition: 128 partitions at a limit of 1024, 4,744 at 20,000.
- KRaft's own per-request cap: a CreateTopics asking for more than 10,000 partitions in all is
  refused whole with POLICY_VIOLATION "Excessively large number of partitions per request."

"""

from __future__ import annotations

import logging
from collections import Counter

import trio

log = logging.getLogger(__name__)

RESERVED_FILES = 1024  # connections, listeners, producer-id and offsets files, a roll in progress
FILES_PER_PARTITION = 4  # .log, .index, .timeindex, and one older segment's .log
MAX_PARTITIONS_PER_REQUEST = 10_000  # KRaft's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH


def open_file_limit() -> int:
    """The soft RLIMIT_NOFILE in force (a large number where the platform has none)."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return 1 << 20
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as the JVM does); returns the soft limit now
    in force."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return open_file_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    # macOS reports an infinite hard limit but refuses more than OPEN_MAX (10240): try that next.
    for wanted in (hard if hard != resource.RLIM_INFINITY else 1 << 20, 10240):
        if soft >= wanted:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as exc:
            log.debug("could not raise the open-file limit from %d to %d: %s", soft, wanted, exc)
            continue
        log.debug("raised the open-file limit from %d to %d", soft, wanted)
        soft = wanted
        break
    return soft


def derived_max_partitions(open_files: int) -> int:
    reserve = min(RESERVED_FILES, open_files // 2)  # a small limit still leaves room for topics
    return max(1, (open_files - reserve) // FILES_PER_PARTITION)


def max_broker_partitions(configured: int | None, open_files: int) -> int:
    """The partition cap in force: the configured one, or the one the open-file limit affords."""
    affordable = derived_max_partitions(open_files)
    if configured is None:
        return affordable
    if configured > affordable:
        log.warning(
            "max.broker.partitions=%d is more than the open-file limit (%d) affords (about %d "
            "partitions at %d files each); raise the limit (ulimit -n) or expect 'Too many open files'",
            configured, open_files, affordable, FILES_PER_PARTITION,
        )
    return configured


def partitions_in_use(logs) -> int:
    return sum(info.num_partitions for info in logs.topics())


def over_cap_message(name: str, wanted: int, in_use: int, cap: int) -> str:
    return (
        f"Unable to create topic {name} with {wanted} partition(s): the broker holds {in_use} of "
        f"max.broker.partitions={cap}."
    )


# ---- connections ---------------------------------------------------------------------------------


class ConnectionQuotas:
    """Open connections, broker-wide and per address (Kafka's ConnectionQuotas)."""

    def __init__(self, max_connections: int, max_per_ip: int, overrides: dict[str, int]) -> None:
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
        self.count += 1
        self.per_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
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
