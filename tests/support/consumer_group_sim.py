"""Test helpers for KIP-848 consumer groups: a topics image, and a simulated consumer that follows
the protocol as Java's AsyncKafkaConsumer does (join with epoch 0, heartbeat with its epoch and
owned partitions, revoke what the assignment no longer has before taking new partitions, rejoin
with epoch 0 when fenced or unknown).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable

from minibroker.groups.api import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResult
from minibroker.protocol.errors import ErrorCode


@dataclass
class FakeTopic:
    name: str
    topic_id: uuid.UUID
    num_partitions: int


class FakeTopics:
    """A TopicsImage: topics by name and id."""

    def __init__(self, **topics: int) -> None:
        self.by_name: dict[str, FakeTopic] = {}
        for name, partitions in topics.items():
            self.add(name, partitions)

    def add(self, name: str, partitions: int) -> FakeTopic:
        topic = self.by_name[name] = FakeTopic(name, uuid.uuid5(uuid.NAMESPACE_OID, name), partitions)
        return topic

    def id(self, name: str) -> uuid.UUID:
        return self.by_name[name].topic_id

    def topic(self, name: str) -> FakeTopic | None:
        return self.by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> FakeTopic | None:
        return next((t for t in self.by_name.values() if t.topic_id == topic_id), None)

    def topics(self) -> list[FakeTopic]:
        return list(self.by_name.values())


Heartbeat = Callable[[ConsumerGroupHeartbeatRequest], ConsumerGroupHeartbeatResult]


@dataclass
class SimConsumer:
    """A well-behaved KIP-848 consumer. `owned` is what it reports; it consumes from `holding()`: a
    partition enters when a response assigns it, and one a response no longer has is revoked in
    the background (`revoking`, still held) until its next heartbeat, which acknowledges it by
    leaving it out of the owned partitions, as Java's consumer does."""

    group_id: str
    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 30_000
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    revoking: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    last: ConsumerGroupHeartbeatResult | None = None
    errors: list[ErrorCode] = field(default_factory=list)

    def holding(self) -> set[tuple[uuid.UUID, int]]:
        """The partitions it may still be consuming from: owned, and revoking ones not yet let go."""
        return {(t, p) for a in (self.owned, self.revoking) for t, ps in a.items() for p in ps}

    def request(self, full: bool = False) -> ConsumerGroupHeartbeatRequest:
        joining = self.epoch == 0
        full = full or joining
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch,
            client_id=f"client-{self.member_id}", client_host="/127.0.0.1",
            instance_id=self.instance_id if full else None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=self.topics if full else None,
            server_assignor=self.server_assignor if full else None,
            owned={} if joining else {t: tuple(sorted(ps)) for t, ps in self.owned.items()},
        )

    def heartbeat(self, send: Heartbeat, full: bool = False) -> ConsumerGroupHeartbeatResult:
        self.revoking = {}  # the revocation finished before this heartbeat, which acknowledges it
        result = send(self.request(full))
        self.last = result
        if result.error in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            self.errors.append(result.error)
            self.owned = {}  # partitions lost; rejoin
            self.epoch = 0
        elif result.error:
            self.errors.append(result.error)
        else:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                new = {t: frozenset(ps) for t, ps in result.assignment.items() if ps}
                gone = {t: ps - new.get(t, frozenset()) for t, ps in self.owned.items()}
                self.revoking = {t: ps for t, ps in gone.items() if ps}
                self.owned = new
        return result

    def leave(self, send: Heartbeat, static_for_now: bool = False) -> ConsumerGroupHeartbeatResult:
        epoch = -2 if static_for_now else -1
        result = send(ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch, instance_id=self.instance_id))
        self.owned = {}
        self.revoking = {}
        self.epoch = 0
        return result

    def partitions(self, topic_id: uuid.UUID) -> set[int]:
        return set(self.owned.get(topic_id, ()))
