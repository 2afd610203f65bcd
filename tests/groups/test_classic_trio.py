"""The coordinator's trio side on trio's MockClock: parked joins and syncs in the purgatory
(DelayedJoin / DelayedSync) and the timer task, with virtual time, so a 10-second rebalance timeout
takes no real time and every deadline is exact.
"""

from __future__ import annotations

import trio

from minibroker.groups.api import GroupConfig, JoinResult, SyncResult
from minibroker.groups.classic_group import EMPTY, PREPARING_REBALANCE, STABLE
from minibroker.groups.coordinator import DelayedSync, GroupCoordinator
from minibroker.purgatory import Purgatory
from minibroker.protocol.errors import ErrorCode
from tests.support.clock import run

GROUP = "trio-group"
SESSION_MS, REBALANCE_MS = 6000, 10_000


def make(**config) -> GroupCoordinator:
    return GroupCoordinator(GroupConfig(**config), wall_clock_ms=lambda: 0, purgatory=Purgatory("Group"))


async def join(c: GroupCoordinator, member_id: str = "", name: str = "m") -> JoinResult:
    """A v5 client's join: the KIP-394 round trip when it has no id yet, then the parked join."""
    while True:
        pending = c.join_group(
            trio.current_time(), group_id=GROUP, member_id=member_id, group_instance_id=None,
            client_id=name, client_host="/127.0.0.1", session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS, protocol_type="consumer",
            protocols=[("range", name.encode())], require_known_member_id=True)
        result = await c.wait_for(pending, GROUP)
        if result.error != ErrorCode.member_id_required:
            return result
        member_id = result.member_id


async def sync(c: GroupCoordinator, join_result: JoinResult, assignments=None) -> SyncResult:
    pending = c.sync_group(
        trio.current_time(), group_id=GROUP, generation_id=join_result.generation_id,
        member_id=join_result.member_id, group_instance_id=None, protocol_type=None,
        protocol_name=None, assignments=assignments or {})
    return await c.wait_for(pending, GROUP, DelayedSync)




def test_initial_delay_gathers_members_into_one_generation():
    """Two consumers a second apart join a new group in one generation, at the (extended) delay."""
    coordinator = make(initial_rebalance_delay_ms=3000)
    results = {}

    async def member(name: str, start: float) -> None:
        await trio.sleep(start)
        results[name] = (await join(coordinator, name=name), trio.current_time())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinator.run)
            async with trio.open_nursery() as members:
                members.start_soon(member, "a", 0)
                members.start_soon(member, "b", 1)
            nursery.cancel_scope.cancel()

    run(main)
    (a, at_a), (b, at_b) = results["a"], results["b"]
    assert a.error == b.error == ErrorCode.none and a.generation_id == b.generation_id == 1
    assert at_a == at_b == 6.0  # delay 3 s, extended once by 3 s because b arrived
    assert coordinator.rebalances == 1


def test_delayed_join_expires_at_the_rebalance_timeout_without_the_timer_task():
    """The purgatory's own deadline completes the join phase: a member that heartbeats but never
    rejoins is dropped at the rebalance timeout."""
    coordinator = make()
    out = {}

    async def scenario() -> None:
        a = await join(coordinator, name="a")
        assert (a.error, a.generation_id) == (ErrorCode.none, 1)
        await sync(coordinator, a, {a.member_id: b"all"})
        started = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def keep_a_alive() -> None:
                while True:
                    await trio.sleep(1)
                    coordinator.heartbeat(trio.current_time(), group_id=GROUP,
                                          generation_id=a.generation_id, member_id=a.member_id)

            nursery.start_soon(keep_a_alive)
            b = await join(coordinator, name="b")
            nursery.cancel_scope.cancel()
        out["b"], out["waited"] = b, trio.current_time() - started

    run(scenario)
    b = out["b"]
    assert (b.error, b.generation_id, b.leader) == (ErrorCode.none, 2, b.member_id)
    assert out["waited"] == REBALANCE_MS / 1000
    assert list(coordinator.groups[GROUP].members) == [b.member_id]
    assert coordinator.purgatory.expired >= 1


def test_follower_sync_waits_in_purgatory_for_the_leader():
    coordinator = make(initial_rebalance_delay_ms=1000)
    out = {}

    async def follower(result: JoinResult) -> None:
        out["follower"] = await sync(coordinator, result)
        out["follower_at"] = trio.current_time()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinator.run)
            joined = {}

            async def member(name: str) -> None:
                joined[name] = await join(coordinator, name=name)

            async with trio.open_nursery() as members:
                members.start_soon(member, "a")
                members.start_soon(member, "b")
            leader, other = sorted(joined.values(), key=lambda r: r.member_id != r.leader)
            nursery.start_soon(follower, other)
            await trio.sleep(2)
            assert coordinator.purgatory.watched(GROUP) == 1
            await sync(coordinator, leader, {leader.member_id: b"L", other.member_id: b"F"})
            await trio.lowlevel.checkpoint()
            out["leader_at"] = trio.current_time()
            nursery.cancel_scope.cancel()

    run(main)
    assert out["follower"].error == ErrorCode.none and out["follower"].assignment == b"F"
    assert out["follower_at"] == out["leader_at"]


def test_timer_task_expires_a_silent_member():
    coordinator = make()
    out = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinator.run)
            a = await join(coordinator, name="a")
            await sync(coordinator, a, {a.member_id: b"x"})
            await trio.sleep(SESSION_MS / 1000 - 0.01)
            out["before"] = coordinator.groups[GROUP].state
            await trio.sleep(0.02)
            out["after"] = coordinator.groups[GROUP].state
            nursery.cancel_scope.cancel()

    run(main)
    assert (out["before"], out["after"]) == (STABLE, EMPTY)
    assert coordinator.groups[GROUP].generation_id == 2


async def two_members(coordinator: GroupCoordinator) -> tuple[JoinResult, JoinResult]:
    """Two consumers join a new group together (the initial delay gathers them): (leader, follower)."""
    joined: dict[str, JoinResult] = {}

    async def member(name: str) -> None:
        joined[name] = await join(coordinator, name=name)

    async with trio.open_nursery() as members:
        members.start_soon(member, "a")
        members.start_soon(member, "b")
    first, second = joined.values()
    return (first, second) if first.member_id == first.leader else (second, first)


async def heartbeat_every_second(coordinator: GroupCoordinator, member: JoinResult, answers: list) -> None:
    """Heartbeats at +0.5 s, +1.5 s, ...: never at the same virtual instant as a deadline, whose
    order against it trio does not fix."""
    await trio.sleep(0.5)
    while True:
        error = coordinator.heartbeat(trio.current_time(), group_id=GROUP, generation_id=member.generation_id,
                                      member_id=member.member_id)
        answers.append((trio.current_time(), error))
        await trio.sleep(1)


def test_session_expiry_on_the_mock_clock_rebalances_at_the_exact_deadline():
    """Two members are Stable; the follower goes silent after its SyncGroup is answered. The timer
    task removes it exactly one session timeout later (not a moment before), the leader's next
    heartbeat is told REBALANCE_IN_PROGRESS, and its rejoin is answered at once: generation 2, alone."""
    coordinator = make(initial_rebalance_delay_ms=1000)
    out = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinator.run)
            leader, follower = await two_members(coordinator)
            async with trio.open_nursery() as syncs:
                syncs.start_soon(sync, coordinator, follower)
                await trio.sleep(0.5)
                await sync(coordinator, leader, {leader.member_id: b"L", follower.member_id: b"F"})
            synced = trio.current_time()
            answers: list = []
            nursery.start_soon(heartbeat_every_second, coordinator, leader, answers)
            await trio.sleep_until(synced + SESSION_MS / 1000 - 0.001)
            group = coordinator.groups[GROUP]
            out["before"] = (group.state, len(group.members))
            await trio.sleep(0.002)
            out["after"] = (group.state, list(group.members))
            await trio.sleep_until(synced + SESSION_MS / 1000 + 1)
            out["heartbeats"] = [error for _, error in answers]
            rejoin_at = trio.current_time()
            out["rejoin"] = await join(coordinator, leader.member_id, name="a")
            out["waited"] = trio.current_time() - rejoin_at
            out["leader"] = leader.member_id
            nursery.cancel_scope.cancel()

    run(main)
    assert out["before"] == (STABLE, 2)
    assert out["after"] == (PREPARING_REBALANCE, [out["leader"]])
    assert out["heartbeats"][-1] == ErrorCode.rebalance_in_progress
    assert set(out["heartbeats"][:-1]) == {ErrorCode.none}
    rejoin = out["rejoin"]
    assert (rejoin.error, rejoin.generation_id, [m for m, _, _ in rejoin.members]) == (
        ErrorCode.none, 2, [out["leader"]])
    assert out["waited"] == 0


def test_rebalance_timeout_on_the_mock_clock_removes_a_leader_that_never_syncs():
    """The join phase ends at t0; the follower's SyncGroup waits for the leader, which heartbeats
    (so its session never expires) but never syncs. At t0 + the rebalance timeout, exactly, the
    follower is answered REBALANCE_IN_PROGRESS and the leader is gone (Kafka's pending-sync
    timeout); the follower then rebalances alone."""
    coordinator = make(initial_rebalance_delay_ms=1000)
    out = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinator.run)
            leader, follower = await two_members(coordinator)
            joined = trio.current_time()
            answers: list = []
            nursery.start_soon(heartbeat_every_second, coordinator, leader, answers)
            out["sync"] = await sync(coordinator, follower)
            out["sync_waited"] = trio.current_time() - joined
            out["members"] = list(coordinator.groups[GROUP].members)
            out["rejoin"] = await join(coordinator, follower.member_id, name="b")
            await trio.sleep(1)
            out["leader_heartbeat"] = answers[-1][1]
            out["ids"] = (leader.member_id, follower.member_id)
            nursery.cancel_scope.cancel()

    run(main)
    leader_id, follower_id = out["ids"]
    assert out["sync"].error == ErrorCode.rebalance_in_progress
    assert out["sync_waited"] == REBALANCE_MS / 1000
    assert out["members"] == [follower_id]
    assert (out["rejoin"].error, out["rejoin"].generation_id, out["rejoin"].leader) == (
        ErrorCode.none, 2, follower_id)
    assert out["leader_heartbeat"] == ErrorCode.unknown_member_id


def test_offsets_retention_on_the_mock_clock_through_the_timer_task():
    """One clock drives both times: the wall clock is trio's plus an epoch, so a simple group's
    commit expires at the first retention check at least offsets.retention.ms after it, in virtual
    time, and the group without offsets is dropped with it."""
    out = {}

    async def main() -> None:
        epoch_ms = 1_700_000_000_000
        coordinator = GroupCoordinator(
            GroupConfig(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000),
            wall_clock_ms=lambda: epoch_ms + int(trio.current_time() * 1000))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinator.run)
            await trio.lowlevel.checkpoint()  # the timer task starts its retention checks now (t0)
            started = trio.current_time()
            errors = coordinator.commit_offsets(
                started, group_id=GROUP, generation_id=-1, member_id="", group_instance_id=None,
                offsets={("t", 0): (42, -1, "")})
            out["commit"] = errors[("t", 0)]
            out["committed_at"] = coordinator.fetch_offsets(GROUP, [("t", 0)])[0][1].commit_timestamp_ms
            await trio.sleep_until(started + 59.999)
            out["before"] = coordinator.fetch_offsets(GROUP, [("t", 0)])[0][1]
            await trio.sleep_until(started + 60.001)
            out["after"] = coordinator.fetch_offsets(GROUP, [("t", 0)])[0][1]
            out["group_left"] = GROUP in coordinator.groups
            out["epoch_ms"] = epoch_ms
            nursery.cancel_scope.cancel()

    run(main)
    assert out["commit"] == ErrorCode.none
    assert out["committed_at"] == out["epoch_ms"]  # the wall clock followed trio's: t0 is 0
    assert out["before"] is not None and out["before"].offset == 42
    assert out["after"] is None and not out["group_left"]
