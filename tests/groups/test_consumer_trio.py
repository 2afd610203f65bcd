"""KIP-848 consumer group timeouts through the coordinator's trio shell on trio's MockClock: the
timer task fences a member whose session ran out and one that did not revoke within its rebalance
timeout, exactly at those deadlines, and starts the sessions of members loaded from the records
when it starts, so a member that does not come back after a restart is fenced too. Virtual time:
a 10-second session takes no real time.
"""

from __future__ import annotations

import trio

from minibroker.groups.api import ConsumerGroupHeartbeatRequest, GroupConfig
from minibroker.groups.consumer_group import ConsumerGroup
from minibroker.groups.coordinator import GroupCoordinator
from minibroker.purgatory import Purgatory
from minibroker.storage.offsets_store import OffsetsStore
from tests.support.consumer_group_sim import FakeTopics, SimConsumer
from tests.support.clock import run

GROUP = "trio-cg"
SESSION_MS = 10_000


def make(store: OffsetsStore | None = None, topics: FakeTopics | None = None) -> GroupCoordinator:
    return GroupCoordinator(GroupConfig(consumer_session_timeout_ms=SESSION_MS), store, wall_clock_ms=lambda: 0,
                            purgatory=Purgatory("Group"), topics=topics or FakeTopics(t=4))


def send(c: GroupCoordinator):
    return lambda request: c.consumer_group_heartbeat(trio.current_time(), request)


def group(c: GroupCoordinator) -> ConsumerGroup:
    g = c.groups[GROUP]
    assert isinstance(g, ConsumerGroup)
    return g


async def heartbeat_every(c: GroupCoordinator, consumer: SimConsumer, seconds: float, until: float) -> None:
    while trio.current_time() < until:
        consumer.heartbeat(send(c))
        await trio.sleep(seconds)


def test_the_timer_task_fences_a_silent_member_at_its_session_end():
    async def main():
        c = make()
        a, b = SimConsumer(GROUP, "A", ("t",)), SimConsumer(GROUP, "B", ("t",))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            start = trio.current_time()
            for _ in range(4):
                a.heartbeat(send(c))
                b.heartbeat(send(c))
            assert sorted(len(m.owned[c.shard.topics.id("t")]) for m in (a, b)) == [2, 2]
            last_b = trio.current_time()
            # A keeps heartbeating every second; B goes silent.
            nursery.start_soon(heartbeat_every, c, a, 1.0, start + 30)
            await trio.sleep(SESSION_MS / 1000 - 0.001)
            assert "B" in group(c).members
            await trio.sleep(0.002)
            assert "B" not in group(c).members
            assert trio.current_time() - last_b >= SESSION_MS / 1000
            await trio.sleep(2)  # A's next heartbeats take B's partitions
            assert a.partitions(c.shard.topics.id("t")) == {0, 1, 2, 3}
            nursery.cancel_scope.cancel()

    run(main)


def test_a_member_that_does_not_revoke_in_time_is_fenced_at_its_rebalance_timeout():
    async def main():
        c = make()
        t = c.shard.topics.id("t")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            a = SimConsumer(GROUP, "A", ("t",), rebalance_timeout_ms=4000)
            a.heartbeat(send(c))
            b = SimConsumer(GROUP, "B", ("t",))
            b.heartbeat(send(c))
            # A is told to revoke two partitions but keeps reporting all four.
            c.consumer_group_heartbeat(trio.current_time(), ConsumerGroupHeartbeatRequest(
                GROUP, "A", 1, owned={t: (0, 1, 2, 3)}))
            asked = trio.current_time()
            for _ in range(3):
                await trio.sleep(1)
                c.consumer_group_heartbeat(trio.current_time(), ConsumerGroupHeartbeatRequest(
                    GROUP, "A", 1, owned={t: (0, 1, 2, 3)}))
                b.heartbeat(send(c))
            assert "A" in group(c).members and b.partitions(t) == set()
            await trio.sleep(asked + 4.0 - trio.current_time() + 0.001)
            assert "A" not in group(c).members
            b.heartbeat(send(c))
            b.heartbeat(send(c))
            assert b.partitions(t) == {0, 1, 2, 3}
            nursery.cancel_scope.cancel()

    run(main)


def test_members_loaded_from_the_records_get_a_session_when_the_timer_task_starts():
    async def main():
        store = OffsetsStore()
        topics = FakeTopics(t=4)
        first = make(store, topics)
        a, b = SimConsumer(GROUP, "A", ("t",)), SimConsumer(GROUP, "B", ("t",))
        for _ in range(4):
            a.heartbeat(send(first))
            b.heartbeat(send(first))
        epoch = group(first).group_epoch
        await trio.sleep(100)  # the broker is down for a while
        second = make(store, topics)  # a restart: the group is rebuilt from its records
        assert set(group(second).members) == {"A", "B"}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(second.run)
            started = trio.current_time()
            nursery.start_soon(heartbeat_every, second, a, 1.0, started + 30)  # only A comes back
            await trio.sleep(SESSION_MS / 1000 + 0.001)
            assert set(group(second).members) == {"A"}
            assert group(second).group_epoch == epoch + 1
            assert not a.errors, "A went on with its epoch"
            nursery.cancel_scope.cancel()

    run(main)
