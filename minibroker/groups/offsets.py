"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, retention and deleted topics, for
groups of any type (Kafka's `OffsetMetadataManager`).

A commit is validated by its group (`Group.validate_offset_commit`: a member of the current
generation, or generation -1 and no member id while the group is Empty, a "simple" group of
assign() consumers) and stored in `OffsetsStore` (the `__consumer_offsets` log). A commit with
generation -1 to a group that does not exist creates it, as a classic group without a protocol
(Kafka's getOrMaybeCreateClassicGroup). A KIP-848 consumer group validates a commit by member
epoch (STALE_MEMBER_EPOCH), and an OffsetFetch that names a member likewise. Offsets of a group
Empty for `offsets.retention.minutes` expire (KIP-211), as do those of a simple group that long
after their commit, and those of a consumer group that long after their commit unless it
subscribes to their topic, on the check interval; a group left Empty without offsets is then
dropped. OffsetDelete removes offsets of topics the group's consumers do not subscribe to
(`Group.is_subscribed_to_topic`). Not done: expiring offsets of topics a Stable classic group no
longer subscribes to.

TxnOffsetCommit (KIP-98, KIP-447) is validated like OffsetCommit (v3+ carries the generation and
member id; before, generation -1 and no member, which any group takes) and its offsets are stored
as pending for the producer id (`OffsetsStore.commit_transactional`); an epoch older than the one the
offsets partition's producer state holds (its fencing's marker) is INVALID_PRODUCER_EPOCH, checked by
the append as Kafka's log checks it (the group coordinator itself does not); the transaction's marker makes
them committed or drops them (`complete_transaction`, called once the marker is written). OffsetFetch
with require_stable asks `has_pending` and answers UNSTABLE_OFFSET_COMMIT meanwhile. Deleting a
topic, a group or an offset drops the pending offsets of it too (a tombstone does, as in Kafka), so a
later commit of the transaction does not bring them back; expiry spares an offset with one pending.

It sees groups only through the api.Group interface, whatever their type.
Pure: no trio, no clock (`now_ms` is wall-clock milliseconds, the timestamps Kafka stores).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.errors import FencedEpochError, storage_error_message
from minibroker.storage.offsets_store import OffsetAndMetadata

if TYPE_CHECKING:
    from minibroker.groups.api import Group
    from minibroker.groups.runtime import ShardRuntime

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class OffsetMetadataManager:
    def __init__(self, shard: ShardRuntime) -> None:
        self.shard = shard
        self.config = shard.config
        self.store = shard.store

    def commit_offsets(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
        retention_ms: int = -1,
        version: int = 8,
    ) -> dict[TopicPartition, ErrorCode]:
        """Store (offset, leader_epoch, metadata) per partition; returns an error per partition.
        The caller has already answered partitions of unknown topics."""
        error = self._validate_commit(now_ms, group_id, generation_id, member_id, group_instance_id, version)
        if error:
            return {tp: error for tp in offsets}
        expire_ms = now_ms + retention_ms if retention_ms >= 0 else -1
        errors, accepted = self._accept(offsets, now_ms, expire_ms)
        try:
            self.store.commit(group_id, accepted, now_ms)
        except OSError as exc:
            # Kafka's GroupMetadataManager maps a failed append to the offsets topic
            # (KAFKA_STORAGE_ERROR) to NOT_COORDINATOR: the client finds the coordinator
            # again and retries the commit. Nothing was stored.
            log.error("group %s: committing offsets failed: %s", group_id, storage_error_message(exc))
            return {tp: ErrorCode.not_coordinator if code == ErrorCode.none else code for tp, code in errors.items()}
        return errors

    def commit_transactional_offsets(
        self,
        now_ms: int,
        *,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: the offsets go pending for `producer_id`; an error per partition."""
        if not group_id:
            return {tp: ErrorCode.invalid_group_id for tp in offsets}
        group: Group | None = self.shard.groups.get(group_id)
        if group is None:
            if generation_id >= 0 or member_id:
                # Kafka's validateTransactionalOffsetCommit: only a simple committer may create it.
                return {tp: ErrorCode.illegal_generation for tp in offsets}
            group = self.shard.create_simple_group(group_id, now_ms)
        if not member_id and generation_id < 0:
            # A request without member id and generation (TxnOffsetCommit before v3, KIP-447's
            # fields absent: aiokafka's send_offsets_to_transaction) is taken whatever the group's
            # members, as Kafka's validateTransactionalOffsetCommit takes it from old clients.
            error = ErrorCode.none
        else:
            error = group.validate_offset_commit(generation_id, member_id, group_instance_id)
        if error == ErrorCode.rebalance_in_progress:
            error = ErrorCode.none  # Kafka's transactional commit is taken while the group syncs
        if error:
            return {tp: error for tp in offsets}
        errors, accepted = self._accept(offsets, now_ms)
        try:
            self.store.commit_transactional(producer_id, producer_epoch, group_id, accepted, now_ms)
        except FencedEpochError as exc:
            # The log's producer-state check (with transaction.partition.verification.enable=false
            # the only one, as in Kafka): a fenced producer's offsets are refused, never pending.
            log.info("group %s: transactional offset commit refused: %s", group_id, exc)
            return {tp: exc.error_code if code == ErrorCode.none else code for tp, code in errors.items()}
        except OSError as exc:
            log.error("group %s: a transactional offset commit failed: %s", group_id, storage_error_message(exc))
            return {tp: ErrorCode.not_coordinator if code == ErrorCode.none else code for tp, code in errors.items()}
        return errors

    def _accept(self, offsets: dict[TopicPartition, tuple[int, int, str | None]], now_ms: int,
                expire_ms: int = -1) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetAndMetadata]]:
        """(an error per partition, the offsets to store): metadata over offset.metadata.max.bytes
        is OFFSET_METADATA_TOO_LARGE for its partition."""
        errors: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            metadata = metadata or ""
            if len(metadata) > self.config.offset_metadata_max_bytes:
                errors[tp] = ErrorCode.offset_metadata_too_large
            else:
                accepted[tp] = OffsetAndMetadata(offset, leader_epoch, metadata, now_ms, expire_ms)
                errors[tp] = ErrorCode.none
        return errors, accepted

    def complete_transaction(self, producer_id: int, commit: bool) -> int:
        """The transaction's marker is written to the offsets partition: its offsets are committed,
        or dropped. Returns how many there were."""
        return self.store.complete_transaction(producer_id, commit)

    def has_pending(self, group_id: str, partitions: list[TopicPartition] | None) -> bool:
        return self.store.has_pending(group_id, partitions)

    def _validate_commit(self, now_ms: int, group_id: str, generation_id: int, member_id: str,
                         instance_id: str | None, version: int) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group: Group | None = self.shard.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return ErrorCode.group_id_not_found if version >= 9 else ErrorCode.illegal_generation
            # A "simple" group: offsets only, no group management.
            group = self.shard.create_simple_group(group_id, now_ms)
        return group.validate_offset_commit(generation_id, member_id, instance_id, version)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Whether an OffsetFetch naming a member (v9+) may read the group's offsets: a consumer
        group's member must give its current epoch (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID); an
        unknown group has no offsets to hide."""
        group: Group | None = self.shard.groups.get(group_id)
        if group is None or group.is_dead():
            return ErrorCode.none
        return group.validate_offset_fetch(member_id, member_epoch)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                      ) -> list[tuple[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets of `partitions` (None: every partition the group has offsets for)."""
        group_offsets = self.store.offsets.get(group_id, {}) if group_id in self.shard.groups else {}
        if partitions is None:
            return sorted(group_offsets.items())
        return [(tp, group_offsets.get(tp)) for tp in partitions]

    def forget_topic(self, topic: str, now_ms: int) -> int:
        """A deleted topic's offsets go with it, committed and pending in open transactions (Kafka's
        onPartitionsDeleted: a tombstone for each, which drops the pending ones too)."""
        removed = 0
        groups = set(self.store.offsets) | {group for by_group in self.store.pending.values() for group in by_group}
        for group_id in sorted(groups):
            offsets = set(self.store.offsets.get(group_id, {})) | self.store.pending_partitions(group_id)
            gone = sorted(tp for tp in offsets if tp[0] == topic)
            if gone:
                try:
                    self.store.remove_offsets(group_id, gone, now_ms)
                except OSError as exc:
                    log.error("group %s: removing the offsets of deleted topic %s failed: %s",
                              group_id, topic, storage_error_message(exc))
                    continue
                removed += len(gone)
        return removed

    def expire_offsets(self, now_ms: int) -> int:
        """KIP-211 retention; drops groups left Empty without offsets. Returns offsets expired."""
        retention = self.config.offsets_retention_ms
        expired_total = 0
        groups: list[tuple[str, Group]] = list(self.shard.groups.items())
        for group_id, group in groups:
            offsets = self.store.offsets.get(group_id, {})
            base = group.offset_expiration_base()
            if base is None:
                continue  # members may still need them
            # Offsets of topics the group subscribes to stay while it does (Kafka's
            # cleanupExpiredOffsets), whatever their age; so does an offset an open transaction
            # holds a pending one of, and the group with it (expiring would drop the pending one).
            pending = self.store.pending_partitions(group_id)
            expired = [
                tp for tp, om in offsets.items()
                if not group.is_subscribed_to_topic(tp[0]) and tp not in pending
                and now_ms >= (om.expire_timestamp_ms if om.expire_timestamp_ms >= 0 else base(om) + retention)
            ]
            if expired:
                self.store.remove_offsets(group_id, expired, now_ms)
                expired_total += len(expired)
                log.info("group %s: %d committed offset(s) expired", group_id, len(expired))
            if group.is_empty() and group_id not in self.store.offsets and not pending:
                log.info("group %s: empty without offsets; removing it", group_id)
                self.shard.remove_group(group_id, now_ms)
        return expired_total

    def delete_offsets(self, now_ms: int, group_id: str, topics: dict[str, list[int]]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (Kafka's OffsetMetadataManager.deleteOffsets): (group error, error per partition).

        The group must exist (GROUP_ID_NOT_FOUND) and, unless Empty, be a consumer group
        (NON_EMPTY_GROUP otherwise). A topic the members subscribe to keeps its offsets: each of its
        partitions answers GROUP_SUBSCRIBED_TO_TOPIC. Elsewhere an offset is removed (a tombstone in
        __consumer_offsets) and a partition without one is answered NONE all the same."""
        if not group_id:
            return ErrorCode.invalid_group_id, {}
        group: Group | None = self.shard.groups.get(group_id)
        if group is None or group.is_dead():
            return ErrorCode.group_id_not_found, {}
        error = group.validate_offset_delete()
        if error:
            return error, {}
        # A tombstone where an offset is committed or pending (Kafka's deleteOffsets).
        committed = set(self.store.offsets.get(group_id, {})) | self.store.pending_partitions(group_id)
        errors: dict[TopicPartition, ErrorCode] = {}
        removed = []
        for topic, partitions in topics.items():
            subscribed = group.is_subscribed_to_topic(topic)
            for partition in partitions:
                errors[(topic, partition)] = ErrorCode.group_subscribed_to_topic if subscribed else ErrorCode.none
                if not subscribed and (topic, partition) in committed:
                    removed.append((topic, partition))
        if removed:
            try:
                self.store.remove_offsets(group_id, removed, now_ms)
            except OSError as exc:
                # As a failed commit: Kafka maps the storage error to NOT_COORDINATOR, top-level.
                log.error("group %s: deleting offsets failed: %s", group_id, storage_error_message(exc))
                return ErrorCode.not_coordinator, {}
            log.info("group %s: deleted %d committed offset(s)", group_id, len(removed))
        return ErrorCode.none, errors
