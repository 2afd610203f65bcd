"""Hypothesis drives a KIP-848 consumer group with simulated consumers that join, heartbeat, leave,
crash, leave for a while and come back as static members, while topics grow and the coordinator
restarts from its records, and checks, after every step:

* no partition is ever owned by two consumers at once (each consumes from a partition from the
  response that assigned it until it acknowledges its revocation): revoke before assign;
* the coordinator's partition epochs are exactly its members' assigned and revoking partitions, at
  their epochs, none held twice; every member has a target assignment; member epochs never pass
  the assignment epoch, nor it the group epoch, and the group epoch never goes down;
* what it would write to `__consumer_offsets` is what it holds: the stored records equal the live
  group, and a coordinator rebuilt from them carries on where the old one stopped;

and once things calm down (no more arrivals, departures or topic changes; the live consumers
heartbeating, the crashed ones fenced by their sessions), the group is Stable with every partition
of the subscribed topics owned by exactly one live consumer, balanced when they all subscribe to the
same topics.

Plain calls, simulated time: no sockets, no trio.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from minibroker.groups.api import GroupConfig
from minibroker.groups.consumer_group import ConsumerGroup, held_partitions
from minibroker.groups.shard import GroupCoordinatorShard
from minibroker.storage.offsets_store import OffsetsStore
from tests.support.consumer_group_sim import FakeTopics, SimConsumer

GROUP = "model"
SESSION_MS = 6000

events = st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from([("a",), ("a", "b"), ("b",)]), st.booleans()),
    st.tuples(st.just("heartbeat"), st.integers(0, 20)),
    st.tuples(st.just("heartbeat-all")),
    st.tuples(st.just("leave"), st.integers(0, 20)),
    st.tuples(st.just("leave-for-now"), st.integers(0, 20)),
    st.tuples(st.just("come-back"), st.integers(0, 20)),
    st.tuples(st.just("crash"), st.integers(0, 20)),
    st.tuples(st.just("time"), st.sampled_from([0.2, 1.0, 3.0, 7.0])),
    st.tuples(st.just("grow"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("restart")),
), max_size=60)


class Model:
    def __init__(self, assignor: str) -> None:
        self.topics = FakeTopics(a=4, b=3)
        self.store = OffsetsStore()  # keeps the records' content in memory (no log)
        self.config = GroupConfig(consumer_session_timeout_ms=SESSION_MS)
        self.now = 10.0
        self.shard = GroupCoordinatorShard(self.config, self.store, self.now_ms, self.topics)
        self.shard.start_timers(self.now)
        self.assignor = assignor
        self.live: list[SimConsumer] = []
        self.away: list[SimConsumer] = []  # static members that left with epoch -2
        self.count = 0
        self.last_group_epoch = 0
        self.last_heartbeat: dict[str, float] = {}

    def beat(self, consumer: SimConsumer) -> None:
        self.last_heartbeat[consumer.member_id] = self.now
        consumer.heartbeat(self.send)

    @property
    def now_ms(self) -> int:
        return int(self.now * 1000)

    def send(self, request):
        return self.shard.manager("consumer").heartbeat(self.now, self.now_ms, request)

    def pick(self, pool: list[SimConsumer], i: int) -> SimConsumer | None:
        return pool[i % len(pool)] if pool else None

    def apply(self, event) -> None:
        kind = event[0]
        if kind == "join":
            self.count += 1
            instance = f"i-{self.count}" if event[2] else None
            consumer = SimConsumer(GROUP, f"m-{self.count}", event[1], instance_id=instance,
                                   server_assignor=self.assignor)
            self.live.append(consumer)
            self.beat(consumer)
        elif kind == "heartbeat" and (c := self.pick(self.live, event[1])):
            self.beat(c)
        elif kind == "heartbeat-all":
            for c in list(self.live):
                self.beat(c)
        elif kind == "leave" and (c := self.pick(self.live, event[1])):
            self.live.remove(c)
            c.leave(self.send)
        elif kind == "leave-for-now" and (c := self.pick([c for c in self.live if c.instance_id], event[1])):
            self.live.remove(c)
            c.leave(self.send, static_for_now=True)
            self.away.append(c)
        elif kind == "come-back" and (c := self.pick(self.away, event[1])):
            self.away.remove(c)
            self.count += 1
            back = SimConsumer(GROUP, f"m-{self.count}", c.topics, instance_id=c.instance_id,
                               server_assignor=self.assignor)
            self.live.append(back)
            self.beat(back)
        elif kind == "crash" and (c := self.pick(self.live, event[1])):
            self.live.remove(c)  # it stops consuming and heartbeating; its session will end
        elif kind == "time":
            # Live consumers heartbeat within their sessions, however long this step: every 2 s at
            # least (a consumer that does not is a zombie; Kafka cannot help that one either).
            end = self.now + event[1]
            while self.now < end:
                self.now = min(end, self.now + 1.0)
                self.shard.tick(self.now, self.now_ms)
                for c in list(self.live):
                    if self.now - self.last_heartbeat.get(c.member_id, 0) >= 2.0:
                        self.beat(c)
        elif kind == "grow":
            self.topics.by_name[event[1]].num_partitions += 1
        elif kind == "restart":
            self.shard = GroupCoordinatorShard(self.config, self.store, self.now_ms, self.topics)
            self.shard.start_timers(self.now)

    @property
    def group(self) -> ConsumerGroup | None:
        group = self.shard.groups.get(GROUP)
        assert group is None or isinstance(group, ConsumerGroup)
        return group

    def check(self) -> None:
        owners: dict = {}
        for c in self.live:
            for tp in c.holding():
                assert tp not in owners, f"{tp[0]}-{tp[1]} held by {owners[tp]} and {c.member_id}"
                owners[tp] = c.member_id
        group = self.group
        if group is None:
            return
        expected = {}
        for member in group.members.values():
            for tp in held_partitions(member):
                assert tp not in expected, f"{tp} held by two members"
                expected[tp] = member.member_epoch
            assert member.member_epoch <= group.assignment_epoch <= group.group_epoch
        assert group.partition_epochs == expected
        assert set(group.target_assignment) == set(group.members), "every member has a target assignment"
        assert group.group_epoch >= self.last_group_epoch
        self.last_group_epoch = group.group_epoch
        assert self.store.group_records("consumer").groups[GROUP] == group.to_stored()
        rebuilt = ConsumerGroup.from_stored(GROUP, self.store.group_records("consumer").groups[GROUP], self.now_ms)
        assert rebuilt.members == group.members and rebuilt.target_assignment == group.target_assignment
        assert rebuilt.partition_epochs == group.partition_epochs

    def calm_down(self) -> None:
        # Long enough for crashed members' sessions to end and everyone to reconcile.
        for _ in range(int(SESSION_MS / 1000) + 8):
            self.now += 1.0
            self.shard.tick(self.now, self.now_ms)
            for c in list(self.live):
                self.beat(c)
                self.check()
        # Members that left for a while and did not return are fenced like crashed ones.
        group = self.group
        if group is None:
            assert not self.live
            return
        assert set(group.members) == {c.member_id for c in self.live}
        assert group.state_name == ("Stable" if self.live else "Empty")
        subscribed = {name for c in self.live for name in c.topics}
        wanted = {(self.topics.id(n), p) for n in subscribed for p in range(self.topics.by_name[n].num_partitions)}
        owned = [(t, p) for c in self.live for t, ps in c.owned.items() for p in ps]
        assert sorted(owned) == sorted(wanted)
        if self.live and len({c.topics for c in self.live}) == 1 and self.assignor == "uniform":
            sizes = [sum(len(ps) for ps in c.owned.values()) for c in self.live]
            assert max(sizes) - min(sizes) <= 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events, st.sampled_from(["uniform", "range"]))
# A static member that has not got its partitions yet (another still holds them) leaves for a while
# and comes back: its replacement takes over its target assignment (Kafka's replaceMember).
@example([("join", ("a",), False), ("join", ("a",), True), ("leave-for-now", 0), ("come-back", 0)], "uniform")
def test_no_partition_is_owned_twice_and_the_group_settles(steps, assignor):
    model = Model(assignor)
    for event in steps:
        model.apply(event)
        model.check()
    model.calm_down()
