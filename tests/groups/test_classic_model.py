"""Hypothesis drives the coordinator with simulated well-behaved clients that come, leave and
crash at random times, and checks Kafka's guarantees:

* every transition the group makes is in Kafka's table (the coordinator raises otherwise), the
  generation never goes down, the leader is a member, an Empty group has no members, and the timer
  task's next wake-up is never later than any deadline;
* once things calm down (no more arrivals or departures, the live clients heartbeating and rejoining
  as the protocol says), the group is Stable, its members are exactly the live clients, and each of
  them holds the assignment the leader made for it in the current generation.

Plain calls, simulated time: no sockets, no trio.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.groups.api import GroupConfig, Pending
from minibroker.groups.classic_group import EMPTY, STABLE
from minibroker.groups.coordinator import GroupCoordinator
from minibroker.protocol.errors import ErrorCode

GROUP = "model"
SESSION_MS, HEARTBEAT_S, REBALANCE_MS = 6000, 1.0, 10_000
STEP = 0.25
QUIET = 60.0


class SimClient:
    """A consumer that follows the protocol: KIP-394 join, sync, heartbeat, rejoin when told."""

    def __init__(self, name: str, coordinator: GroupCoordinator, version: int) -> None:
        self.name, self.coordinator, self.version = name, coordinator, version
        self.member_id = ""
        self.generation = -1
        self.phase = "join"  # join, joining, syncing, stable, crashed, gone
        self.pending: Pending | None = None
        self.assignment: bytes | None = None
        self.next_heartbeat = 0.0

    def rejoin(self, reset: bool = False) -> None:
        if reset:
            self.member_id, self.generation = "", -1
        self.phase, self.pending, self.assignment = "join", None, None

    def step(self, now: float) -> None:
        if self.phase == "join":
            self.pending = self.coordinator.join_group(
                now, group_id=GROUP, member_id=self.member_id, group_instance_id=None,
                client_id=self.name, client_host="/10.0.0.1", session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=REBALANCE_MS, protocol_type="consumer",
                protocols=[("range", self.name.encode())], require_known_member_id=self.version >= 4)
            self.phase = "joining"
        if self.phase == "joining" and self.pending.done:
            result = self.pending.result
            if result.error == ErrorCode.member_id_required:
                self.member_id = result.member_id
                self.rejoin()
            elif result.error == ErrorCode.none:
                self.member_id, self.generation = result.member_id, result.generation_id
                assignments = {m: b"a-" + m.encode() for m, _, _ in result.members}
                self.pending = self.coordinator.sync_group(
                    now, group_id=GROUP, generation_id=self.generation, member_id=self.member_id,
                    group_instance_id=None, protocol_type="consumer", protocol_name=result.protocol_name,
                    assignments=assignments)
                self.phase = "syncing"
                self.next_heartbeat = now + HEARTBEAT_S
            else:
                self.rejoin(reset=result.error == ErrorCode.unknown_member_id)
        if self.phase == "syncing" and self.pending.done:
            result = self.pending.result
            if result.error == ErrorCode.none:
                self.phase, self.assignment = "stable", result.assignment
            else:
                self.rejoin(reset=result.error == ErrorCode.unknown_member_id)
        if self.phase in ("stable", "syncing") and now >= self.next_heartbeat:
            self.next_heartbeat = now + HEARTBEAT_S
            error = self.coordinator.heartbeat(now, group_id=GROUP, generation_id=self.generation,
                                               member_id=self.member_id)
            if error and self.phase == "stable":
                self.rejoin(reset=error == ErrorCode.unknown_member_id)

    def leave(self, now: float) -> None:
        if self.member_id:
            self.coordinator.leave_group(now, GROUP, [(self.member_id, None)])
        self.phase = "gone"


events = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from([3, 5])),
        st.tuples(st.just("leave"), st.integers(0, 7)),
        st.tuples(st.just("crash"), st.integers(0, 7)),
        st.tuples(st.just("wait"), st.floats(0, 15)),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=events, initial_delay=st.sampled_from([0, 1000, 3000]))
def test_group_converges_to_the_live_members(events, initial_delay):
    clock = {"now": 0.0}
    coordinator = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=initial_delay),
                                   wall_clock_ms=lambda: int(clock["now"] * 1000))
    clients = [SimClient("c0", coordinator, 5)]
    last_generation = 0

    def check_invariants() -> None:
        nonlocal last_generation
        group = coordinator.groups.get(GROUP)
        if group is None:
            return
        assert group.generation_id >= last_generation
        last_generation = group.generation_id
        if group.members:
            assert group.leader_id in group.members
        else:
            assert group.leader_id is None
        if group.state is EMPTY:
            assert not group.members
        if group.state is STABLE:
            assert group.protocol_name == "range"
        # The timer task sleeps until next_deadline(): no deadline may hide behind it.
        deadlines = [d for d in (group.join_deadline, group.sync_deadline) if d is not None]
        deadlines += list(group.pending_members.values())
        deadlines += [m.heartbeat_deadline for m in group.members.values() if m.heartbeat_deadline is not None]
        if deadlines:
            assert coordinator.next_deadline() <= min(deadlines)

    def run(seconds: float) -> None:
        end = clock["now"] + seconds
        while clock["now"] < end:
            clock["now"] += STEP
            coordinator.tick(clock["now"])
            check_invariants()
            for client in clients:
                if client.phase not in ("crashed", "gone"):
                    client.step(clock["now"])
                    check_invariants()

    for kind, arg in events:
        live = [c for c in clients if c.phase not in ("crashed", "gone")]
        if kind == "add":
            clients.append(SimClient(f"c{len(clients)}", coordinator, arg))
        elif kind == "leave" and live:
            live[arg % len(live)].leave(clock["now"])
        elif kind == "crash" and live:
            live[arg % len(live)].phase = "crashed"
        elif kind == "wait":
            run(arg)
    run(QUIET)

    live = [c for c in clients if c.phase not in ("crashed", "gone")]
    group = coordinator.groups.get(GROUP)
    if not live:
        assert group is None or group.state is EMPTY
        return
    assert group.state is STABLE
    assert set(group.members) == {c.member_id for c in live}
    for client in live:
        assert client.phase == "stable"
        assert client.generation == group.generation_id
        assert client.assignment == b"a-" + client.member_id.encode()
