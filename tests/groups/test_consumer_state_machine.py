"""KIP-848 consumer groups driven by plain calls on the pure coordinator shard (no sockets, no trio),
against Kafka's GroupMetadataManager and CurrentAssignmentBuilder: epochs, revoke-before-assign
reconciliation, the errors and messages Kafka answers, static membership, leaving and fencing by
session and rebalance timeouts, server assignors, topics changing under a group, coexistence with
classic groups, offsets commits and fetches by member epoch, and a restart from the records.

Time is a number passed in; wall-clock milliseconds are a counter.
"""

from __future__ import annotations

import uuid

import pytest

from minibroker.groups.api import (
    CONSUMER,
    ConsumerGroupHeartbeatRequest,
    GroupConfig,
    JoinGroupRequest,
)
from minibroker.groups.consumer_group import ConsumerGroup, MemberState
from minibroker.groups.shard import GroupCoordinatorShard
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager
from minibroker.storage.offsets_store import OffsetAndMetadata, OffsetsStore
from tests.support.consumer_group_sim import FakeTopics, SimConsumer

GROUP = "cg"
SESSION_MS = 10_000


class Harness:
    def __init__(self, topics: FakeTopics | None = None, store: OffsetsStore | None = None, **config) -> None:
        self.topics = topics or FakeTopics(t=6)
        self.now = 100.0
        self.store = store if store is not None else OffsetsStore()
        self.config = GroupConfig(consumer_session_timeout_ms=SESSION_MS, **config)
        self.shard = GroupCoordinatorShard(self.config, self.store, self.now_ms, self.topics)

    @property
    def now_ms(self) -> int:
        return int(self.now * 1000)

    def send(self, request: ConsumerGroupHeartbeatRequest):
        return self.shard.manager("consumer").heartbeat(self.now, self.now_ms, request)

    def member(self, member_id: str, *topics: str, **kw) -> SimConsumer:
        return SimConsumer(GROUP, member_id, topics or ("t",), **kw)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.shard.tick(self.now, self.now_ms)

    @property
    def group(self) -> ConsumerGroup:
        group = self.shard.groups[GROUP]
        assert isinstance(group, ConsumerGroup)
        return group

    def settle(self, *members: SimConsumer, rounds: int = 6) -> None:
        for _ in range(rounds):
            for m in members:
                m.heartbeat(self.send)

    def b_joins_a(self) -> tuple[SimConsumer, SimConsumer]:
        """A joins alone and gets all six partitions; B joins (epoch 2); A's next heartbeat tells it
        to revoke three, which it has not acknowledged yet."""
        a, b = self.member("A"), self.member("B")
        a.heartbeat(self.send)
        b.heartbeat(self.send)
        a.heartbeat(self.send)
        return a, b

    def heartbeat_through(self, seconds: int, *members: SimConsumer) -> None:
        """Let `seconds` pass in one-second steps, `members` heartbeating after each."""
        for _ in range(seconds):
            self.advance(1.0)
            for m in members:
                m.heartbeat(self.send)

    def settled_alone(self, member: SimConsumer, topic: str = "t") -> set[int]:
        """`member`'s partitions of `topic` once it alone has heartbeated the group settled."""
        self.settle(member)
        return member.partitions(self.topics.id(topic))

    def check_no_partition_twice(self, *members: SimConsumer) -> None:
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for m in members:
            for tp in m.holding():
                assert tp not in seen, f"{tp} held by {seen[tp]} and {m.member_id}"
                seen[tp] = m.member_id


def test_a_lone_member_gets_every_partition_at_group_epoch_one():
    h = Harness()
    a = h.member("A")
    result = a.heartbeat(h.send)
    assert (result.error, result.member_id, result.member_epoch) == (ErrorCode.none, "A", 1)
    assert result.heartbeat_interval_ms == h.config.consumer_heartbeat_interval_ms
    assert a.partitions(h.topics.id("t")) == set(range(6))
    assert (h.group.state_name, h.group.group_epoch, h.group.assignment_epoch) == ("Stable", 1, 1)
    (described,) = h.shard.manager("consumer").describe([GROUP])
    assert (described.state, described.group_epoch, described.assignor) == ("Stable", 1, "uniform")
    assert described.members[0].assignment == {h.topics.id("t"): tuple(range(6))}


def test_a_partition_moves_only_after_its_owner_acknowledged_the_revocation():
    h = Harness()
    t = h.topics.id("t")
    a, b = h.member("A"), h.member("B")
    a.heartbeat(h.send)
    b.heartbeat(h.send)  # joins: epoch 2; A still holds everything, so B gets nothing yet
    assert (b.epoch, b.partitions(t)) == (2, set())
    assert h.group.members["B"].state is MemberState.UNRELEASED_PARTITIONS
    assert h.group.state_name == "Reconciling"
    # A hears of the new target: it keeps three and must revoke three, staying at epoch 1.
    result = a.heartbeat(h.send)
    assert result.member_epoch == 1 and len(a.partitions(t)) == 3
    given_up = set(range(6)) - a.partitions(t)
    assert h.group.members["A"].state is MemberState.UNREVOKED_PARTITIONS
    assert set(h.group.members["A"].pending_revocation[t]) == given_up
    # B asks again before A acknowledged: still nothing.
    b.heartbeat(h.send)
    assert b.partitions(t) == set()
    # A's next heartbeat reports the three it kept: it moves to epoch 2; then B gets the others.
    a.heartbeat(h.send)
    assert a.epoch == 2 and h.group.members["A"].state is MemberState.STABLE
    b.heartbeat(h.send)
    assert b.partitions(t) == given_up
    assert h.group.state_name == "Stable"
    h.check_no_partition_twice(a, b)


def test_a_member_that_keeps_reporting_a_revoked_partition_stays_unrevoked():
    h = Harness()
    t = h.topics.id("t")
    a, b = h.b_joins_a()
    still_owned = {t: tuple(range(6))}  # a client that did not revoke yet
    result = h.send(ConsumerGroupHeartbeatRequest(GROUP, "A", 1, owned=still_owned))
    assert result.member_epoch == 1 and h.group.members["A"].state is MemberState.UNREVOKED_PARTITIONS
    b.heartbeat(h.send)
    assert b.partitions(t) == set()


@pytest.mark.parametrize("epoch, owned, error", [
    (7, {}, ErrorCode.fenced_member_epoch),        # ahead of the coordinator
    (0, {}, ErrorCode.fenced_member_epoch),        # a rejoin while still known at epoch 2, as Kafka
    (1, None, ErrorCode.fenced_member_epoch),      # the previous epoch, but owned not reported
    (1, "subset", ErrorCode.none),                 # the previous epoch with a subset: a lost response
    (1, "all", ErrorCode.fenced_member_epoch),     # the previous epoch with partitions it lost since
])
def test_member_epoch_checks(epoch, owned, error):
    h = Harness()
    t = h.topics.id("t")
    a, b = h.b_joins_a()
    a.heartbeat(h.send)  # acknowledged: A at epoch 2, previous 1, three partitions
    assert (h.group.members["A"].member_epoch, h.group.members["A"].previous_member_epoch) == (2, 1)
    kept = h.group.members["A"].assigned[t]
    owned_arg = {"subset": {t: tuple(sorted(kept))[:2]}, "all": {t: tuple(range(6))}}[owned] if isinstance(
        owned, str) else owned
    result = h.send(ConsumerGroupHeartbeatRequest(GROUP, "A", epoch, owned=owned_arg, rebalance_timeout_ms=1000,
                                                  subscribed_topic_names=("t",)))
    assert result.error == error
    if error:
        assert "The member must abandon all its partitions and rejoin." in result.message
    else:
        assert result.member_epoch == 2


def test_fenced_members_rejoin_from_scratch_and_the_group_settles():
    h = Harness()
    a, b = h.member("A"), h.member("B")
    h.settle(a, b)
    a.epoch = 99  # a confused client
    a.heartbeat(h.send)
    assert a.errors == [ErrorCode.fenced_member_epoch]
    h.advance(SESSION_MS / 1000 + 1)  # A's session runs out while it cannot heartbeat
    h.settle(b)
    assert "A" not in h.group.members
    h.settle(a, b)
    assert sorted(len(m.partitions(h.topics.id("t"))) for m in (a, b)) == [3, 3]


VALID = dict(group_id=GROUP, member_id="A", member_epoch=0, rebalance_timeout_ms=1000,
             subscribed_topic_names=("t",), owned={})


@pytest.mark.parametrize("changes, error, message", [
    ({"member_id": ""}, ErrorCode.invalid_request, "MemberId can't be empty."),
    ({"member_id": "   "}, ErrorCode.invalid_request, "MemberId can't be empty."),
    ({"group_id": ""}, ErrorCode.invalid_request, "GroupId can't be empty."),
    ({"instance_id": " "}, ErrorCode.invalid_request, "InstanceId can't be empty."),
    ({"rack_id": ""}, ErrorCode.invalid_request, "RackId can't be empty."),
    ({"rebalance_timeout_ms": -1}, ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request."),
    ({"owned": None}, ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."),
    ({"owned": {uuid.UUID(int=1): (0,)}}, ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."),
    ({"subscribed_topic_names": None}, ErrorCode.invalid_request,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    ({"member_epoch": -2}, ErrorCode.invalid_request, "InstanceId can't be null."),
    ({"member_epoch": -3}, ErrorCode.invalid_request, "MemberEpoch is invalid."),
    ({"server_assignor": "sticky"}, ErrorCode.unsupported_assignor,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
    ({"subscribed_topic_regex": "t["}, ErrorCode.invalid_regular_expression, None),
    ({"member_epoch": 3}, ErrorCode.group_id_not_found, "Consumer group cg not found."),
    ({"member_epoch": -1}, ErrorCode.group_id_not_found, "Group cg not found."),
])
def test_invalid_requests_get_kafkas_errors_and_change_nothing(changes, error, message):
    h = Harness()
    result = h.send(ConsumerGroupHeartbeatRequest(**{**VALID, **changes}))
    assert result.error == error
    if message is not None:
        assert result.message == message
    assert GROUP not in h.shard.groups
    assert h.store.group_records("consumer").groups == {}


def test_v0_lets_the_coordinator_choose_the_member_id():
    h = Harness()
    result = h.send(ConsumerGroupHeartbeatRequest(**{**VALID, "member_id": "", "api_version": 0}))
    assert result.error == ErrorCode.none and uuid.UUID(result.member_id)
    assert result.member_id in h.group.members


def test_unknown_members_and_leaving():
    h = Harness()
    a, b = h.member("A"), h.member("B")
    h.settle(a, b)
    assert h.send(ConsumerGroupHeartbeatRequest(GROUP, "Z", 2, owned={})).error == ErrorCode.unknown_member_id
    epoch = h.group.group_epoch
    result = b.leave(h.send)
    assert (result.error, result.member_id, result.member_epoch) == (ErrorCode.none, "B", -1)
    assert h.group.group_epoch == epoch + 1 and "B" not in h.group.members
    # B's partitions are free at once: A takes them at its next heartbeat.
    assert h.settled_alone(a) == set(range(6))
    assert b.leave(h.send).error == ErrorCode.unknown_member_id
    a.leave(h.send)
    assert h.group.state_name == "Empty"


def test_group_max_size():
    h = Harness(consumer_max_size=2)
    a, b, c = h.member("A"), h.member("B"), h.member("C")
    h.settle(a, b)
    result = c.heartbeat(h.send)
    assert result.error == ErrorCode.group_max_size_reached
    assert result.message == "The consumer group has reached its maximum capacity of 2 members."
    assert a.heartbeat(h.send).error == ErrorCode.none  # members already in are fine


def test_static_member_leaves_for_a_while_and_its_replacement_takes_its_partitions():
    h = Harness()
    t = h.topics.id("t")
    a, b = h.member("A", instance_id="i-a"), h.member("B", instance_id="i-b")
    h.settle(a, b)
    b_partitions = b.partitions(t)
    epoch = h.group.group_epoch
    # A live instance id cannot be taken.
    intruder = h.member("B2", instance_id="i-b")
    assert intruder.heartbeat(h.send).error == ErrorCode.unreleased_instance_id
    result = b.leave(h.send, static_for_now=True)
    assert (result.error, result.member_epoch) == (ErrorCode.none, -2)
    assert h.group.members["B"].member_epoch == -2 and h.group.group_epoch == epoch
    # Its partitions stay with it: A does not get them.
    h.settle(a)
    assert a.partitions(t) == set(range(6)) - b_partitions
    # The instance comes back with a new member id: same partitions, no rebalance.
    b2 = h.member("B2", instance_id="i-b")
    h.settle(b2, a)
    assert b2.partitions(t) == b_partitions and "B" not in h.group.members
    assert h.group.static_members == {"i-a": "A", "i-b": "B2"}
    # The replaced member id is fenced.
    assert h.send(ConsumerGroupHeartbeatRequest(GROUP, "B", 2, instance_id="i-b", owned={})).error == \
        ErrorCode.fenced_instance_id
    assert h.send(ConsumerGroupHeartbeatRequest(GROUP, "X", 2, instance_id="i-x", owned={})).error == \
        ErrorCode.unknown_member_id


def test_a_static_member_replaced_before_it_got_its_partitions_passes_its_target_on():
    # B joins while A still holds all six partitions (B waits for its three, unreleased), leaves for
    # a while before it has them, and comes back as B2 with no rebalance. As Kafka's replaceMember,
    # B2 takes over B's target assignment, so B's partitions reach B2 once A has revoked them
    # (without it, they were in no member's target and nobody consumed them).
    h = Harness()
    t = h.topics.id("t")
    a, b = h.member("A"), h.member("B", instance_id="i-b")
    a.heartbeat(h.send)
    b.heartbeat(h.send)
    b_target = h.group.target_assignment["B"][t]
    assert h.group.members["B"].state is MemberState.UNRELEASED_PARTITIONS and not b.partitions(t)
    b.leave(h.send, static_for_now=True)
    epoch = h.group.group_epoch
    b2 = h.member("B2", instance_id="i-b")
    b2.heartbeat(h.send)
    assert h.group.group_epoch == epoch and set(h.group.target_assignment) == {"A", "B2"}
    assert h.group.target_assignment["B2"] == {t: b_target}
    assert h.store.group_records("consumer").groups[GROUP] == h.group.to_stored()
    h.settle(a, b2)
    assert b2.partitions(t) == b_target and a.partitions(t) == set(range(6)) - b_target
    assert h.group.state_name == "Stable"


def test_a_static_member_that_does_not_come_back_is_fenced_at_its_session_end():
    h = Harness()
    a, b = h.member("A", instance_id="i-a"), h.member("B", instance_id="i-b")
    h.settle(a, b)
    b.leave(h.send, static_for_now=True)
    h.heartbeat_through(SESSION_MS // 1000 + 1, a)
    assert "B" not in h.group.members
    assert h.settled_alone(a) == set(range(6))


def test_session_expiry_fences_a_silent_member():
    h = Harness()
    a, b = h.member("A"), h.member("B")
    h.settle(a, b)
    epoch = h.group.group_epoch
    h.advance(SESSION_MS / 1000 - 1)
    a.heartbeat(h.send)
    h.advance(1.5)  # B's session has run out; A's has not
    assert set(h.group.members) == {"A"} and h.group.group_epoch == epoch + 1
    assert h.settled_alone(a) == set(range(6))
    assert h.shard.next_deadline() is not None  # A's session stays watched


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced():
    h = Harness()
    t = h.topics.id("t")
    a = h.member("A", rebalance_timeout_ms=5000)
    b = h.member("B")
    a.heartbeat(h.send)
    b.heartbeat(h.send)
    stubborn = {t: tuple(range(6))}
    h.send(ConsumerGroupHeartbeatRequest(GROUP, "A", 1, owned=stubborn))  # told to revoke
    for _ in range(4):
        h.advance(1.0)
        h.send(ConsumerGroupHeartbeatRequest(GROUP, "A", 1, owned=stubborn))  # keeps them: alive, not revoking
        b.heartbeat(h.send)
    assert "A" in h.group.members
    h.advance(1.5)
    assert "A" not in h.group.members
    assert h.settled_alone(b) == set(range(6))


def test_the_range_assignor_when_members_ask_for_it():
    h = Harness()
    t = h.topics.id("t")
    a, b = h.member("A", server_assignor="range"), h.member("B", server_assignor="range")
    h.settle(a, b)
    assert (a.partitions(t), b.partitions(t)) == ({0, 1, 2}, {3, 4, 5})
    assert h.shard.manager("consumer").describe([GROUP])[0].assignor == "range"


def test_new_partitions_and_topics_created_later_bump_the_epoch_and_are_assigned():
    topics = FakeTopics(t=2)
    h = Harness(topics)
    a, b = h.member("A", "t", "later"), h.member("B", "t", "later")
    h.settle(a, b)
    epoch = h.group.group_epoch
    topics.by_name["t"].num_partitions = 4
    topics.add("later", 2)
    h.settle(a, b)
    assert h.group.group_epoch == epoch + 1
    owned = [(t, p) for m in (a, b) for t, ps in m.owned.items() for p in ps]
    assert sorted(owned) == sorted([(topics.id("t"), p) for p in range(4)] + [(topics.id("later"), p) for p in range(2)])
    assert [len(list(m.owned.items())) > 0 for m in (a, b)] == [True, True]


def test_a_regex_subscription_follows_the_topics_it_matches():
    topics = FakeTopics(**{"orders-eu": 2, "orders-us": 2, "payments": 2, "__consumer_offsets": 1})
    h = Harness(topics)
    member = SimConsumer(GROUP, "A", ())
    request = member.request()
    result = h.send(ConsumerGroupHeartbeatRequest(**{**request.__dict__, "subscribed_topic_names": None,
                                                     "subscribed_topic_regex": "orders-.*|__.*"}))
    assert result.error == ErrorCode.none
    assert set(result.assignment) == {topics.id("orders-eu"), topics.id("orders-us")}
    epoch = h.group.group_epoch
    topics.add("orders-asia", 1)
    result = h.send(ConsumerGroupHeartbeatRequest(GROUP, "A", result.member_epoch, owned=result.assignment))
    assert h.group.group_epoch == epoch + 1 and topics.id("orders-asia") in result.assignment


@pytest.mark.timeout(60)
def test_a_regex_is_matched_in_linear_time_and_read_as_re2():
    """Kafka matches subscribed regexes with RE2/J, in time linear in the topic name. A pattern that
    backtracks catastrophically in a backtracking engine (`(.*)*x` against a long name that does not
    match) must not stall the event loop the coordinator runs on; a backreference, which RE2 has
    not, is INVALID_REGULAR_EXPRESSION as in Kafka."""
    long_name = "topic-" + "a" * 80
    topics = FakeTopics(**{long_name: 1, "topic-x": 1})
    h = Harness(topics)
    request = SimConsumer(GROUP, "A", ()).request()
    result = h.send(ConsumerGroupHeartbeatRequest(**{**request.__dict__, "subscribed_topic_names": None,
                                                     "subscribed_topic_regex": "(.*)*x"}))
    assert result.error == ErrorCode.none
    assert set(result.assignment) == {topics.id("topic-x")}
    refused = h.send(ConsumerGroupHeartbeatRequest(**{**SimConsumer(GROUP, "B", ()).request().__dict__,
                                                      "subscribed_topic_names": None,
                                                      "subscribed_topic_regex": r"(topic)-\1"}))
    assert refused.error == ErrorCode.invalid_regular_expression


# --- coexisting with classic groups -------------------------------------------------------------


def classic_join(h: Harness, member_id: str = ""):
    """A classic JoinGroup, with the join phase completed (no initial delay: at the next tick)."""
    pending = h.shard.manager("classic").join_group(h.now, h.now_ms, JoinGroupRequest(
        GROUP, member_id, None, "classic-client", "/127.0.0.1", 10_000, 10_000, "consumer",
        [("range", b"")], require_known_member_id=False))
    h.shard.tick(h.now, h.now_ms)
    return pending


def commit(h: Harness, generation: int, member: str, offsets, version: int = 9) -> dict:
    return h.shard.offsets.commit_offsets(h.now_ms, group_id=GROUP, generation_id=generation, member_id=member,
                                          group_instance_id=None, offsets=offsets, version=version)


def test_an_empty_classic_group_becomes_a_consumer_group_keeping_its_offsets():
    h = Harness()
    assert commit(h, -1, "", {("t", 0): (42, -1, "kept")}) == {("t", 0): ErrorCode.none}
    assert h.shard.groups[GROUP].group_type == "classic"
    a = h.member("A")
    assert a.heartbeat(h.send).error == ErrorCode.none
    assert h.shard.groups[GROUP].group_type == CONSUMER
    assert h.shard.offsets.fetch_offsets(GROUP, [("t", 0)])[0][1].offset == 42
    assert GROUP not in h.store.group_records("classic").groups and GROUP in h.store.group_records("consumer").groups


def test_a_classic_group_with_members_is_not_a_consumer_group():
    h = Harness()
    pending = classic_join(h)
    assert pending.result.error == ErrorCode.none
    result = h.member("A").heartbeat(h.send)
    assert (result.error, result.message) == (ErrorCode.group_id_not_found, "Group cg is not a consumer group.")
    assert h.shard.manager("consumer").describe([GROUP])[0].error == ErrorCode.group_id_not_found


def test_classic_requests_to_a_consumer_group():
    h = Harness()
    a = h.member("A")
    a.heartbeat(h.send)
    assert classic_join(h).result.error == ErrorCode.inconsistent_group_protocol
    assert h.shard.manager("classic").heartbeat(h.now, group_id=GROUP, generation_id=1, member_id="A") == ErrorCode.unknown_member_id
    sync = h.shard.manager("classic").sync_group(h.now, h.now_ms, group_id=GROUP, generation_id=1, member_id="A",
                                      group_instance_id=None, protocol_type=None, protocol_name=None, assignments={})
    assert sync.result.error == ErrorCode.unknown_member_id
    assert h.shard.manager("classic").leave_group(h.now, h.now_ms, GROUP, [("A", None)]) == (
        ErrorCode.none, [ErrorCode.unknown_member_id])
    assert h.shard.manager("classic").describe_group(GROUP) is None
    assert [(g.group_id, g.group_type, g.protocol_type, g.state) for g in h.shard.list_groups()] == [
        (GROUP, "consumer", "consumer", "Stable")]
    assert h.shard.list_groups(types_filter=["classic"]) == []
    assert [g.group_id for g in h.shard.list_groups(states_filter=["stable"], types_filter=["consumer"])] == [GROUP]
    assert h.shard.delete_groups(h.now_ms, [GROUP]) == {GROUP: ErrorCode.non_empty_group}
    # Once Empty, a classic member may take the id over; the consumer group's records go.
    a.leave(h.send)
    assert classic_join(h).result.error == ErrorCode.none
    assert h.shard.groups[GROUP].group_type == "classic" and GROUP not in h.store.group_records("consumer").groups


def test_an_empty_consumer_group_is_deleted_with_its_records_and_offsets():
    h = Harness()
    a = h.member("A")
    a.heartbeat(h.send)
    assert commit(h, 1, "A", {("t", 1): (7, -1, "")}) == {("t", 1): ErrorCode.none}
    a.leave(h.send)
    assert h.shard.delete_groups(h.now_ms, [GROUP]) == {GROUP: ErrorCode.none}
    assert GROUP not in h.shard.groups and GROUP not in h.store.group_records("consumer").groups and GROUP not in h.store.offsets


def test_offset_commits_and_fetches_are_checked_by_member_epoch():
    h = Harness()
    a, b = h.member("A"), h.member("B")
    h.settle(a, b)

    def commit_one(generation, member, version=9):
        return commit(h, generation, member, {("t", 0): (5, -1, "")}, version)[("t", 0)]

    assert commit_one(a.epoch, "A") == ErrorCode.none
    assert commit_one(a.epoch - 1, "A") == ErrorCode.stale_member_epoch
    assert commit_one(a.epoch, "A", version=8) == ErrorCode.unsupported_version
    assert commit_one(a.epoch, "nobody") == ErrorCode.unknown_member_id
    assert commit_one(-1, "") == ErrorCode.unknown_member_id  # an admin commit while the group has members
    assert h.shard.offsets.validate_offset_fetch(GROUP, "A", a.epoch) == ErrorCode.none
    assert h.shard.offsets.validate_offset_fetch(GROUP, "A", a.epoch + 1) == ErrorCode.stale_member_epoch
    assert h.shard.offsets.validate_offset_fetch(GROUP, "nobody", 1) == ErrorCode.unknown_member_id
    assert h.shard.offsets.validate_offset_fetch(GROUP, None, -1) == ErrorCode.none
    a.leave(h.send)
    b.leave(h.send)
    assert commit_one(-1, "") == ErrorCode.none  # Empty: admin tools may reset offsets


def test_offsets_of_subscribed_topics_do_not_expire_others_do():
    topics = FakeTopics(t=2, old=1)
    h = Harness(topics, offsets_retention_ms=60_000)
    a = h.member("A")
    a.heartbeat(h.send)
    commit(h, 1, "A", {("t", 0): (1, -1, ""), ("old", 0): (2, -1, "")})
    h.now += 120
    a.heartbeat(h.send)
    assert h.shard.offsets.expire_offsets(h.now_ms) == 1
    assert set(h.store.offsets[GROUP]) == {("t", 0)}


def test_the_consumer_protocol_can_be_switched_off():
    h = Harness(rebalance_protocols=("classic",))
    result = h.member("A").heartbeat(h.send)
    assert result.error == ErrorCode.unsupported_version and "group.coordinator.rebalance.protocols" in result.message


# --- a restart --------------------------------------------------------------------------------------


def test_a_restart_resumes_the_group_from_its_records(tmp_path):
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    topics = FakeTopics(t=6)
    h = Harness(topics, OffsetsStore.open(logs, 0))
    t = topics.id("t")
    a, b = h.member("A"), h.member("B", instance_id="i-b")
    h.settle(a, b)
    c = h.member("C")
    c.heartbeat(h.send)
    a.heartbeat(h.send)  # A is mid-revocation when the broker stops
    assert commit(h, a.epoch, "A", {("t", 0): (11, -1, "m")}) == {("t", 0): ErrorCode.none}
    before = h.group.to_stored()
    members_before = dict(h.group.members)
    targets_before = dict(h.group.target_assignment)
    logs.close()

    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    h2 = Harness(topics, OffsetsStore.open(logs, 0))
    group = h2.group
    assert group.to_stored() == before
    assert group.members == members_before and group.target_assignment == targets_before
    assert (group.group_epoch, group.assignment_epoch, group.state_name) == (before.epoch, before.assignment_epoch,
                                                                             "Reconciling")
    assert group.partition_epochs == h.group.partition_epochs
    assert h2.store.offsets[GROUP][("t", 0)] == OffsetAndMetadata(11, -1, "m", h.now_ms)
    # The members go on with the epochs they had: nobody is fenced, and the group settles.
    h2.settle(a, b, c)
    assert not (a.errors or b.errors or c.errors)
    assert sorted(len(m.partitions(t)) for m in (a, b, c)) == [2, 2, 2]
    h2.check_no_partition_twice(a, b, c)
    logs.close()


def test_members_that_do_not_come_back_after_a_restart_are_fenced(tmp_path):
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    h = Harness(FakeTopics(t=6), OffsetsStore.open(logs, 0))
    a, b = h.member("A"), h.member("B")
    h.settle(a, b)
    epoch = h.group.group_epoch
    logs.close()
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    h2 = Harness(h.topics, OffsetsStore.open(logs, 0))
    assert h2.shard.next_deadline() is None  # sessions start with the timers, not at load
    h2.shard.start_timers(h2.now)
    h2.advance(SESSION_MS / 1000 - 1)
    a.heartbeat(h2.send)
    h2.advance(1.5)
    assert set(h2.group.members) == {"A"} and h2.group.group_epoch == epoch + 1
    logs.close()
