"""A streams group's topology against the broker's topics (Kafka 4.4's InternalTopicManager,
RepartitionTopics, CopartitionedTopicsEnforcer and ChangelogTopics): how many tasks each subtopology
runs, how many partitions each internal topic needs, and which internal topics are still missing.

`configure_topics` answers, as Kafka's coordinator does at a heartbeat that (re)configures the
topology:

* source topics that do not exist -> MISSING_SOURCE_TOPICS ("Source topics a, b are missing."),
  no tasks;
* repartition topics: a declared partition count is kept; otherwise the largest partition count of
  the sources of the subtopology that writes them (iterated until every count is known; a loop that
  never resolves, or a repartition topic nobody writes, is STREAMS_INVALID_TOPOLOGY);
* copartition groups: their topics must have the same partition count (INCORRECTLY_PARTITIONED_TOPICS
  otherwise), repartition topics in them take the count of the others;
* changelog topics: as many partitions as their subtopology has tasks;
* an internal topic that exists with another partition count -> INCORRECTLY_PARTITIONED_TOPICS;
  internal topics that do not exist are returned to be created, and the status is
  MISSING_INTERNAL_TOPICS ("Internal topics are missing: a, b") until they do.

Each subtopology runs as many tasks as its largest input topic (source or repartition source) has
partitions. Pure: the topics come from a TopicsImage.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from minibroker.storage.streams_group_records import StoredTopology, Subtopology

if TYPE_CHECKING:
    from minibroker.groups.api import TopicsImage

log = logging.getLogger(__name__)

# StreamsGroupHeartbeatResponse's status codes (Kafka's StreamsGroupHeartbeatResponse.Status).
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5


class InvalidTopology(Exception):
    """STREAMS_INVALID_TOPOLOGY: the topology cannot be set up (an error of the request)."""


class TopicConfigurationError(Exception):
    """A status the heartbeat reports (MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS,
    MISSING_INTERNAL_TOPICS); the group stays NotReady."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class InternalTopic:
    """An internal topic as it must exist: what CreateTopics is given for it."""

    name: str
    partitions: int
    replication_factor: int  # -1: the broker's default
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ConfiguredSubtopology:
    number_of_tasks: int
    source_topics: frozenset[str]
    repartition_source_topics: dict[str, InternalTopic]
    repartition_sink_topics: frozenset[str]
    state_changelog_topics: dict[str, InternalTopic]

    @property
    def stateful(self) -> bool:
        return bool(self.state_changelog_topics)


@dataclass
class ConfiguredTopology:
    """Kafka's ConfiguredTopology: ready when `error` is None."""

    topology_epoch: int
    metadata_hash: int
    subtopologies: dict[str, ConfiguredSubtopology] | None
    to_create: dict[str, InternalTopic] = field(default_factory=dict)
    error: TopicConfigurationError | None = None

    @property
    def ready(self) -> bool:
        return self.error is None


def java_hash_order(names: Iterable[str]) -> list[str]:
    """`names` in the order a java.util.HashMap filled with them in this order iterates them (its
    bucket order: String.hashCode spread and masked by the table size, doubling from 16 past a load
    of 0.75), which is the order Kafka's messages list a HashMap's keys in."""
    unique = list(dict.fromkeys(names))
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = 0
        data = name.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
        h ^= h >> 16
        return h & (capacity - 1)
    return sorted(unique, key=lambda n: (bucket(n), unique.index(n)))


def summarize(topics: Iterable[str]) -> str:
    """Kafka's summarizeTopics: up to three names, then how many more."""
    names = list(topics)
    if not names:
        return "<none>"
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} additional topics" if len(names) > 3 else "")


def required_topics(topology: StoredTopology) -> list[str]:
    """Every topic the topology names (sources, repartition sinks and sources, changelogs), in
    order, once."""
    seen: dict[str, None] = {}
    for s in topology.subtopologies:
        for name in (*s.source_topics, *s.repartition_sink_topics, *(t.name for t in s.repartition_source_topics),
                     *(t.name for t in s.state_changelog_topics)):
            seen.setdefault(name, None)
    return list(seen)


def metadata_hash(topology: StoredTopology, topics: TopicsImage) -> int:
    """A 64-bit hash of the existing topics the topology names (name, id, partition count): what
    Kafka's metadata hash stands for; a change triggers a reconfiguration and a rebalance."""
    import hashlib

    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(required_topics(topology)):
        info = topics.topic(name)
        if info is not None:
            digest.update(f"{name}\0{info.topic_id}\0{info.num_partitions}\0".encode())
    return int.from_bytes(digest.digest(), "big", signed=True)


def configure_topics(topology: StoredTopology, topics: TopicsImage, hash_value: int) -> ConfiguredTopology:
    """Kafka's InternalTopicManager.configureTopics (see the module docstring). InvalidTopology
    propagates (an error of the heartbeat)."""
    decided: dict[str, int] = {}

    def count(name: str) -> int | None:
        info = topics.topic(name)
        if info is not None:
            return info.num_partitions
        return decided.get(name)

    try:
        missing = sorted({t for s in topology.subtopologies for t in s.source_topics if topics.topic(t) is None})
        if missing:
            raise TopicConfigurationError(MISSING_SOURCE_TOPICS, f"Source topics {summarize(missing)} are missing.")
        decided.update(_repartition_counts(topology.subtopologies, count))
        _enforce_copartitioning(topology.subtopologies, decided, count)
        for s in topology.subtopologies:
            tasks = _max_partitions(s, count)
            for changelog in s.state_changelog_topics:
                decided[changelog.name] = tasks
        configured = {s.subtopology_id: _configure(s, decided, count) for s in sorted(
            topology.subtopologies, key=lambda s: s.subtopology_id)}
        to_create: dict[str, InternalTopic] = {}
        for c in configured.values():
            to_create.update(c.repartition_source_topics)
            to_create.update(c.state_changelog_topics)
        for name in required_topics(topology):
            info = topics.topic(name)
            expected = to_create.pop(name, None) if info is not None else None
            if expected is not None and info is not None and info.num_partitions != expected.partitions:
                raise TopicConfigurationError(
                    INCORRECTLY_PARTITIONED_TOPICS,
                    f"Existing topic {name} has different number of partitions: expected {expected.partitions}, "
                    f"found {info.num_partitions}")
        error = None
        if to_create:
            # Kafka's topicsToCreate is a HashMap: its keys come in that map's order.
            error = TopicConfigurationError(MISSING_INTERNAL_TOPICS,
                                            f"Internal topics are missing: {summarize(java_hash_order(to_create))}")
        return ConfiguredTopology(topology.epoch, hash_value, configured, to_create, error)
    except TopicConfigurationError as exc:
        log.info("topology epoch %d not ready: %s", topology.epoch, exc)
        return ConfiguredTopology(topology.epoch, hash_value, None, {}, exc)


def _max_partitions(s: Subtopology, count: Callable[[str], int | None]) -> int:
    counts = [count(t) for t in (*s.source_topics, *(r.name for r in s.repartition_source_topics))]
    known = [c for c in counts if c is not None]
    if not counts:
        raise InvalidTopology(f"No source topics found for subtopology {s.subtopology_id}")
    if len(known) < len(counts):
        raise InvalidTopology(f"Subtopology {s.subtopology_id}: a source topic has no partition count")
    return max(known)


def _configure(s: Subtopology, decided: dict[str, int], count: Callable[[str], int | None]) -> ConfiguredSubtopology:
    def internal(info) -> InternalTopic:
        partitions = info.partitions or decided.get(info.name)
        if not partitions:
            raise InvalidTopology(f"Number of partitions must be set for topic {info.name}")
        return InternalTopic(info.name, partitions, info.replication_factor or -1, tuple(info.configs))

    return ConfiguredSubtopology(
        _max_partitions(s, count), frozenset(s.source_topics),
        {t.name: internal(t) for t in s.repartition_source_topics}, frozenset(s.repartition_sink_topics),
        {t.name: internal(t) for t in s.state_changelog_topics})


def _repartition_counts(subtopologies: tuple[Subtopology, ...], count: Callable[[str], int | None]) -> dict[str, int]:
    """Kafka's RepartitionTopics.setup."""
    counts: dict[str, int] = {}
    for s in subtopologies:
        for t in s.repartition_source_topics:
            if t.partitions != 0:
                counts[t.name] = t.partitions
    while True:
        needed = progress = False
        for s in subtopologies:
            for sink in s.repartition_sink_topics:
                if sink in counts:
                    continue
                candidates = [counts[t.name] for t in s.repartition_source_topics if t.name in counts]
                candidates += [c for c in (count(t) for t in s.source_topics) if c is not None]
                if candidates:
                    counts[sink] = max(candidates)
                    progress = True
                else:
                    needed = True
        if needed and not progress:
            raise InvalidTopology("Failed to compute number of partitions for all repartition topics. There may be "
                                  "loops in the topology that cannot be resolved.")
        if not needed:
            break
    for s in subtopologies:
        if any(t.name not in counts for t in s.repartition_source_topics):
            raise InvalidTopology("Failed to compute number of partitions for all repartition topics, because a "
                                  "repartition source topic is never used as a sink topic.")
    return counts


def _enforce_copartitioning(subtopologies: tuple[Subtopology, ...], decided: dict[str, int],
                            count: Callable[[str], int | None]) -> None:
    """Kafka's CopartitionedTopicsEnforcer over every copartition group."""
    fixed = {t.name for s in subtopologies for t in s.repartition_source_topics if t.partitions != 0}
    flexible = {t.name for s in subtopologies for t in s.repartition_source_topics if t.partitions == 0}

    def partitions(name: str) -> int:
        c = count(name)
        if c is None:
            raise InvalidTopology(f"Number of partitions is not set for topic: {name}")
        return c

    for s in subtopologies:
        for g in s.copartition_groups:
            group = {s.source_topics[i] for i in g.source_topics if 0 <= i < len(s.source_topics)} | {
                s.repartition_source_topics[i].name for i in g.repartition_source_topics
                if 0 <= i < len(s.repartition_source_topics)}
            if not group:
                continue
            repartition = {t: partitions(t) for t in group if t in fixed or t in flexible}
            others = {t: partitions(t) for t in group if t not in repartition}
            if set(repartition) == group:
                fixed_here = sorted(t for t in repartition if t in fixed)
                if fixed_here:
                    n = partitions(fixed_here[0])
                    if any(partitions(t) != n for t in fixed_here):
                        raise TopicConfigurationError(
                            INCORRECTLY_PARTITIONED_TOPICS,
                            f"Following topics do not have the same number of partitions: [{_java_map(repartition)}]")
                else:
                    n = max(repartition.values())
                    if n == 0:
                        raise InvalidTopology("All topics in the copartition group had undefined partition number: "
                                              f"{sorted(repartition)}")
            else:
                n = next(iter(others.values()))
                if any(v != n for v in others.values()):
                    raise TopicConfigurationError(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        f"Following topics do not have the same number of partitions: [{_java_map(others)}]")
            for t, c in repartition.items():
                decided[t] = n
                if t in fixed and c != n:
                    raise TopicConfigurationError(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        f"Number of partitions [{c}] of repartition topic [{t}] doesn't match number of partitions "
                        f"[{n}] of the source topic.")


def _java_map(values: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(values.items())) + "}"
