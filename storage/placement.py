"""Where a new partition's replicas go: Kafka's striped replica placer (KRaft's
metadata/.../placement/StripedReplicaPlacer.java), rack-aware.

Goals, in Kafka's order: spread each partition's replicas over as many racks as there are (brokers
without `broker.rack` form one rack of their own), then spread the replicas and the leaders (the
first replica) evenly over the brokers, preferring unfenced brokers; constraints: no broker twice in
one partition, and the leader is an unfenced broker.

The algorithm: racks in sorted order (the rack-less one first), each with its unfenced and its fenced
brokers in sorted order. A partition takes its first replica from the next rack in turn that has an
unfenced broker left, then one replica from each following rack in turn (unfenced first, then
fenced), wrapping around; inside a rack, brokers come round-robin too. Each rack's list and the rack
list start at a random offset (so that two topics do not start on the same broker), and the start
moves by one per partition, which draws Kafka's "striped" pattern: with racks A, B, C and three
brokers each, partitions get A0 B0 C0, B1 C1 A1, C2 A2 B2. Once every unfenced broker has led a
partition, the racks and brokers are shuffled, so the same sets do not repeat. New partitions of an
existing topic continue after its last partition's leader.

Pure: the caller passes the random source (a seeded one in tests).
"""

from __future__ import annotations

import random as _random
from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["PlacementError", "UsableBroker", "place_replicas"]


class PlacementError(ValueError):
    """The replication factor cannot be met (Kafka's InvalidReplicationFactorException)."""


@dataclass(frozen=True, slots=True)
class UsableBroker:
    broker_id: int
    rack: str | None
    fenced: bool = False


class _Brokers:
    """One rack's brokers of one kind (fenced or not), handed out round-robin per placement epoch."""

    def __init__(self) -> None:
        self.brokers: list[int] = []
        self.index = 0
        self.offset = 0
        self.epoch = 0

    def start(self, rng: _random.Random, previous: int | None = None) -> None:
        self.brokers.sort()
        if self.brokers:
            self.offset = (previous + 1) % len(self.brokers) if previous is not None else rng.randrange(len(self.brokers))

    def next(self, epoch: int) -> int:
        """The next broker of this placement epoch, or -1 when all were handed out in it."""
        brokers = self.brokers
        if not brokers:
            return -1
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % len(brokers)
        if self.index >= len(brokers):
            return -1
        broker = brokers[(self.index + self.offset) % len(brokers)]
        self.index += 1
        return broker


class _Rack:
    def __init__(self) -> None:
        self.unfenced = _Brokers()
        self.fenced = _Brokers()

    def next(self, epoch: int) -> int:
        broker = self.unfenced.next(epoch)
        return broker if broker >= 0 else self.fenced.next(epoch)


def _rack_order(name: str | None) -> tuple[int, str]:
    return (0, "") if name is None else (1, name)


class _RackList:
    def __init__(self, rng: _random.Random, brokers: Iterable[UsableBroker],
                 existing: Sequence[Sequence[int]] = ()) -> None:
        self.rng = rng
        self.racks: dict[str | None, _Rack] = {}
        rack_of: dict[int, str | None] = {}
        self.total = self.unfenced = 0
        for broker in brokers:
            rack_of[broker.broker_id] = broker.rack
            rack = self.racks.setdefault(broker.rack, _Rack())
            if broker.fenced:
                rack.fenced.brokers.append(broker.broker_id)
            else:
                rack.unfenced.brokers.append(broker.broker_id)
                self.unfenced += 1
            self.total += 1
        for name, rack in self.racks.items():
            rack.fenced.start(rng)
            rack.unfenced.brokers.sort()
            rack.unfenced.start(rng, _previous_broker(existing, rack_of, name, rack.unfenced.brokers))
        self.names = sorted(self.racks, key=_rack_order)
        previous_rack = None
        if existing and existing[-1]:
            leader_rack = rack_of.get(existing[-1][0], _MISSING)
            if leader_rack is not _MISSING and leader_rack in self.names:
                previous_rack = self.names.index(leader_rack)
        if previous_rack is not None:
            self.offset = (previous_rack + 1) % len(self.names)
        else:
            self.offset = rng.randrange(len(self.names)) if self.names else 0
        self.epoch = 0

    def place(self, replication_factor: int) -> list[int]:
        if self.epoch == self.unfenced and self.unfenced > 1:
            self.rng.shuffle(self.names)
            for rack in self.racks.values():
                self.rng.shuffle(rack.unfenced.brokers)
                self.rng.shuffle(rack.fenced.brokers)
            self.epoch = 0
        if self.offset == len(self.names):
            self.offset = 0
        names, racks = self.names, self.racks
        first_rack = self.offset
        while True:  # the leader: an unfenced broker, from the first rack that has one left
            leader = racks[names[first_rack]].unfenced.next(self.epoch)
            if leader >= 0:
                break
            first_rack = (first_rack + 1) % len(names)
        replicas = [leader]
        rack_index = self.offset
        for _ in range(1, replication_factor):
            broker = -1
            while broker < 0:
                if rack_index == first_rack:
                    first_rack = -1  # the leader's rack gave its broker: the next round may use it
                else:
                    broker = racks[names[rack_index]].next(self.epoch)
                rack_index = (rack_index + 1) % len(names)
            replicas.append(broker)
        self.epoch += 1
        self.offset += 1
        return replicas


_MISSING = object()


def _previous_broker(existing: Sequence[Sequence[int]], rack_of: dict, rack: str | None,
                     unfenced: list[int]) -> int | None:
    """Where in this rack's unfenced list the last existing partition's replica in this rack sits."""
    for replicas in reversed(existing):
        for broker in replicas:
            broker_rack = rack_of.get(broker, _MISSING)
            if broker_rack is _MISSING:
                continue
            if broker_rack == rack:
                return unfenced.index(broker) if broker in unfenced else None
    return None


def place_replicas(brokers: Iterable[UsableBroker], partitions: int, replication_factor: int,
                   rng: _random.Random | None = None, existing: Sequence[Sequence[int]] = ()) -> list[list[int]]:
    """The replicas (leader first) of `partitions` new partitions; `existing`: the replicas of the
    topic's partitions so far (CreatePartitions continues after them). PlacementError with Kafka's
    message when the replication factor cannot be met."""
    rng = rng if rng is not None else _random.Random()
    racks = _RackList(rng, brokers, existing)
    if replication_factor <= 0:
        raise PlacementError(f"Invalid replication factor {replication_factor}: the replication factor must be positive.")
    if racks.unfenced == 0:
        raise PlacementError("All brokers are currently fenced.")
    if replication_factor > racks.total:
        raise PlacementError(f"The target replication factor of {replication_factor} cannot be reached because only "
                             f"{racks.total} broker(s) are registered.")
    return [racks.place(replication_factor) for _ in range(partitions)]
