"""The share coordinator, in process: Kafka's ReadShareGroupState, WriteShareGroupState,
InitializeShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary (KIP-932), answered
by a method call instead of an inter-broker request (Kafka 4.4's ShareCoordinatorShard), over the
`__share_group_state` records (storage/share_state.py).

    initialize_state  the group coordinator initializes a share partition when a share group first
                      subscribes to its topic: a snapshot with the group epoch as state epoch and
                      start offset -1 (share.auto.offset.reset decides when a share partition is
                      first loaded), or an explicit start offset (AlterShareGroupOffsets, or 0 for
                      partitions added to a topic the group already reads);
    read_state        a share partition being loaded reads its state (FENCED_LEADER_EPOCH for an
                      older leader epoch than the last seen; a newer one is recorded);
    write_state       a share partition's changes: an update record, or a snapshot once
                      `share.coordinator.snapshot.update.records.per.snapshot` updates followed the
                      last snapshot (FENCED_STATE_EPOCH / FENCED_LEADER_EPOCH for a stale writer);
    read_summary      the start offset and delivery-complete count, for DescribeShareGroupOffsets;
    delete_state      the share partition's state tombstoned (DeleteShareGroupOffsets, DeleteGroups);
    prune             records below the oldest latest snapshot deleted (the log start offset moved),
                      every `share.coordinator.state.topic.prune.interval.ms`.

Errors are `ShareStateError` with Kafka's code and message. Synchronous: a write is in the log when
the method returns (the log's append reaches the OS before it returns, so kill -9 keeps it). No
trio: the broker's background task calls `prune`.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, NamedTuple

from minibroker.protocol.errors import ErrorCode
from minibroker.share.partition import SharePartitionError
from minibroker.storage.errors import InvalidReplicationFactorError, NotEnoughReplicasError, storage_error_message
from minibroker.storage.share_state import (
    TOPIC,
    SharePartitionState,
    ShareStateKey,
    ShareStateStore,
    StateBatch,
    combine_state_batches,
)

if TYPE_CHECKING:
    from minibroker.groups.api import TopicsImage
    from minibroker.replication import Replication
    from minibroker.storage.manager import LogManager

__all__ = ["ShareCoordinator", "ShareStateError", "StateSummary"]

log = logging.getLogger(__name__)


class ShareStateError(SharePartitionError):
    """A share state request refused (Kafka's error in the response's partition result)."""


class StateSummary(NamedTuple):
    """ReadShareGroupStateSummary's answer for one share partition (-1: no state)."""

    start_offset: int
    delivery_complete_count: int
    leader_epoch: int
    state_epoch: int


class ShareCoordinator:
    def __init__(self, store: ShareStateStore, topics: TopicsImage, *, updates_per_snapshot: Callable[[], int],
                 now_ms: Callable[[], int], logs: LogManager | None = None) -> None:
        self.store = store
        self.topics = topics
        self.updates_per_snapshot = updates_per_snapshot
        self.now_ms = now_ms
        self.logs = logs
        self.writes = 0  # records written, for metrics and tests
        # The leader epoch of __share_group_state in which this coordinator loaded its state (Kafka's
        # coordinator load on becoming leader); None while it does not coordinate.
        self.loaded_epoch: int | None = None
        self._replication: Replication | None = None  # on a cluster (`replicate`)
        self.write_timeout_ms: Callable[[], int] = lambda: 5000

    @classmethod
    def open(cls, logs: LogManager, *, updates_per_snapshot: Callable[[], int], now_ms: Callable[[], int]) -> ShareCoordinator:
        store = ShareStateStore.open(logs, now_ms())
        return cls(store, logs, updates_per_snapshot=updates_per_snapshot, now_ms=now_ms, logs=logs)

    # -- coordinating (Kafka's ShareCoordinatorService.onElection / onResignation) ----------------

    def replicate(self, replication: Replication, write_timeout_ms: Callable[[], int]) -> None:
        """Append as Kafka's share coordinator runtime does, with acks=-1: refused while the ISR of
        `__share_group_state` is smaller than its min.insync.replicas, and complete (`written`)
        once the high watermark passes what was appended."""
        self._replication = replication
        self.write_timeout_ms = write_timeout_ms
        self.store.before_append = self._check_min_isr

    def _check_min_isr(self) -> None:
        plog = self.store.log
        if self._replication is None or plog is None:
            return
        isr = self._replication.isr(TOPIC, 0)
        if len(isr) < plog.config.min_insync_replicas:
            raise NotEnoughReplicasError(f"{TOPIC}-0: the ISR {list(isr)} is smaller than min.insync.replicas "
                                         f"({plog.config.min_insync_replicas})")

    async def written(self) -> ErrorCode:
        """Wait until everything appended to `__share_group_state` so far is acknowledged by its ISR
        (the high watermark passes it; at most share.coordinator.write.timeout.ms), as Kafka's share
        coordinator completes a write: NONE; COORDINATOR_NOT_AVAILABLE when it timed out or this
        broker no longer leads the topic (what Kafka's persister reports as the share
        partition's error). No wait on one broker (the high watermark is the log end)."""
        plog = self.store.log
        if self._replication is None or plog is None:
            return ErrorCode.none
        if plog.follower:
            return ErrorCode.coordinator_not_available
        end = plog.log_end_offset
        if plog.high_watermark >= end:
            return ErrorCode.none
        code = await self._replication.wait_written((TOPIC, 0), end, self.write_timeout_ms())
        if code in (ErrorCode.none, ErrorCode.not_enough_replicas_after_append):
            return ErrorCode.none  # the high watermark passed it
        return ErrorCode.coordinator_not_available

    def create_topic(self) -> None:
        """Create `__share_group_state` if no broker did yet (Kafka creates it when the first share
        coordinator is looked up); the controller places it over the brokers."""
        if self.logs is not None and self.logs.topic(TOPIC) is None:
            try:
                self.logs.create_topic(TOPIC, 1, self.store.topic_configs, self.now_ms())
            except InvalidReplicationFactorError as exc:
                # share.coordinator.state.topic.replication.factor set above the brokers registered:
                # Kafka's auto-creation fails and the persister finds no coordinator yet.
                log.warning("Auto topic creation failed for %s with error 'INVALID_REPLICATION_FACTOR': %s", TOPIC, exc)
                raise ShareStateError(ErrorCode.coordinator_not_available, "The coordinator is not available.") from None
        self._attach()

    def _attach(self) -> None:
        """This broker's replica of the topic, once it has one: a broker opened before the topic
        existed gets it when another broker created it."""
        if self.store.log is None and self.logs is not None:
            self.store.log = self.logs.log(TOPIC, 0)

    def become_leader(self, leader_epoch: int) -> None:
        """This broker leads `__share_group_state` in `leader_epoch`: every share partition's state
        is loaded from its replica (whatever it held in memory before is dropped: the replica has
        what the last coordinator wrote)."""
        self._attach()
        self.store.load()
        self.loaded_epoch = leader_epoch
        log.info("%s-0: share coordinator in leader epoch %d: %d share partition state(s) loaded", TOPIC,
                 leader_epoch, len(self.store.states))

    def resign(self) -> None:
        """Another broker leads `__share_group_state` now: this one's state is no longer served."""
        if self.loaded_epoch is not None:
            log.info("%s-0: no longer the share coordinator (leader epoch %d)", TOPIC, self.loaded_epoch)
        self.loaded_epoch = None

    def ensure_loaded(self, leader_epoch: int, leader_log_epoch: int | None) -> None:
        """Called on the leader's coordinator by every broker before a request (in process): loads
        the state for `leader_epoch` if it has not yet. COORDINATOR_LOAD_IN_PROGRESS while its
        replica does not lead in that epoch yet (Kafka's answer while a coordinator loads)."""
        if self.loaded_epoch == leader_epoch:
            return
        if leader_log_epoch != leader_epoch:
            raise ShareStateError(ErrorCode.coordinator_load_in_progress,
                                  "The coordinator is loading and hence can't process requests.")
        self.become_leader(leader_epoch)

    def _check_partition(self, key: ShareStateKey, action: str) -> None:
        if key.partition < 0:
            raise ShareStateError(ErrorCode.invalid_request, "The partition id cannot be a negative number.")
        info = self.topics.topic_by_id(key.topic_id)
        if info is None or info.num_partitions <= key.partition:
            log.error("topic or partition not found when %s: %s-%d", action, key.topic_id, key.partition)
            raise ShareStateError(ErrorCode.unknown_topic_or_partition,
                                  "This server does not host this topic-partition.")

    def _write(self, write: Callable[[], None]) -> None:
        try:
            write()
        except NotEnoughReplicasError as exc:
            log.warning("%s", exc)
            raise ShareStateError(ErrorCode.coordinator_not_available, str(exc)) from exc
        except OSError as exc:
            log.error("%s: writing share state failed: %s", TOPIC, storage_error_message(exc))
            raise ShareStateError(ErrorCode.kafka_storage_error, f"{TOPIC}: {storage_error_message(exc)}") from exc
        self.writes += 1

    # -- the five requests ------------------------------------------------------------------------

    def initialize_state(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> None:
        if state_epoch < 0:
            raise ShareStateError(ErrorCode.invalid_request, "The state epoch cannot be a negative number.")
        self._check_partition(key, "initializing")
        current = self.store.states.get(key)
        if current is not None and current.state_epoch > state_epoch:
            raise ShareStateError(ErrorCode.fenced_state_epoch,
                                  "The coordinator rejected the request because the state epoch did not match.")
        now_ms = self.now_ms()
        state = SharePartitionState(
            snapshot_epoch=0 if current is None else current.snapshot_epoch + 1, state_epoch=state_epoch,
            leader_epoch=0, start_offset=start_offset, delivery_complete_count=-1 if start_offset == -1 else 0,
            create_timestamp=now_ms, write_timestamp=now_ms)
        self._write(lambda: self.store.write_snapshot(key, state, now_ms))

    def read_state(self, key: ShareStateKey, leader_epoch: int) -> SharePartitionState:
        if leader_epoch < 0:
            raise ShareStateError(ErrorCode.invalid_request, "The leader epoch cannot be a negative number.")
        state = self.store.states.get(key)
        if state is None:
            raise ShareStateError(ErrorCode.invalid_request, "Read operation on uninitialized share partition not allowed.")
        if state.leader_epoch > leader_epoch:
            raise ShareStateError(ErrorCode.fenced_leader_epoch, "The leader epoch in the request is older than the "
                                                                 "epoch on the broker.")
        self._check_partition(key, "reading")
        if state.leader_epoch != leader_epoch:
            # Kafka records the new leader's epoch with the read (an update, or a snapshot when due).
            self._record(key, state.state_epoch, leader_epoch, state.start_offset, state.delivery_complete_count, [])
        return state

    def write_state(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    delivery_complete_count: int, batches: list[StateBatch]) -> None:
        if leader_epoch < 0 or state_epoch < 0:
            raise ShareStateError(ErrorCode.invalid_request, "The leader epoch cannot be a negative number."
                                  if leader_epoch < 0 else "The state epoch cannot be a negative number.")
        current = self.store.states.get(key)
        if current is None:
            raise ShareStateError(ErrorCode.invalid_request, "Write operation on uninitialized share partition not allowed.")
        if current.leader_epoch > leader_epoch:
            raise ShareStateError(ErrorCode.fenced_leader_epoch, "The leader epoch in the request is older than the "
                                                                 "epoch on the broker.")
        if current.state_epoch > state_epoch:
            raise ShareStateError(ErrorCode.fenced_state_epoch,
                                  "The coordinator rejected the request because the state epoch did not match.")
        self._check_partition(key, "writing")
        self._record(key, state_epoch, leader_epoch, start_offset, delivery_complete_count, batches)

    def _record(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                delivery_complete_count: int, batches: list[StateBatch]) -> None:
        """Kafka's generateShareStateRecord: an update, or a snapshot when enough updates are behind."""
        current = self.store.states[key]
        new_start = max(start_offset, current.start_offset)
        count = delivery_complete_count
        if start_offset == current.start_offset:
            count = max(delivery_complete_count, current.delivery_complete_count)
        elif start_offset < current.start_offset:
            count = current.delivery_complete_count
        now_ms = self.now_ms()
        if self.store.updates_since_snapshot.get(key, 0) >= self.updates_per_snapshot():
            snapshot = replace(current, snapshot_epoch=current.snapshot_epoch + 1, start_offset=new_start,
                               delivery_complete_count=count, leader_epoch=leader_epoch,
                               batches=combine_state_batches(current.batches, batches, new_start),
                               create_timestamp=now_ms, write_timestamp=now_ms)
            self._write(lambda: self.store.write_snapshot(key, snapshot, now_ms))
        else:
            merged = tuple(combine_state_batches((), batches, new_start))
            self._write(lambda: self.store.write_update(key, leader_epoch, new_start, count, merged, now_ms))

    def read_summary(self, key: ShareStateKey) -> StateSummary:
        state = self.store.states.get(key)
        if state is None:
            return StateSummary(-1, 0, 0, -1)
        return StateSummary(state.start_offset, state.delivery_complete_count, state.leader_epoch, state.state_epoch)

    def delete_state(self, key: ShareStateKey) -> None:
        if key not in self.store.states:
            return
        now_ms = self.now_ms()
        self._write(lambda: self.store.delete(key, now_ms))

    def has_state(self, key: ShareStateKey) -> bool:
        return key in self.store.states

    def keys_of_group(self, group_id: str) -> list[ShareStateKey]:
        return sorted((k for k in self.store.states if k.group_id == group_id), key=lambda k: (str(k.topic_id), k.partition))

    # -- housekeeping --------------------------------------------------------------------------------

    def prune(self) -> int:
        """Delete the records no state needs any more (Kafka's share-group state topic prune job);
        returns the new log start offset, or -1 when nothing was deleted."""
        offset = self.store.last_redundant_offset()
        if offset is None or self.store.log is None:
            return -1
        try:
            self.store.log.delete_records_before(offset)
        except OSError as exc:
            log.error("%s: pruning below offset %d failed: %s", TOPIC, offset, storage_error_message(exc))
            return -1
        log.debug("%s: records below offset %d pruned", TOPIC, offset)
        return offset

    def forget_topic(self, topic_id) -> int:
        """A deleted topic's share state goes with it (Kafka's maybeCleanupShareState)."""
        keys = [k for k in self.store.states if k.topic_id == topic_id]
        for key in keys:
            try:
                self.delete_state(key)
            except ShareStateError as exc:
                log.error("share state of %s not deleted with its topic: %s", key, exc.message)
        return len(keys)


class RoutedShareCoordinator:
    """The share coordinator as a broker of a cluster reaches it: the one of the broker that leads
    `__share_group_state` (Kafka's share coordinator is the leader of the key's state partition;
    minibroker keeps one partition), called in process, as Kafka's persister sends its
    Read/Write/Initialize/DeleteShareGroupState requests to the coordinator it finds.

    `locate(create)` returns that coordinator, loaded for the partition's current leader epoch, or
    raises ShareStateError: COORDINATOR_NOT_AVAILABLE while the partition has no leader that is up
    (a killed leader not yet fenced), COORDINATOR_LOAD_IN_PROGRESS while the new leader has not
    taken over. A write that would be the first share state of the cluster creates the topic first
    (`create`), so the coordinator that writes it is its leader, wherever the controller put it.
    Reads before the topic exists are answered by this broker's empty state."""

    WRITES = frozenset({"initialize_state", "write_state", "delete_state", "forget_topic"})
    READS = frozenset({"read_state", "read_summary", "has_state", "keys_of_group"})

    def __init__(self, local: ShareCoordinator, locate: Callable[[bool], ShareCoordinator]) -> None:
        self.local = local
        self._locate = locate

    async def written(self) -> ErrorCode:
        """ShareCoordinator.written of the coordinator: what a request wrote is replicated."""
        try:
            coordinator = self._locate(False)
        except ShareStateError as exc:
            return exc.error_code
        return await coordinator.written()

    def __getattr__(self, name: str):  # noqa: ANN204 - delegates every ShareCoordinator method
        if name == "prune":
            # Only the coordinator prunes its topic; the other brokers' timers have nothing to do.
            return lambda: self.local.prune() if self.local.loaded_epoch is not None else -1
        if name in self.WRITES or name in self.READS:
            create = name in self.WRITES

            def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
                return getattr(self._locate(create), name)(*args, **kwargs)
            return call
        return getattr(self.local, name)
