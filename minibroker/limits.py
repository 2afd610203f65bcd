"""Resource limits: how many partitions, connections and buffered request bytes the broker takes on.

Kafka's names and defaults wherever Kafka has the limit (README "Limits and failure behaviour"):

- Open files. Like the JVM (which raises its soft RLIMIT_NOFILE to the hard limit at start,
  -XX:+MaxFDLimit), the broker raises its soft limit to the hard one.
- `max.broker.partitions` (the name KIP-578 proposed; Kafka shipped no such limit). Every partition
  holds at least three files open (`.log`, `.index`, `.timeindex`) plus one per older segment, so
  a client that names thousands of new topics would otherwise take every file descriptor and leave
  the broker unable to accept a connection or roll a segment until restarted. By default the cap
  is derived from the open-file limit: (RLIMIT_NOFILE - 1024) / 4, which keeps 1024 descriptors
  for connections and the rest and budgets four per partition.
- KRaft's own per-request cap: a CreateTopics asking for more than 10,000 partitions in all is
  refused whole with POLICY_VIOLATION "Excessively large number of partitions per request."

Pure apart from reading and raising the process's file limit.
"""

from __future__ import annotations

import logging

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
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            log.debug("raised the open-file limit from %d to %d", soft, wanted)
            soft = wanted
        except (ValueError, OSError) as exc:  # e.g. macOS caps below the reported hard limit
            log.debug("could not raise the open-file limit from %d: %s", soft, exc)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def derived_max_partitions(open_files: int) -> int:
    return max(1, (open_files - RESERVED_FILES) // FILES_PER_PARTITION)


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
