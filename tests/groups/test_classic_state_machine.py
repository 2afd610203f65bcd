"""The group coordinator's state machine, driven by plain calls (no sockets, no trio), against the
transitions and answers Kafka documents in ClassicGroupState and GroupMetadataManager.

Time is a number passed in; the wall clock is a fake. Each table row puts a two-member group (A
leads, B follows) in a state, does one thing, and checks the answer and the state after.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from minibroker.groups.api import GroupConfig, Pending
from minibroker.groups.classic_group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupState,
    IllegalStateTransition,
)
from minibroker.groups.coordinator import GroupCoordinator
from minibroker.protocol.errors import ErrorCode

SESSION_MS = 6000
REBALANCE_MS = 10_000
GROUP = "group"
PROTOCOLS = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]


class Harness:
    """A coordinator plus a clock, with client-shaped helpers."""

    def __init__(self, **config) -> None:
        self.now = 100.0
        self.wall = 1_700_000_000_000
        self.coordinator = GroupCoordinator(GroupConfig(**config), wall_clock_ms=lambda: self.wall)
        self.ids: dict[str, str] = {}  # client name -> member id

    @property
    def group(self) -> ClassicGroup:
        return self.coordinator.groups[GROUP]

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += int(seconds * 1000)
        self.coordinator.tick(self.now)

    def join(self, name: str, protocols=PROTOCOLS, version: int = 5, instance: str | None = None,
             session_ms: int = SESSION_MS, protocol_type: str = "consumer") -> Pending:
        return self.coordinator.join_group(
            self.now, group_id=GROUP, member_id=self.ids.get(name, ""), group_instance_id=instance,
            client_id=name, client_host="/127.0.0.1", session_timeout_ms=session_ms,
            rebalance_timeout_ms=REBALANCE_MS, protocol_type=protocol_type, protocols=list(protocols),
            require_known_member_id=version >= 4, supports_skip_assignment=version >= 9,
        )

    def join_new(self, name: str, **kwargs) -> Pending:
        """A new dynamic member: the KIP-394 round trip, then the real join."""
        first = self.join(name, **kwargs)
        assert first.result.error == ErrorCode.member_id_required
        self.ids[name] = first.result.member_id
        return self.join(name, **kwargs)

    def sync(self, name: str, assignments: dict[str, bytes] | None = None, generation: int | None = None,
             **kwargs) -> Pending:
        return self.coordinator.sync_group(
            self.now, group_id=GROUP,
            generation_id=self.group.generation_id if generation is None else generation,
            member_id=self.ids[name], group_instance_id=kwargs.get("instance"),
            protocol_type=kwargs.get("protocol_type"), protocol_name=kwargs.get("protocol_name"),
            assignments=assignments or {},
        )

    def heartbeat(self, name: str, generation: int | None = None) -> int:
        return self.coordinator.heartbeat(
            self.now, group_id=GROUP, member_id=self.ids[name],
            generation_id=self.group.generation_id if generation is None else generation)

    def leave(self, name: str) -> int:
        top, errors = self.coordinator.leave_group(self.now, GROUP, [(self.ids[name], None)])
        return top or errors[0]

    def commit(self, name: str | None, generation: int | None = None, offset: int = 42) -> int:
        errors = self.coordinator.commit_offsets(
            self.now, group_id=GROUP,
            generation_id=(self.group.generation_id if generation is None else generation) if name else -1,
            member_id=self.ids[name] if name else "", group_instance_id=None,
            offsets={("topic", 0): (offset, -1, "meta")})
        return errors[("topic", 0)]

    def assignment_for(self, members) -> dict[str, bytes]:
        return {m: b"for-" + m.encode() for m in members}

    # Groups in each state, two members: A (leader) and B.

    def completing(self) -> tuple[Pending, Pending]:
        a = self.join_new("A")
        b = self.join_new("B")
        self.advance(0)  # the initial rebalance delay (0) passes
        assert a.result.error == b.result.error == ErrorCode.none
        assert self.group.state is COMPLETING_REBALANCE
        return a, b

    def stable(self) -> None:
        a, _ = self.completing()
        self.sync("B")
        self.sync("A", self.assignment_for(m for m, _, _ in a.result.members))
        assert self.group.state is STABLE

    def preparing(self) -> Pending:
        self.stable()
        c = self.join_new("C")
        assert self.group.state is PREPARING_REBALANCE
        return c

    def empty(self) -> None:
        self.stable()
        self.leave("A")
        self.leave("B")
        assert self.group.state is EMPTY


# --- the transition table itself ---------------------------------------------------------------


def test_valid_previous_states_are_kafkas():
    assert VALID_PREVIOUS_STATES == {
        EMPTY: {PREPARING_REBALANCE},
        PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
        COMPLETING_REBALANCE: {PREPARING_REBALANCE},
        STABLE: {COMPLETING_REBALANCE},
        DEAD: {STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD},
    }


@pytest.mark.parametrize("source", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_transition_to_enforces_the_table(source, target):
    group = ClassicGroup("x")
    group.state = source
    if source in VALID_PREVIOUS_STATES[target]:
        group.transition_to(target, 5)
        assert (group.state, group.previous_state, group.state_timestamp_ms) == (target, source, 5)
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, 5)


# --- one action in each state ------------------------------------------------------------------

SETUPS = {
    "Empty": Harness.empty,
    "PreparingRebalance": Harness.preparing,
    "CompletingRebalance": Harness.completing,
    "Stable": Harness.stable,
}

# (state, action, expected answer, state after). Answers are error codes; "parked" means the
# request waits (its Pending is not done).
TABLE = [
    # Kafka: PreparingRebalance answers heartbeats and syncs with REBALANCE_IN_PROGRESS, still
    # takes commits from the current generation, removes members on leave.
    ("PreparingRebalance", "heartbeat B", ErrorCode.rebalance_in_progress, PREPARING_REBALANCE),
    ("PreparingRebalance", "sync B", ErrorCode.rebalance_in_progress, PREPARING_REBALANCE),
    ("PreparingRebalance", "commit B", ErrorCode.none, PREPARING_REBALANCE),
    ("PreparingRebalance", "rejoin A", "parked", PREPARING_REBALANCE),
    ("PreparingRebalance", "leave C", ErrorCode.none, PREPARING_REBALANCE),
    # CompletingRebalance: heartbeats are normal, commits wait for the assignment, a follower's sync
    # waits for the leader, the leader's sync makes the group Stable; a new member, a leave or
    # changed metadata start over.
    ("CompletingRebalance", "heartbeat B", ErrorCode.none, COMPLETING_REBALANCE),
    ("CompletingRebalance", "commit B", ErrorCode.rebalance_in_progress, COMPLETING_REBALANCE),
    ("CompletingRebalance", "sync B", "parked", COMPLETING_REBALANCE),
    ("CompletingRebalance", "sync A", ErrorCode.none, STABLE),
    ("CompletingRebalance", "join C", ErrorCode.member_id_required, COMPLETING_REBALANCE),
    ("CompletingRebalance", "join-new C", "parked", PREPARING_REBALANCE),
    ("CompletingRebalance", "leave B", ErrorCode.none, PREPARING_REBALANCE),
    ("CompletingRebalance", "rejoin-same B", ErrorCode.none, COMPLETING_REBALANCE),
    ("CompletingRebalance", "rejoin-changed B", "parked", PREPARING_REBALANCE),
    # Stable: a follower's unchanged rejoin is answered with the current generation; the leader's
    # rejoin, changed metadata, a leave or a new member start a rebalance.
    ("Stable", "heartbeat B", ErrorCode.none, STABLE),
    ("Stable", "heartbeat-stale B", ErrorCode.illegal_generation, STABLE),
    ("Stable", "sync B", ErrorCode.none, STABLE),
    ("Stable", "commit B", ErrorCode.none, STABLE),
    ("Stable", "commit-stale B", ErrorCode.illegal_generation, STABLE),
    ("Stable", "commit-simple", ErrorCode.unknown_member_id, STABLE),
    ("Stable", "rejoin-same B", ErrorCode.none, STABLE),
    ("Stable", "rejoin-same A", "parked", PREPARING_REBALANCE),
    ("Stable", "rejoin-changed B", "parked", PREPARING_REBALANCE),
    ("Stable", "join-new C", "parked", PREPARING_REBALANCE),
    ("Stable", "leave B", ErrorCode.none, PREPARING_REBALANCE),
    ("Stable", "join-other-type C", ErrorCode.inconsistent_group_protocol, STABLE),
    ("Stable", "join-unsupported C", ErrorCode.inconsistent_group_protocol, STABLE),
    # Empty: members are unknown; simple commits are accepted; a new member starts a rebalance.
    ("Empty", "heartbeat B", ErrorCode.unknown_member_id, EMPTY),
    ("Empty", "sync B", ErrorCode.unknown_member_id, EMPTY),
    ("Empty", "leave B", ErrorCode.unknown_member_id, EMPTY),
    ("Empty", "commit B", ErrorCode.unknown_member_id, EMPTY),
    ("Empty", "commit-simple", ErrorCode.none, EMPTY),
    ("Empty", "join-new C", "parked", PREPARING_REBALANCE),
    ("Empty", "rejoin-same B", ErrorCode.unknown_member_id, EMPTY),
]


def act(h: Harness, action: str):
    verb, _, name = action.partition(" ")
    if verb == "heartbeat":
        return h.heartbeat(name)
    if verb == "heartbeat-stale":
        return h.heartbeat(name, generation=h.group.generation_id - 1)
    if verb == "sync":
        return h.sync(name, h.assignment_for(h.group.members) if name == "A" else None)
    if verb == "commit":
        return h.commit(name)
    if verb == "commit-stale":
        return h.commit(name, generation=h.group.generation_id - 1)
    if verb == "commit-simple":
        return h.commit(None)
    if verb == "leave":
        return h.leave(name)
    if verb == "join":
        return h.join(name)
    if verb == "join-new":
        return h.join_new(name)
    if verb in ("rejoin", "rejoin-same"):
        return h.join(name)
    if verb == "rejoin-changed":
        return h.join(name, protocols=[("range", b"new-metadata")])
    if verb == "join-other-type":
        return h.join(name, protocol_type="connect")
    if verb == "join-unsupported":
        return h.join(name, protocols=[("sticky", b"")])
    raise AssertionError(action)


@pytest.mark.parametrize("state, action, answer, after", TABLE, ids=[f"{r[0]}-{r[1]}" for r in TABLE])
def test_kafka_transition_table(state, action, answer, after):
    h = Harness()
    SETUPS[state](h)
    result = act(h, action)
    if isinstance(result, Pending):
        if answer == "parked":
            assert not result.done
        else:
            assert result.done
            result = result.result.error
    if answer != "parked":
        assert result == answer
    assert h.group.state is after


# --- join phase details ----------------------------------------------------------------------------


def test_kip394_new_member_gets_an_id_then_joins_and_leads():
    h = Harness()
    first = h.join("A")
    assert first.result.error == ErrorCode.member_id_required
    assert first.result.member_id.startswith("A-")
    assert h.group.state is EMPTY and first.result.member_id in h.group.pending_members
    h.ids["A"] = first.result.member_id
    joined = h.join("A")
    h.advance(0)
    result = joined.result
    assert (result.error, result.generation_id, result.leader, result.member_id) == (
        ErrorCode.none, 1, h.ids["A"], h.ids["A"])
    assert result.protocol_name == "range" and result.protocol_type == "consumer"
    assert result.members == [(h.ids["A"], None, b"range-meta")]


def test_old_versions_join_without_the_member_id_round_trip():
    h = Harness()
    joined = h.join("A", version=3)
    h.advance(0)
    assert joined.result.error == ErrorCode.none and joined.result.member_id.startswith("A-")


def test_leader_gets_everyones_metadata_followers_get_none():
    h = Harness()
    a, b = h.completing()
    assert a.result.leader == b.result.leader == h.ids["A"]
    assert [m for m, _, _ in a.result.members] == [h.ids["A"], h.ids["B"]]
    assert b.result.members == []
    assert a.result.generation_id == b.result.generation_id == h.group.generation_id


def test_follower_sync_waits_for_the_leaders_assignment_which_everyone_receives():
    h = Harness()
    h.completing()
    follower = h.sync("B")
    assert not follower.done
    leader = h.sync("A", {h.ids["A"]: b"a-part", h.ids["B"]: b"b-part"})
    assert (leader.result.error, leader.result.assignment) == (ErrorCode.none, b"a-part")
    assert (follower.result.error, follower.result.assignment) == (ErrorCode.none, b"b-part")
    assert follower.result.protocol_name == "range"
    # A member missing from the leader's assignment gets an empty one.
    assert h.sync("A").result.assignment == b"a-part"


def test_a_rebalance_answers_parked_syncs_with_rebalance_in_progress():
    h = Harness()
    h.completing()
    follower = h.sync("B")
    h.join_new("C")
    assert follower.result.error == ErrorCode.rebalance_in_progress
    assert h.group.state is PREPARING_REBALANCE


def test_join_completes_when_all_members_rejoin():
    h = Harness()
    h.preparing()
    a, b = h.join("A"), h.join("B")
    assert h.group.state is COMPLETING_REBALANCE
    assert a.result.generation_id == b.result.generation_id == 2
    assert len(a.result.members) == 3


def test_rebalance_timeout_drops_members_that_did_not_rejoin():
    h = Harness()
    c = h.preparing()
    a = h.join("A")
    for _ in range(9):  # B is alive (it heartbeats) but does not rejoin
        h.advance(1)
        assert h.heartbeat("B") == ErrorCode.rebalance_in_progress
    assert not a.done
    h.advance(1.5)  # at the rebalance timeout it is dropped
    assert a.result.error == c.result.error == ErrorCode.none
    assert set(h.group.members) == {h.ids["A"], h.ids["C"]}
    assert h.heartbeat("B") == ErrorCode.unknown_member_id


def test_a_new_leader_is_chosen_when_the_leader_does_not_rejoin():
    h = Harness()
    h.preparing()
    b = h.join("B")
    for _ in range(9):  # the leader is alive but does not rejoin
        h.advance(1)
        h.heartbeat("A")
    h.advance(1.5)
    assert b.result.leader == h.ids["B"] and h.ids["A"] not in h.group.members


def test_pending_member_holds_the_join_until_it_rejoins_or_expires():
    h = Harness()
    h.stable()
    c = h.join("C")  # MEMBER_ID_REQUIRED; C never comes back
    h.ids["C"] = c.result.member_id
    h.leave("B")  # rebalance; A must rejoin
    a = h.join("A")
    assert not a.done, "a pending member is still expected"
    h.advance(SESSION_MS / 1000 + 0.1)
    assert a.result.error == ErrorCode.none and list(h.group.members) == [h.ids["A"]]


def test_initial_rebalance_delay_waits_for_more_members():
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join_new("A")
    h.advance(1)
    b = h.join_new("B")  # arrives during the delay: the delay is extended
    h.advance(2.5)
    assert not a.done
    h.advance(3)
    assert a.result.error == b.result.error == ErrorCode.none
    assert a.result.generation_id == 1 and len(a.result.members) == 2


def test_initial_delay_is_bounded_by_the_rebalance_timeout():
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join_new("A")
    for i in range(60):  # a new member every 2 s would extend the delay forever
        h.advance(0.5)
        if a.done:
            break
        if i % 4 == 3:
            h.join_new(f"M{i}")
    assert a.done and h.now - 100 <= REBALANCE_MS / 1000 + 2


def test_protocol_is_chosen_by_vote_among_the_common_ones():
    h = Harness()
    a = h.join_new("A", protocols=[("roundrobin", b"1"), ("range", b"2"), ("sticky", b"3")])
    h.join_new("B", protocols=[("range", b"4"), ("roundrobin", b"5")])
    h.join_new("C", protocols=[("range", b"6")])
    h.advance(0)
    assert a.result.protocol_name == "range"
    assert {m: meta for m, _, meta in a.result.members} == {
        h.ids["A"]: b"2", h.ids["B"]: b"4", h.ids["C"]: b"6"}


def test_sync_checks_protocol_type_and_name_from_v5():
    h = Harness()
    h.completing()
    assert h.sync("B", protocol_type="connect").result.error == ErrorCode.inconsistent_group_protocol
    assert h.sync("B", protocol_name="roundrobin").result.error == ErrorCode.inconsistent_group_protocol
    assert h.sync("B", generation=0).result.error == ErrorCode.illegal_generation
    assert not h.sync("B", protocol_type="consumer", protocol_name="range").done


def test_members_that_do_not_sync_are_removed_at_the_rebalance_timeout():
    h = Harness()
    h.completing()
    follower = h.sync("B")  # the leader never syncs
    h.advance(REBALANCE_MS / 1000 + 0.1)
    assert follower.result.error == ErrorCode.rebalance_in_progress
    assert h.ids["A"] not in h.group.members and h.group.state is PREPARING_REBALANCE


def test_session_expiry_removes_a_silent_member_and_rebalances():
    h = Harness()
    h.stable()
    for _ in range(8):
        h.advance(1)
        assert h.heartbeat("A") == ErrorCode.none or h.group.state is PREPARING_REBALANCE
    assert h.ids["B"] not in h.group.members
    assert h.heartbeat("A") == ErrorCode.rebalance_in_progress
    a = h.join("A")
    assert a.result.error == ErrorCode.none and a.result.generation_id == 2


def test_last_member_leaving_empties_the_group_and_bumps_the_generation():
    h = Harness()
    h.stable()
    h.leave("A")
    assert h.group.state is PREPARING_REBALANCE
    h.leave("B")
    assert h.group.state is EMPTY and h.group.generation_id == 2 and h.group.leader_id is None


def test_leaving_member_with_a_parked_join_is_answered():
    h = Harness()
    h.preparing()
    a = h.join("A")
    assert h.leave("A") == ErrorCode.none
    assert a.result.error == ErrorCode.unknown_member_id


def test_unknown_members_and_bad_input():
    h = Harness()
    assert h.join("A", session_ms=10).result.error == ErrorCode.invalid_session_timeout
    h.ids["X"] = "made-up"
    assert h.join("X").result.error == ErrorCode.unknown_member_id  # no such group
    h.stable()
    assert h.join("X").result.error == ErrorCode.unknown_member_id
    assert h.heartbeat("X") == ErrorCode.unknown_member_id
    assert h.coordinator.heartbeat(h.now, group_id="", generation_id=0, member_id="") == ErrorCode.invalid_group_id
    assert h.coordinator.commit_offsets(h.now, group_id="nope", generation_id=3, member_id="m",
                                        group_instance_id=None, offsets={("t", 0): (1, -1, None)},
                                        version=8) == {("t", 0): ErrorCode.illegal_generation}
    assert h.coordinator.commit_offsets(h.now, group_id="nope", generation_id=3, member_id="m",
                                        group_instance_id=None, offsets={("t", 0): (1, -1, None)},
                                        version=9) == {("t", 0): ErrorCode.group_id_not_found}


def test_offset_metadata_too_large():
    h = Harness()
    errors = h.coordinator.commit_offsets(h.now, group_id=GROUP, generation_id=-1, member_id="",
                                          group_instance_id=None,
                                          offsets={("t", 0): (1, -1, "x" * 5000), ("t", 1): (2, -1, "ok")})
    assert errors == {("t", 0): ErrorCode.offset_metadata_too_large, ("t", 1): ErrorCode.none}
    assert [(tp, om.offset) for tp, om in h.coordinator.fetch_offsets(GROUP, None)] == [(("t", 1), 2)]


# --- static membership -------------------------------------------------------------------------------


def test_static_member_rejoining_replaces_its_old_id_without_a_rebalance():
    h = Harness()
    a = h.join("A", instance="a-1")  # static members skip MEMBER_ID_REQUIRED
    h.ids["A"] = a.result.member_id if a.done else h.group.static_members["a-1"]
    b = h.join_new("B")
    h.advance(0)
    h.ids["A"] = a.result.member_id
    h.sync("B")
    h.sync("A", h.assignment_for(h.group.members), instance="a-1")
    assert h.group.state is STABLE
    generation, old_id = h.group.generation_id, h.ids["A"]
    h.ids.pop("A")
    again = h.join("A", instance="a-1")  # restarted: unknown member id, same instance id
    assert again.result.error == ErrorCode.none and again.result.member_id != old_id
    assert h.group.state is STABLE and h.group.generation_id == generation
    assert again.result.leader == old_id, "an old-version leader is not told it leads"
    stale = h.coordinator.heartbeat(h.now, group_id=GROUP, generation_id=generation,
                                    member_id=old_id, group_instance_id="a-1")
    assert stale == ErrorCode.fenced_instance_id
    h.ids["A"] = again.result.member_id
    assert h.sync("A", instance="a-1").result.assignment == b"for-" + old_id.encode()
    assert b.result.error == ErrorCode.none


def test_static_member_not_rejoining_is_kept_until_its_session_expires():
    h = Harness()
    a = h.join("A", instance="a-1")
    h.join_new("B")
    h.advance(0)
    h.ids["A"] = a.result.member_id
    h.sync("B")
    h.sync("A", h.assignment_for(h.group.members))
    c = h.join_new("C")
    b = h.join("B")
    for _ in range(10):  # A (static) heartbeats but does not rejoin: kept, not dropped
        h.advance(1.01)
        h.coordinator.heartbeat(h.now, group_id=GROUP, generation_id=1, member_id=h.ids["A"],
                                group_instance_id="a-1")
    assert b.result.error == ErrorCode.none and h.ids["A"] in h.group.members
    assert [m for m, _, _ in b.result.members] == [h.ids["A"], h.ids["B"], h.ids["C"]]
    h.advance(SESSION_MS / 1000)
    assert h.ids["A"] not in h.group.members
    assert c.done


# --- offsets retention (KIP-211) -------------------------------------------------------------------


def test_offsets_expire_after_the_group_is_empty_for_the_retention_period():
    h = Harness(offsets_retention_ms=60_000)
    h.stable()
    assert h.commit("A") == ErrorCode.none
    h.wall += 120_000  # old commit, but the group is not empty: kept
    assert h.coordinator.expire_offsets(h.wall) == 0
    h.leave("A")
    h.leave("B")
    h.wall += 59_000
    assert h.coordinator.expire_offsets(h.wall) == 0
    h.wall += 2_000
    assert h.coordinator.expire_offsets(h.wall) == 1
    assert GROUP not in h.coordinator.groups, "an empty group without offsets is removed"


def test_simple_group_offsets_expire_from_their_commit_time():
    h = Harness(offsets_retention_ms=60_000)
    assert h.commit(None) == ErrorCode.none
    h.wall += 30_000
    assert h.commit(None, offset=43) == ErrorCode.none
    h.wall += 31_000
    assert h.coordinator.expire_offsets(h.wall) == 0
    h.wall += 30_000
    assert h.coordinator.expire_offsets(h.wall) == 1
    assert h.coordinator.fetch_offsets(GROUP, [("topic", 0)]) == [(("topic", 0), None)]


def test_an_offset_with_a_pending_transactional_one_does_not_expire():
    # Kafka's cleanupExpiredOffsets: expiring it would drop the pending offset with it (a tombstone
    # does), so it waits for the transaction, and the group stays while one is open.
    h = Harness(offsets_retention_ms=60_000)
    assert h.commit(None) == ErrorCode.none
    errors = h.coordinator.commit_transactional_offsets(
        group_id=GROUP, producer_id=7, producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
        offsets={("topic", 0): (50, -1, ""), ("other", 0): (3, -1, "")})
    assert set(errors.values()) == {ErrorCode.none}
    h.wall += 61_000
    assert h.coordinator.expire_offsets(h.wall) == 0
    assert GROUP in h.coordinator.shard.groups and h.coordinator.has_pending_offsets(GROUP)
    assert h.coordinator.complete_transaction(7, commit=False) == 2
    assert h.coordinator.expire_offsets(h.wall) == 1
    assert GROUP not in h.coordinator.shard.groups


def test_retention_check_runs_on_its_interval_from_tick():
    h = Harness(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    h.commit(None)
    h.advance(1)  # schedules the first check
    h.wall += 100_000
    h.advance(5)
    assert GROUP in h.coordinator.groups
    h.advance(6)
    assert GROUP not in h.coordinator.groups


def test_delete_groups():
    h = Harness()
    h.stable()
    h.commit("A")
    assert h.coordinator.delete_groups(h.now, [GROUP, "unknown", ""]) == {
        GROUP: ErrorCode.non_empty_group, "unknown": ErrorCode.group_id_not_found, "": ErrorCode.invalid_group_id}
    h.leave("A")
    h.leave("B")
    assert h.coordinator.delete_groups(h.now, [GROUP]) == {GROUP: ErrorCode.none}
    assert GROUP not in h.coordinator.groups
    assert h.coordinator.fetch_offsets(GROUP, [("topic", 0)]) == [(("topic", 0), None)]


def test_list_and_describe():
    h = Harness()
    h.stable()
    overview = h.coordinator.list_groups()
    assert [(o.group_id, o.protocol_type, o.state, o.group_type) for o in overview] == [
        (GROUP, "consumer", "Stable", "classic")]
    assert h.coordinator.list_groups(["stable"]) == overview
    assert h.coordinator.list_groups(["Empty"]) == []
    assert h.coordinator.list_groups(types_filter=["consumer"]) == []
    described = h.coordinator.describe_group(GROUP)
    assert (described.state, described.protocol) == ("Stable", "range")
    assert [m.metadata for m in described.members] == [b"range-meta", b"range-meta"]
    h.join_new("C")
    described = h.coordinator.describe_group(GROUP)
    assert (described.state, described.protocol) == ("PreparingRebalance", "")
    assert all(m.metadata == b"" for m in described.members)
    assert h.coordinator.describe_group("unknown") is None


def test_the_coordinator_core_imports_neither_trio_nor_the_shell():
    """Everything but coordinator.py is pure: the shard, its managers and the classic group load
    without trio, the purgatory or the broker (what the shell alone may use). Hypothesis is kept
    out as it is in a broker's installation: kio registers strategies with it when it is there,
    and importing hypothesis imports trio."""
    code = (
        "import sys; sys.modules['hypothesis'] = None; import minibroker.groups.shard; "
        "bad = [m for m in sys.modules if m == 'trio' or m.startswith('trio.') "
        "or m in ('minibroker.groups.coordinator', 'minibroker.purgatory', 'minibroker.broker')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_the_group_record_holds_the_members_and_the_leaders_assignment():
    """As Kafka's GroupMetadataValue: written when the join phase ends (no assignment yet) and again
    when the leader's assignment arrives; an emptied group's record has no members."""
    h = Harness()
    a, _ = h.completing()
    record = h.coordinator.store.group_records("classic").groups[GROUP]
    assert (record.generation, record.protocol, record.leader, record.members) == (1, "range", h.ids["A"], 2)
    assert [(m.member_id, m.client_id, m.subscription, m.assignment) for m in record.member_metadata] == [
        (h.ids["A"], "A", b"range-meta", b""), (h.ids["B"], "B", b"range-meta", b"")]
    h.sync("B")
    h.sync("A", h.assignment_for(m for m, _, _ in a.result.members))
    record = h.coordinator.store.group_records("classic").groups[GROUP]
    members = [(m.member_id, m.session_timeout_ms, m.rebalance_timeout_ms, m.assignment)
               for m in record.member_metadata]
    assert members == [
        (h.ids["A"], SESSION_MS, REBALANCE_MS, b"for-" + h.ids["A"].encode()),
        (h.ids["B"], SESSION_MS, REBALANCE_MS, b"for-" + h.ids["B"].encode())]
    h.leave("A")
    h.leave("B")
    record = h.coordinator.store.group_records("classic").groups[GROUP]
    assert (record.generation, record.protocol, record.leader, record.member_metadata) == (2, "", None, ())
    assert record.state_timestamp_ms == h.wall
