"""Replication between the brokers of a cluster, as Kafka's ReplicaManager, Partition and
ReplicaFetcherThread do it.

Each broker follows the controller's metadata (minibroker.storage.metadata_image) for the partitions
it hosts: the replica named leader (in a leader epoch) leads, the others follow.

Leading (`Replication.become_leader`): the log takes the leader epoch (appends are stamped with it and
it starts in the leader-epoch cache at the log end, Kafka's makeLeader); for each follower the leader
keeps its log end offset and when it was last caught up (Kafka's rule: its fetch reached the
leader's log end, or the log end of its previous fetch). The high watermark is the smallest log end
offset of the ISR; while the ISR is the leader alone it is the leader's log end
(minibroker.storage.log's `high_watermark_follows_end`), so a partition with one replica pays
nothing. A follower whose log end reaches the leader's joins the ISR; one not caught up for
`replica.lag.time.max.ms` leaves it; both are asked of the controller (AlterPartition), which
records them. Consumers read up to the high watermark; a produce with acks=all waits until it
passes the produced records (minibroker.handlers.produce), refused up front with
NOT_ENOUGH_REPLICAS while the ISR is below `min.insync.replicas`.

Following (`become_follower`): the log drops its producer state (rebuilt from the replicated log
when it leads again, as at a restart: producer and transaction state, the transaction index's
aborted transactions included, come back from the log's batches) and a fetcher task per leader
broker fetches every partition followed from it through the leader's own Fetch handler (the
same read path as a consumer's, `replica_state.replica_id` set), in process: the batches are
appended as they are (`PartitionLog.append_replicated`), the high watermark taken from the
response. Each fetch says the follower's latest leader epoch (`last_fetched_epoch`); a leader whose
log diverged from it there answers `diverging_epoch`, and the follower truncates to where the two
logs agree before fetching on (Kafka's KIP-595 truncation), so records of an old leader the new one
does not have are cut before anything else is appended. A fetcher whose leader is stopped waits
`replica.fetch.backoff.ms` and tries again; a partition whose leader changes moves to the new
leader's fetcher.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import trio

from minibroker.protocol.errors import ErrorCode
from minibroker.purgatory import DelayedOperation, Purgatory
from minibroker.storage.metadata_image import (
    NO_LEADER,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    PartitionRegistration,
    RemoveTopicRecord,
    TopicRecord,
)

if TYPE_CHECKING:
    from minibroker.clock import BrokerClock
    from minibroker.producers import ProducerStates
    from minibroker.storage.controller import Controller
    from minibroker.storage.log import PartitionLog
    from minibroker.storage.manager import LogManager

__all__ = ["FETCH_API", "BrokerUnavailable", "Replication", "ReplicationSettings"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
FETCH_API = 1
FOLLOWER_FETCH_VERSION = 17


class BrokerUnavailable(Exception):
    """The broker asked (a leader, in process) is stopped."""


@dataclass(frozen=True)
class ReplicationSettings:
    """Kafka's replica.* settings (their names, and Kafka's defaults)."""

    lag_time_max_ms: int = 30_000  # replica.lag.time.max.ms
    fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    fetch_min_bytes: int = 1  # replica.fetch.min.bytes
    fetch_max_bytes: int = 1_048_576  # replica.fetch.max.bytes
    fetch_response_max_bytes: int = 10_485_760  # replica.fetch.response.max.bytes
    fetch_backoff_ms: int = 1_000  # replica.fetch.backoff.ms

    @classmethod
    def from_config(cls, config: Any) -> ReplicationSettings:
        return cls(config["replica.lag.time.max.ms"], config["replica.fetch.wait.max.ms"],
                   config["replica.fetch.min.bytes"], config["replica.fetch.max.bytes"],
                   config["replica.fetch.response.max.bytes"], config["replica.fetch.backoff.ms"])


@dataclass(slots=True)
class FollowerState:
    """What a leader knows of one follower (Kafka's Replica state)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = -1  # the leader's log end at the follower's previous fetch


@dataclass(slots=True)
class LeaderState:
    """A partition this broker leads with other replicas."""

    log: PartitionLog
    epoch: int
    epoch_start_offset: int  # the log end when it became leader in this epoch
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    followers: dict[int, FollowerState] = field(default_factory=dict)


@dataclass(slots=True)
class Followed:
    """A partition this broker follows."""

    leader: int
    epoch: int


class DelayedProduce(DelayedOperation):
    """An acks=all produce waiting for the high watermark to pass its records, on each partition
    (Kafka's DelayedProduce): done when every partition's is passed, or its leadership lost."""

    def __init__(self, deadline: float, replication: Replication, required: dict[TopicPartition, int]) -> None:
        super().__init__(deadline)
        self.replication = replication
        self.required = required  # (topic, partition) -> the offset the high watermark must reach
        self.errors: dict[TopicPartition, ErrorCode] = {}

    def try_complete(self) -> bool:
        for tp, offset in list(self.required.items()):
            code = self.replication.replicated(tp, offset)
            if code is None:
                return False
            self.errors[tp] = code
            del self.required[tp]
        return self.force_complete()

    def on_expiration(self) -> None:
        for tp in self.required:
            self.errors[tp] = ErrorCode.request_timed_out


class Replication:
    """One broker's replication (module docstring)."""

    def __init__(self, node_id: int, logs: LogManager, controller: Controller, producer_states: ProducerStates,
                 fetch_purgatory: Purgatory, clock: BrokerClock, settings: ReplicationSettings | None = None,
                 peer: Callable[[int], Any] | None = None) -> None:
        self.node_id = node_id
        self.logs = logs
        self.controller = controller
        self.producer_states = producer_states
        self.fetch_purgatory = fetch_purgatory
        self.produce_purgatory = Purgatory("Produce", clock)
        self.clock = clock
        self.settings = settings or ReplicationSettings()
        # The broker that leads a partition, in process (None when it is stopped): the cluster's.
        self.peer: Callable[[int], Any] = peer if peer is not None else (lambda node_id: None)
        self.leading: dict[TopicPartition, LeaderState] = {}  # replicated partitions led here
        self.followed: dict[TopicPartition, Followed] = {}
        self._fetchers: dict[int, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._leader_changes: list[Callable[[str, int, PartitionRegistration], None]] = []
        self._fetch_failed = False  # the last fetch's answer held a partition error
        self.stopped = False

    def subscribe(self, listener: Callable[[str, int, PartitionRegistration], None]) -> None:
        """Call `listener(topic, partition, registration)` after a partition hosted here changes
        leader or leader epoch (the coordinators take over or give up their partitions there)."""
        self._leader_changes.append(listener)

    # -- following the metadata ----------------------------------------------------------------

    def start(self) -> None:
        """Take up every hosted partition's role, as the metadata says now."""
        image = self.controller.image
        for name, partition, plog in list(self.logs.logs()):
            registration = image.partition(name, partition)
            if registration is not None:
                self._apply(name, partition, plog, registration)

    def on_metadata(self, records: Iterable[MetadataRecord]) -> None:
        touched: dict[tuple, None] = {}
        for record in records:
            if isinstance(record, (PartitionRecord, PartitionChangeRecord)):
                touched[(record.topic_id, record.partition_id)] = None
            elif isinstance(record, (TopicRecord, RemoveTopicRecord)):
                topic = self.controller.image.topic_by_id(record.topic_id)
                if topic is not None:
                    for index in topic.partitions:
                        touched[(record.topic_id, index)] = None
        image = self.controller.image
        for topic_id, partition in touched:
            topic = image.topic_by_id(topic_id)
            if topic is None:
                continue
            plog = self.logs.log(topic.name, partition)
            registration = topic.partitions.get(partition)
            if plog is None or registration is None:
                self._forget((topic.name, partition))
                continue
            self._apply(topic.name, partition, plog, registration)
        # Partitions of deleted topics, or moved away.
        for tp in [tp for tp in list(self.leading) + list(self.followed) if self.logs.log(*tp) is None]:
            self._forget(tp)

    def _forget(self, tp: TopicPartition) -> None:
        self.leading.pop(tp, None)
        self.followed.pop(tp, None)
        self.produce_purgatory.check_and_complete(tp)

    def _apply(self, name: str, partition: int, plog: PartitionLog, reg: PartitionRegistration) -> None:
        tp = (name, partition)
        if reg.leader == self.node_id:
            state = self.leading.get(tp)
            led_before = plog.leader_epoch
            if state is None or state.epoch != reg.leader_epoch or led_before != reg.leader_epoch:
                self.become_leader(name, partition, plog, reg)
            else:
                self._isr_changed(tp, state, reg)
        else:
            followed = self.followed.get(tp)
            if followed is None or followed.leader != reg.leader or followed.epoch != reg.leader_epoch \
                    or plog.leader_epoch is not None:
                self.become_follower(name, partition, plog, reg)

    def become_leader(self, name: str, partition: int, plog: PartitionLog, reg: PartitionRegistration) -> None:
        tp = (name, partition)
        self.followed.pop(tp, None)
        plog.leader_epoch = reg.leader_epoch
        plog.follower = False
        end = plog.log_end_offset
        plog.leader_epochs.assign(reg.leader_epoch, end)
        now_ms = self.clock.now_ms()
        if len(reg.replicas) > 1 or reg.adding_replicas:
            followers = {b: FollowerState(last_caught_up_ms=now_ms if b in reg.isr else 0)
                         for b in reg.replicas if b != self.node_id}
            self.leading[tp] = LeaderState(plog, reg.leader_epoch, end, reg.isr, reg.replicas, followers)
            self._set_high_watermark_mode(self.leading[tp], plog)
        else:
            self.leading.pop(tp, None)
            plog.update_high_watermark(None)
        if self.producer_states._all_loaded:
            self.producer_states.manager(name, partition, plog, now_ms)  # the producer-id quota looks ids up
        log.info("%s-%d: leader in epoch %d (replicas %s, ISR %s)", name, partition, reg.leader_epoch,
                 list(reg.replicas), list(reg.isr))
        self._wake(tp)
        self._announce(name, partition, reg)

    def become_follower(self, name: str, partition: int, plog: PartitionLog, reg: PartitionRegistration) -> None:
        tp = (name, partition)
        was_leader = plog.leader_epoch is not None
        if plog.high_watermark_follows_end:
            plog.update_high_watermark(plog.high_watermark)  # from here on the leader's
        plog.leader_epoch = None
        plog.follower = True
        self.leading.pop(tp, None)
        self.producer_states.forget_partition(name, partition)
        if reg.leader == NO_LEADER:
            self.followed.pop(tp, None)
        else:
            self.followed[tp] = Followed(reg.leader, reg.leader_epoch)
            self._ensure_fetcher(reg.leader)
        if was_leader or reg.leader != NO_LEADER:
            log.info("%s-%d: follower of broker %d in epoch %d", name, partition, reg.leader, reg.leader_epoch)
        self._wake(tp)
        self._announce(name, partition, reg)

    def _announce(self, name: str, partition: int, reg: PartitionRegistration) -> None:
        for listener in self._leader_changes:
            try:
                listener(name, partition, reg)
            except Exception:
                log.exception("%s-%d: a leadership listener failed", name, partition)

    def _isr_changed(self, tp: TopicPartition, state: LeaderState, reg: PartitionRegistration) -> None:
        state.isr, state.replicas = reg.isr, reg.replicas
        now_ms = self.clock.now_ms()
        for b in reg.replicas:
            if b != self.node_id and b not in state.followers:
                state.followers[b] = FollowerState(last_caught_up_ms=now_ms if b in reg.isr else 0)
        for b in [b for b in state.followers if b not in reg.replicas]:
            del state.followers[b]
        self._set_high_watermark_mode(state, state.log)
        self._maybe_advance_high_watermark(tp, state)
        self._wake(tp)

    def _set_high_watermark_mode(self, state: LeaderState, plog: PartitionLog) -> None:
        """An ISR of the leader alone: the high watermark follows the log end. Otherwise it is
        explicit, starting where it is."""
        if state.isr == (self.node_id,):
            plog.update_high_watermark(None)
        elif plog.high_watermark_follows_end:
            plog.update_high_watermark(plog.high_watermark)

    def _wake(self, tp: TopicPartition) -> None:
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)

    # -- leading ---------------------------------------------------------------------------------

    def is_leader(self, topic: str, partition: int) -> bool:
        plog = self.logs.log(topic, partition)
        return plog is not None and plog.leader_epoch is not None

    def isr(self, topic: str, partition: int) -> tuple[int, ...]:
        state = self.leading.get((topic, partition))
        return state.isr if state is not None else (self.node_id,)

    def replicated(self, tp: TopicPartition, offset: int) -> ErrorCode | None:
        """For an acks=all produce: None while the high watermark is below `offset`; NONE once past
        it (NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas
        meanwhile, as Kafka answers), NOT_LEADER_OR_FOLLOWER once leadership is lost."""
        plog = self.logs.log(*tp)
        if plog is None or plog.leader_epoch is None:
            return ErrorCode.not_leader_or_follower
        if plog.high_watermark < offset:
            return None
        if len(self.isr(*tp)) < plog.config.min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    async def wait_replicated(self, required: dict[TopicPartition, int], timeout_ms: int) -> dict[TopicPartition, ErrorCode]:
        """Wait (up to `timeout_ms`) until the high watermark of each partition passes its offset;
        an error per partition (module docstring)."""
        op = DelayedProduce(self.clock.monotonic() + timeout_ms / 1000, self, dict(required))
        await self.produce_purgatory.wait(op, list(required))
        return op.errors

    async def wait_written(self, tp: TopicPartition, offset: int, timeout_ms: int) -> ErrorCode:
        """A coordinator's own append (its state store writes to the log directly, not through the
        replica manager): the followers' fetches parked at the log end are woken now, as every
        append of the replica manager wakes them, then `wait_replicated` for that one partition."""
        self.fetch_purgatory.check_and_complete(tp)
        return (await self.wait_replicated({tp: offset}, timeout_ms)).get(tp, ErrorCode.none)

    def update_follower(self, topic: str, partition: int, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        """A follower fetched from `fetch_offset`: its log end, whether it is caught up (Kafka's
        rule), the ISR it may join, the high watermark it may move."""
        tp = (topic, partition)
        state = self.leading.get(tp)
        if state is None:
            return
        follower = state.followers.get(replica_id)
        if follower is None:
            return
        leader_end = state.log.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = now_ms
        elif fetch_offset >= follower.last_fetch_leader_end >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.last_fetch_leader_end = leader_end
        follower.last_fetch_ms = now_ms
        follower.log_end_offset = fetch_offset
        if replica_id not in state.isr and fetch_offset >= state.log.high_watermark \
                and fetch_offset >= state.epoch_start_offset and fetch_offset >= leader_end:
            self._alter_isr(tp, state, state.isr + (replica_id,))
        self._maybe_advance_high_watermark(tp, state)

    def _maybe_advance_high_watermark(self, tp: TopicPartition, state: LeaderState) -> None:
        plog = state.log
        if plog.high_watermark_follows_end:
            return
        ends = [plog.log_end_offset] + [state.followers[b].log_end_offset for b in state.isr if b in state.followers]
        high_watermark = min(ends)
        if high_watermark > plog.high_watermark:
            plog.update_high_watermark(high_watermark)
            self._wake(tp)

    def _alter_isr(self, tp: TopicPartition, state: LeaderState, isr: tuple[int, ...]) -> None:
        code = self.controller.alter_partition(tp[0], tp[1], self.node_id, state.epoch, isr, self.clock.now_ms())
        if code != ErrorCode.none:
            log.info("%s-%d: the controller refused ISR %s: %s", tp[0], tp[1], list(isr), code.name)

    def time_jumped(self) -> None:
        """Every clock moved on at once (a test's `advance`): the followers caught up before were
        caught up all the while, as their fetches would have kept them."""
        now_ms = self.clock.now_ms()
        for state in self.leading.values():
            end = state.log.log_end_offset
            for follower in state.followers.values():
                if follower.log_end_offset >= end:
                    follower.last_caught_up_ms = now_ms
                    follower.last_fetch_ms = now_ms

    def shrink_isrs(self, now_ms: int) -> int:
        """Followers not caught up for replica.lag.time.max.ms leave the ISRs this broker leads
        (Kafka's maybeShrinkIsr). Returns how many ISRs shrank."""
        shrunk = 0
        lag = self.settings.lag_time_max_ms
        for tp, state in list(self.leading.items()):
            out = [b for b in state.isr if b != self.node_id and b in state.followers
                   and now_ms - state.followers[b].last_caught_up_ms > lag]
            if out:
                log.info("%s-%d: shrinking the ISR from %s: %s not caught up for %d ms", tp[0], tp[1],
                         list(state.isr), out, lag)
                self._alter_isr(tp, state, tuple(b for b in state.isr if b not in out))
                shrunk += 1
        return shrunk

    async def run_isr_checks(self) -> None:
        """Every replica.lag.time.max.ms / 2 (Kafka's isr-expiration task), on the broker clock."""
        every = self.settings.lag_time_max_ms / 2000
        while True:
            await self.clock.sleep(every)
            self.shrink_isrs(self.clock.now_ms())

    # -- following -------------------------------------------------------------------------------

    async def run(self, nursery: trio.Nursery) -> None:
        """Start the fetchers (and keep starting them as partitions come to be followed)."""
        self._nursery = nursery
        for leader in {f.leader for f in self.followed.values()}:
            self._ensure_fetcher(leader)

    def _ensure_fetcher(self, leader: int) -> None:
        if self._nursery is None or self.stopped or leader in self._fetchers or leader == self.node_id:
            return
        scope = trio.CancelScope()
        self._fetchers[leader] = scope
        self._nursery.start_soon(self._fetcher, leader, scope)

    def stop(self) -> None:
        self.stopped = True
        for scope in self._fetchers.values():
            scope.cancel()
        self._fetchers.clear()
        self.produce_purgatory.complete_all()

    async def _fetcher(self, leader_id: int, scope: trio.CancelScope) -> None:
        backoff = self.settings.fetch_backoff_ms / 1000
        long_poll = self.settings.fetch_wait_max_ms / 1000
        try:
            with scope:
                while True:
                    parts = {tp: f for tp, f in self.followed.items() if f.leader == leader_id}
                    if not parts:
                        return
                    leader = self.peer(leader_id)
                    if leader is None:
                        await self.clock.sleep(backoff)
                        continue
                    asked = self.clock.monotonic()
                    try:
                        body = await leader.internal_request(FETCH_API, FOLLOWER_FETCH_VERSION, self._fetch_request(parts),
                                                             f"broker-{self.node_id}-fetcher")
                    except BrokerUnavailable:
                        await self.clock.sleep(backoff)
                        continue
                    if not self._process(leader_id, parts, body) and (
                            self._fetch_failed or self.clock.monotonic() - asked < long_poll / 2):
                        # replica.fetch.backoff.ms after a partition error, as Kafka's fetcher backs
                        # off (or an empty answer that did not wait); an empty answer after the long
                        # poll (replica.fetch.wait.max.ms) ran out is fetched again at once, so a
                        # follower never sleeps through the next append.
                        await self.clock.sleep(backoff)
                    else:
                        await trio.lowlevel.checkpoint()  # a leader answering at once never starves the others
        finally:
            if self._fetchers.get(leader_id) is scope:
                del self._fetchers[leader_id]
        # Only after a normal end (never while the broker's nursery is being cancelled: a fetcher
        # started then would start another as it ends, for ever).
        if not scope.cancel_called and not self.stopped and any(f.leader == leader_id for f in self.followed.values()):
            self._ensure_fetcher(leader_id)  # partitions came while it was ending

    def _fetch_request(self, parts: dict[TopicPartition, Followed]) -> dict[str, Any]:
        settings = self.settings
        topics: dict[Any, list[dict[str, Any]]] = {}
        for (name, partition), followed in sorted(parts.items()):
            info = self.logs.topic(name)
            plog = self.logs.log(name, partition)
            if info is None or plog is None:
                continue
            topics.setdefault(info.topic_id, []).append({
                "partition": partition, "current_leader_epoch": followed.epoch, "fetch_offset": plog.log_end_offset,
                "last_fetched_epoch": plog.leader_epochs.latest_epoch, "log_start_offset": plog.log_start_offset,
                "partition_max_bytes": settings.fetch_max_bytes})
        return {"replica_state": {"replica_id": self.node_id, "replica_epoch": -1},
                "max_wait": settings.fetch_wait_max_ms, "min_bytes": settings.fetch_min_bytes,
                "max_bytes": settings.fetch_response_max_bytes, "isolation_level": 0, "session_id": 0,
                "session_epoch": -1, "forgotten_topics_data": (),
                "topics": [{"topic_id": topic_id, "partitions": partitions} for topic_id, partitions in topics.items()]}

    def _process(self, leader_id: int, parts: dict[TopicPartition, Followed], body: dict[str, Any]) -> bool:
        """Append what a fetch brought; False when nothing moved (`_fetch_failed` then says whether a
        partition answered an error: the fetcher backs off)."""
        progressed = False
        self._fetch_failed = False
        now_ms = self.clock.now_ms()
        for topic in body.get("responses", ()):
            info = self.logs.topic_by_id(topic["topic_id"]) if topic.get("topic_id") else self.logs.topic(topic["topic"])
            if info is None:
                continue
            for part in topic["partitions"]:
                tp = (info.name, part["partition_index"])
                followed = self.followed.get(tp)
                plog = self.logs.log(*tp)
                if followed is None or followed.leader != leader_id or plog is None:
                    continue
                code = part["error_code"]
                if code == ErrorCode.none:
                    progressed |= self._apply_fetched(tp, plog, part, now_ms)
                elif code == ErrorCode.offset_out_of_range:
                    progressed |= self._out_of_range(tp, plog, leader_id)
                else:
                    self._fetch_failed = True
                    log.debug("%s-%d: fetch from broker %d answered %s", tp[0], tp[1], leader_id,
                              ErrorCode(code).name)
        return progressed

    def _apply_fetched(self, tp: TopicPartition, plog: PartitionLog, part: dict[str, Any], now_ms: int) -> bool:
        diverging = part.get("diverging_epoch")
        if diverging is not None and (diverging.get("epoch", -1) >= 0 or diverging.get("end_offset", -1) >= 0
                                      or plog.leader_epochs.latest_epoch >= 0):
            epoch, end = diverging.get("epoch", -1), diverging.get("end_offset", -1)
            if epoch >= 0 and end >= 0:
                own_epoch, own_end = plog.leader_epochs.end_offset_for(epoch, plog.log_end_offset)
                cut = min(end, own_end if own_epoch >= 0 else plog.log_end_offset)
            else:
                # The leader knows no epoch as old as our last one (its cache starts later): what
                # is below our high watermark is committed, the rest is cut (Kafka's fetcher
                # truncates to the high watermark when the leader has no offset for the epoch).
                cut = min(plog.high_watermark, plog.log_end_offset)
            before = (plog.log_end_offset, plog.leader_epochs.latest_epoch)
            log.log(logging.INFO if cut < plog.log_end_offset else logging.DEBUG,
                    "%s-%d: truncating to %d: the leader's epoch %d ends at %d (our log ends at %d)",
                    tp[0], tp[1], cut, epoch, end, plog.log_end_offset)
            plog.truncate_to(cut)
            return (plog.log_end_offset, plog.leader_epochs.latest_epoch) != before
        records = part.get("records") or b""
        moved = False
        if records:
            try:
                plog.append_replicated(records, now_ms)
                moved = True
            except ValueError as exc:
                log.warning("%s-%d: cannot append what the leader sent: %s", tp[0], tp[1], exc)
                return False
        leader_start = part.get("log_start_offset", -1)
        if leader_start > plog.log_start_offset:
            plog.delete_records_before(min(leader_start, plog.log_end_offset))
        high_watermark = part.get("high_watermark", -1)
        if high_watermark >= 0:
            plog.update_high_watermark(min(high_watermark, plog.log_end_offset))
        return moved

    def _out_of_range(self, tp: TopicPartition, plog: PartitionLog, leader_id: int) -> bool:
        """The leader has no records at our log end: its log starts after it (retention,
        DeleteRecords), and ours starts again there (Kafka's truncateFullyAndStartAt); or it ends
        before it (an unclean election), and ours is cut to its end."""
        leader = self.peer(leader_id)
        if leader is None:
            return False
        bounds = leader.replicas.replication.log_bounds(*tp)
        if bounds is None:
            return False
        start, end = bounds
        if plog.log_end_offset > end:
            log.warning("%s-%d: truncating to the leader's log end %d", tp[0], tp[1], end)
            plog.truncate_to(end)
        elif plog.log_end_offset < start:
            log.info("%s-%d: the leader's log starts at %d, past ours: starting afresh there", tp[0], tp[1], start)
            plog.truncate_fully_and_start_at(start)
        return True

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        plog = self.logs.log(topic, partition)
        return None if plog is None else (plog.log_start_offset, plog.log_end_offset)
