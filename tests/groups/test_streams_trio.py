"""KIP-1071 streams group timeouts and static members through the coordinator's trio shell on
trio's MockClock: the timer task fences a member whose session ran out and one that did not revoke
its tasks within its rebalance timeout, exactly at those deadlines; a new group waits
group.streams.initial.rebalance.delay.ms before its first assignment (ASSIGNMENT_DELAYED); a static
member that leaves for a while (epoch -2) keeps its tasks for its next incarnation. Virtual time:
a 10-second session takes no real time.
"""

from __future__ import annotations

import trio
import trio.testing

from minibroker.groups.api import STREAMS, GroupConfig
from minibroker.groups.coordinator import GroupCoordinator
from minibroker.groups.streams_group import StreamsGroup
from minibroker.groups.streams_manager import StreamsGroupHeartbeatRequest, StreamsGroupManager
from minibroker.purgatory import Purgatory
from minibroker.storage.streams_group_records import StoredTopology, Subtopology
from tests.support.consumer_group_sim import FakeTopics

GROUP = "trio-sg"
SESSION_MS = 10_000
TOPOLOGY = StoredTopology(0, (Subtopology("0", source_topics=("t",)),))  # stateless: no internal topics


def make(**settings) -> GroupCoordinator:
    config = GroupConfig(streams_session_timeout_ms=SESSION_MS, **settings)
    return GroupCoordinator(config, wall_clock_ms=lambda: int(trio.current_time() * 1000),
                            purgatory=Purgatory("Group"), topics=FakeTopics(t=4))


class Member:
    def __init__(self, c: GroupCoordinator, member_id: str, process: str, instance: str | None = None,
                 rebalance_timeout_ms: int = 30_000) -> None:
        self.c, self.member_id, self.process, self.instance = c, member_id, process, instance
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.epoch, self.active = 0, {}
        self.statuses: list[int] = []

    def beat(self, epoch: int | None = None, keep: dict | None = None):
        """A heartbeat; `keep` is what it reports owning (its tasks by default)."""
        manager: StreamsGroupManager = self.c.manager(STREAMS)  # type: ignore[assignment]
        epoch = self.epoch if epoch is None else epoch
        owned = self.active if keep is None else keep
        request = StreamsGroupHeartbeatRequest(
            GROUP, self.member_id, epoch, instance_id=self.instance,
            rebalance_timeout_ms=self.rebalance_timeout_ms if epoch == 0 else -1,
            topology=TOPOLOGY if epoch == 0 else None, active=dict(owned) if epoch >= 0 else None,
            standby={} if epoch >= 0 else None, warmup={} if epoch >= 0 else None,
            process_id=self.process if epoch == 0 else None, client_tags=() if epoch == 0 else None)
        result = self.c.apply(lambda now, now_ms: manager.heartbeat(now, now_ms, request))
        assert result.error == 0, result.message
        self.epoch = result.member_epoch
        self.statuses = [code for code, _ in result.status or ()]
        if result.active is not None:
            self.active = result.active
        return result

    def tasks(self) -> set[int]:
        return set(self.active.get("0", ()))


def group(c: GroupCoordinator) -> StreamsGroup:
    g = c.groups[GROUP]
    assert isinstance(g, StreamsGroup)
    return g


async def beat_every(member: Member, seconds: float, until: float) -> None:
    while trio.current_time() < until:
        member.beat()
        await trio.sleep(seconds)


def test_the_timer_task_fences_a_silent_member_at_its_session_end():
    async def main():
        c = make()
        a, b = Member(c, "A", "p1"), Member(c, "B", "p2")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            for _ in range(3):
                a.beat()
                b.beat()
            assert sorted(len(m.tasks()) for m in (a, b)) == [2, 2]
            epoch = group(c).group_epoch
            last_b = trio.current_time()
            nursery.start_soon(beat_every, a, 1.0, trio.current_time() + 30)
            await trio.sleep(SESSION_MS / 1000 - 0.001)
            assert "B" in group(c).members
            await trio.sleep(0.002)
            assert "B" not in group(c).members and group(c).group_epoch == epoch + 1
            assert trio.current_time() - last_b >= SESSION_MS / 1000
            await trio.sleep(2)  # A's next heartbeats take B's tasks
            assert a.tasks() == {0, 1, 2, 3}
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_member_that_does_not_revoke_in_time_is_fenced_at_its_rebalance_timeout():
    async def main():
        c = make()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            a = Member(c, "A", "p1", rebalance_timeout_ms=4000)
            a.beat()
            assert a.tasks() == {0, 1, 2, 3}
            b = Member(c, "B", "p2")
            b.beat()
            # A is asked to give two tasks up, and keeps reporting all four.
            held = dict(a.active)
            a.beat(keep=held)
            asked_at = trio.current_time()
            assert len(a.tasks()) == 2 and group(c).members["A"].state.name == "UNREVOKED_TASKS"
            nursery.start_soon(beat_every, b, 1.0, asked_at + 30)

            async def a_keeps_everything():
                while True:
                    a.beat(keep=held)
                    # Off the 1 s grid: no beat at the fencing instant itself, whose order
                    # against the timer task's is trio's to choose.
                    await trio.sleep(0.7)
            a_scope = trio.CancelScope()

            async def run_a():
                with a_scope:
                    await a_keeps_everything()
            nursery.start_soon(run_a)
            await trio.sleep(4 - 0.001)
            assert "A" in group(c).members
            await trio.sleep(0.002)
            assert "A" not in group(c).members  # fenced: its epoch never moved
            a_scope.cancel()
            await trio.sleep(2)
            assert b.tasks() == {0, 1, 2, 3}
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_new_group_waits_its_initial_rebalance_delay():
    async def main():
        c = make(streams_initial_rebalance_delay_ms=3000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            a = Member(c, "A", "p1")
            a.beat()
            assert 5 in a.statuses and a.tasks() == set()  # ASSIGNMENT_DELAYED
            await trio.sleep(1)
            b = Member(c, "B", "p2")
            b.beat()
            assert 5 in b.statuses
            await trio.sleep(2.001)
            a.beat()
            b.beat()
            a.beat()
            # One assignment for both, once the delay is over.
            assert sorted(len(m.tasks()) for m in (a, b)) == [2, 2] and 5 not in a.statuses
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_static_member_leaving_for_a_while_keeps_its_tasks_for_its_next_incarnation():
    async def main():
        c = make()
        a, b = Member(c, "A", "p1", instance="i-a"), Member(c, "B1", "p2", instance="i-b")
        for _ in range(3):
            a.beat()
            b.beat()
        b_tasks, epoch = b.tasks(), group(c).group_epoch
        assert b.beat(epoch=-2).member_epoch == -2
        assert group(c).members["B1"].member_epoch == -2 and group(c).state_name == "Reconciling"
        b2 = Member(c, "B2", "p2", instance="i-b")
        b2.beat()
        b2.beat()
        assert b2.tasks() == b_tasks and group(c).group_epoch == epoch
        assert set(group(c).members) == {"A", "B2"}

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
