"""The server-side partition assignors of KIP-848 consumer groups: `uniform` (Kafka's default) and
`range`, chosen per group by its members' `group.remote.assignor` (the heartbeat's ServerAssignor)
among those `group.consumer.assignors` enables.

An assignor computes a group's *target* assignment from its members' subscriptions (topic ids of
topics that exist), the partition counts, and the current target assignment, which is what makes
it sticky (Kafka's `ConsumerGroupPartitionAssignor.assign(GroupSpec, SubscribedTopicDescriber)`).
It never decides when a partition moves: the reconciliation (consumer_group.py) hands a partition
to its new owner only once the old one has revoked it.

uniform  Kafka's UniformAssignor, by its stated properties rather than its code:
         - homogeneous subscriptions (every member subscribes to the same topics): each member gets
           floor(P/N) or ceil(P/N) of the P partitions, and keeps as many of its current
           partitions as that allows; the ceil slots go to the members that hold the most already,
           so the fewest partitions move (Kafka gives them in member order, which can move more);
         - heterogeneous subscriptions: a partition goes only to a member subscribed to its topic;
           current partitions are kept, free ones go to the least-loaded eligible member (the most
           constrained partitions first), then partitions move from a member to an eligible one
           with at least two fewer until no such move is left: no single move makes it fairer.
range    Kafka's RangeAssignor: per topic, contiguous ranges over the members subscribed to it,
         ordered static members first by instance id, then the others by member id; the first
         P mod N members get one more. Co-partitioned when all members subscribe to the same
         topics of equal partition counts. Not sticky (by design, as in Kafka).

Pure functions of their arguments; deterministic (ties are broken by member id, then topic id).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Mapping

Assignment = Mapping[uuid.UUID, frozenset[int]]
TopicPartition = tuple[uuid.UUID, int]

UNIFORM = "uniform"
RANGE = "range"


class PartitionAssignorError(Exception):
    """The assignment cannot be computed (Kafka's PartitionAssignorException)."""


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of a member: its subscription (ids of existing topics) and its
    current target assignment."""

    topics: frozenset[uuid.UUID]
    assignment: Assignment = field(default_factory=dict)
    instance_id: str | None = None


def _freeze(owned: Mapping[str, set[TopicPartition]], members: Mapping[str, MemberSpec]
            ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for member_id in members:
        by_topic: dict[uuid.UUID, set[int]] = defaultdict(set)
        for topic_id, partition in owned.get(member_id, ()):
            by_topic[topic_id].add(partition)
        result[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result


def _retained(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
              ) -> dict[str, set[TopicPartition]]:
    """Each member's current partitions that it may keep: of a topic it subscribes to that still
    has the partition, and not claimed by a member earlier in id order (a target assignment never
    gives a partition twice, but a stale one must not make the assignor do so)."""
    claimed: set[TopicPartition] = set()
    kept: dict[str, set[TopicPartition]] = {}
    for member_id in sorted(members):
        spec = members[member_id]
        mine = set()
        for topic_id, ps in spec.assignment.items():
            if topic_id not in spec.topics or topic_id not in partitions:
                continue
            for p in ps:
                tp = (topic_id, p)
                if 0 <= p < partitions[topic_id] and tp not in claimed:
                    claimed.add(tp)
                    mine.add(tp)
        kept[member_id] = mine
    return kept


def _check_topics(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]) -> None:
    for member_id, spec in members.items():
        missing = spec.topics - partitions.keys()
        if missing:
            raise PartitionAssignorError(
                f"member {member_id} subscribes to topic(s) {sorted(map(str, missing))} without metadata")


def _sorted_partitions(topics, partitions: Mapping[uuid.UUID, int]) -> list[TopicPartition]:
    return [(t, p) for t in sorted(topics, key=str) for p in range(partitions[t])]


def uniform(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
            ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The uniform assignor: balanced and sticky (see the module docstring)."""
    if not members:
        return {}
    _check_topics(members, partitions)
    if len({spec.topics for spec in members.values()}) == 1:
        return _uniform_homogeneous(members, partitions)
    return _uniform_heterogeneous(members, partitions)


def _uniform_homogeneous(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                         ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    topics = next(iter(members.values())).topics
    every = _sorted_partitions(topics, partitions)
    kept = _retained(members, partitions)
    base, extra = divmod(len(every), len(members))
    # The members holding the most get the extra slots: the fewest partitions change hands.
    order = sorted(members, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    for m in order:
        if len(kept[m]) > quota[m]:
            surplus = sorted(kept[m], key=lambda tp: (str(tp[0]), tp[1]))[quota[m]:]
            kept[m] -= set(surplus)
    taken = set().union(*kept.values())
    free = iter(tp for tp in every if tp not in taken)
    for m in sorted(members):
        while len(kept[m]) < quota[m]:
            kept[m].add(next(free))
    assert next(free, None) is None, "the quotas add up to the partition count"
    return _freeze(kept, members)


def _uniform_heterogeneous(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                           ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    kept = _retained(members, partitions)
    subscribers: dict[uuid.UUID, list[str]] = defaultdict(list)
    for member_id in sorted(members):
        for topic_id in members[member_id].topics:
            subscribers[topic_id].append(member_id)
    owner = {tp: m for m, tps in kept.items() for tp in tps}
    free = [tp for tp in _sorted_partitions(subscribers, partitions) if tp not in owner]
    # The most constrained partitions (fewest eligible members) first.
    free.sort(key=lambda tp: len(subscribers[tp[0]]))
    for tp in free:
        eligible = subscribers[tp[0]]
        target = min(eligible, key=lambda m: (len(kept[m]), m))
        kept[target].add(tp)
        owner[tp] = target
    # Balance: move a partition to an eligible member holding at least two fewer, while one exists.
    # Each move lowers the sum of squared loads, so this ends.
    moved = True
    while moved:
        moved = False
        for giver in sorted(members, key=lambda m: (-len(kept[m]), m)):
            for tp in sorted(kept[giver], key=lambda tp: (str(tp[0]), -tp[1])):
                taker = min(subscribers[tp[0]], key=lambda m: (len(kept[m]), m))
                if len(kept[taker]) + 1 < len(kept[giver]):
                    kept[giver].remove(tp)
                    kept[taker].add(tp)
                    moved = True
                    break
            if moved:
                break
    return _freeze(kept, members)


def _range_order(members: Mapping[str, MemberSpec]) -> list[str]:
    """Static members first, by instance id; then the others by member id (Kafka's order)."""
    return sorted(members, key=lambda m: (0, members[m].instance_id, m) if members[m].instance_id is not None
                  else (1, "", m))


def range_assignor(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                   ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The range assignor: per topic, contiguous ranges in member order."""
    if not members:
        return {}
    _check_topics(members, partitions)
    order = _range_order(members)
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in members}
    topics = sorted(set().union(*(spec.topics for spec in members.values())), key=str)
    for topic_id in topics:
        subscribed = [m for m in order if topic_id in members[m].topics]
        base, extra = divmod(partitions[topic_id], len(subscribed))
        start = 0
        for i, m in enumerate(subscribed):
            end = start + base + (1 if i < extra else 0)
            if end > start:
                result[m][topic_id] = frozenset(range(start, end))
            start = end
    return result


ASSIGNORS: dict[str, Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]],
                              dict[str, dict[uuid.UUID, frozenset[int]]]]] = {
    UNIFORM: uniform,
    RANGE: range_assignor,
}

# group.consumer.assignors accepts Kafka's class names too.
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}
