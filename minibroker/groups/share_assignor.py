"""The server-side assignor of share groups: Kafka's `simple` (SimpleAssignor, the only one
`group.share.assignors` offers), by its stated properties.

In a share group a partition may go to several members, so the assignor decides how many members
share each partition and how many partitions each member gets:

* with P assignable partitions and M members, each partition is shared by
  `desired_sharing = ceil(M / P)` members, and the `desired_sharing * P` (member, partition) slots
  are spread over the members as evenly as they go (member i gets
  `ceil(s * (i + 1)) - ceil(s * i)` of them, s = desired_sharing * P / M): with fewer members than
  partitions every partition has one member and the members split them; with more, every member
  gets (at least) one partition and the partitions are shared;
* it is sticky: a member keeps its current partitions while they are assignable, within its quota,
  and on partitions not over-shared; only the rest is handed out again;
* members that subscribe to different topics (a heterogeneous group) are assigned topic by topic,
  each topic's partitions among the members subscribed to it, by the same rules.

Only assignable partitions (share partitions whose state is initialized) take part. Pure and
deterministic: members by id, partitions by (topic id, index).
"""

from __future__ import annotations

import math
import uuid
from collections import defaultdict
from typing import Callable, Mapping

__all__ = ["SIMPLE", "simple_assign"]

SIMPLE = "simple"

TopicPartition = tuple[uuid.UUID, int]
Assignment = Mapping[uuid.UUID, frozenset[int]]


def simple_assign(subscriptions: Mapping[str, frozenset[uuid.UUID]], current: Mapping[str, Assignment],
                  partitions: Mapping[uuid.UUID, int],
                  assignable: Callable[[uuid.UUID, int], bool]) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The target assignment of every member: `subscriptions` are their topic ids (of topics that
    exist), `current` their current target, `partitions` each topic's partition count."""
    if not subscriptions:
        return {}
    groups: dict[frozenset[uuid.UUID], list[str]] = defaultdict(list)
    for member_id in sorted(subscriptions):
        groups[subscriptions[member_id]].append(member_id)
    owned: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    if len(groups) == 1:
        topics, members = next(iter(groups.items()))
        _assign(members, _targets(topics, partitions, assignable), current, owned)
    else:
        subscribers: dict[uuid.UUID, list[str]] = defaultdict(list)
        for member_id in sorted(subscriptions):
            for topic_id in subscriptions[member_id]:
                subscribers[topic_id].append(member_id)
        for topic_id in sorted(subscribers, key=str):
            _assign(subscribers[topic_id], _targets({topic_id}, partitions, assignable), current, owned)
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for member_id, tps in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = defaultdict(set)
        for topic_id, p in tps:
            by_topic[topic_id].add(p)
        result[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result


def _targets(topics, partitions: Mapping[uuid.UUID, int], assignable: Callable[[uuid.UUID, int], bool]) -> list[TopicPartition]:
    return [(t, p) for t in sorted(topics, key=str) for p in range(partitions.get(t, 0)) if assignable(t, p)]


def _assign(members: list[str], targets: list[TopicPartition], current: Mapping[str, Assignment],
            owned: dict[str, set[TopicPartition]]) -> None:
    """Spread `targets` over `members` (see the module docstring), adding to `owned`."""
    if not members or not targets:
        return
    sharing = math.ceil(len(members) / len(targets))
    slots = sharing * len(targets) / len(members)
    quota = {m: math.ceil(slots * (i + 1)) - math.ceil(slots * i) for i, m in enumerate(members)}
    target_set = set(targets)
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in targets}
    mine: dict[str, list[TopicPartition]] = {m: [] for m in members}
    # Keep current partitions that are still assignable, within each member's quota.
    for member_id in members:
        kept = sorted((t, p) for t, ps in current.get(member_id, {}).items() for p in ps if (t, p) in target_set)
        for tp in kept[:quota[member_id]]:
            mine[member_id].append(tp)
            holders[tp].append(member_id)
    # No partition shared by more members than the desired sharing.
    for tp in targets:
        while len(holders[tp]) > sharing:
            member_id = holders[tp].pop()
            mine[member_id].remove(tp)
    # Hand out the remaining slots: the least-shared partitions first, to members short of their quota.
    for tp in sorted(targets, key=lambda tp: (len(holders[tp]), tp[0].bytes, tp[1])):
        while len(holders[tp]) < sharing:
            candidates = [m for m in members if len(mine[m]) < quota[m] and tp not in mine[m]]
            if not candidates:
                break
            member_id = min(candidates, key=lambda m: (len(mine[m]) - quota[m], members.index(m)))
            mine[member_id].append(tp)
            holders[tp].append(member_id)
    # A partition still without a member (quotas filled by kept partitions): the least-loaded member takes it.
    for tp in targets:
        if not holders[tp]:
            member_id = min(members, key=lambda m: (len(mine[m]), members.index(m)))
            mine[member_id].append(tp)
            holders[tp].append(member_id)
    for member_id in members:
        owned[member_id].update(mine[member_id])
