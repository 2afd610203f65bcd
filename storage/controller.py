"""The cluster's controller: every change to cluster-wide state is decided here, written to the
metadata log, applied to the image, and then published to the brokers (Kafka's QuorumController and
its ReplicationControlManager, ConfigurationControlManager, ClientQuotaControlManager,
ScramControlManager, ProducerIdControlManager and ClusterControlManager, in one object).

A change is made in three steps, so that a crash at any point leaves nothing a later start could
mistake for lost data:

1. validated against the image (Kafka's checks, in Kafka's order, raising the ApiError a request is
   answered with);
2. prepared on the brokers that host it (`ReplicaHost`): a topic's new partition directories are
   created (a directory that already holds records of an unknown topic refuses it: StrayDataError),
   a deleted topic's directories renamed to their `-delete` names;
3. committed: the records are written to the metadata log as one batch, durable before `commit`
   returns (the commit point), and applied to the image; a failed write undoes the preparation.
   Then every subscriber is told the records (`subscribe`): the brokers create, delete and
   reconfigure their logs from them, the quota managers, SCRAM users and config views follow.

The image is the one source every broker reads (minibroker.storage.metadata_image): topics and ids,
partition assignments with leader, ISR and leader epoch, configs of every resource, client quotas,
SCRAM credentials, the next producer-id block, the registered brokers.

Replicas are placed by Kafka's striped placer (minibroker.storage.placement), over the registered
brokers and their racks. A new partition's ISR is its unfenced replicas and its leader the first of
them, in leader epoch 0.

No clock (callers pass `now_ms`), no trio.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from minibroker.storage.config import InvalidTopicError, LogConfig, has_collision, validate_topic_name
from minibroker.storage.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    TopicExistsError,
    UnknownTopicError,
)
from minibroker.storage.file_cache import FileCache
from minibroker.storage.metadata_image import (
    NO_LEADER,
    TOPIC_RESOURCE,
    PartitionRegistration,
    ConfigRecord,
    FenceBrokerRecord,
    ImageSection,
    MetadataImage,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicImage,
    TopicRecord,
    UnfenceBrokerRecord,
)
from minibroker.storage.metadata_log import METADATA_DIR, MetadataLog
from minibroker.storage.placement import PlacementError, UsableBroker, place_replicas
from minibroker.storage.topic_file import MAX_PARTITIONS, new_topic_id

__all__ = ["Controller", "LegacyImport", "ReplicaHost", "PRODUCER_ID_BLOCK_SIZE"]

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_ID = 2**63 - 1

Publisher = Callable[[Sequence[MetadataRecord], int], None]  # (the records committed, now_ms)


class ProducerIdsExhaustedError(Exception):
    """No producer id is left (never in practice)."""


class ReplicaHost(Protocol):
    """A broker's side of a change (minibroker.storage.manager.LogManager): what it must prepare
    before the change is committed, and undo when the commit fails."""

    node_id: int

    def prepare_partitions(self, name: str, topic_id: uuid.UUID, partitions: Sequence[int],
                           overrides: Mapping[str, str], now_ms: int) -> None: ...

    def abort_partitions(self, name: str, partitions: Sequence[int]) -> None: ...

    def prepare_delete(self, name: str) -> Any: ...

    def abort_delete(self, token: Any) -> None: ...


@dataclass
class LegacyImport:
    """What a data directory written before the metadata log holds (minibroker.metadata_migration):
    its records, what they came from (for the log line), and `cleanup`, which removes the files once
    the records are committed."""

    records: list[MetadataRecord]
    sources: list[str]
    cleanup: Callable[[], None]


class Controller:
    """See the module docstring. `Controller.open` opens the metadata log and builds its image."""

    def __init__(self, metadata: MetadataLog, node_id: int, rng: random.Random | None = None) -> None:
        self.metadata = metadata
        self.node_id = node_id  # the controller's node (the quorum's one voter)
        self.rng = rng if rng is not None else random.Random()
        self.hosts: dict[int, ReplicaHost] = {}
        self._publishers: list[Publisher] = []
        self.default_replication_factor = 1

    @classmethod
    def open(cls, metadata_dir: Path, node_id: int, now_ms: int, *, extra_sections: Sequence[ImageSection] = (),
             legacy: Callable[[MetadataImage], LegacyImport | None] | None = None,
             files: FileCache | None = None) -> Controller:
        """The controller of the metadata log in `metadata_dir` (the directory that holds
        `__cluster_metadata-0`). `legacy`: reads what a data directory of an earlier version keeps
        in files of its own, imported once, into a new metadata log."""
        metadata = MetadataLog.open(Path(metadata_dir) / METADATA_DIR, now_ms, leader_id=node_id,
                                    extra_sections=extra_sections, files=files)
        controller = cls(metadata, node_id)
        if legacy is not None:
            try:
                controller._import_legacy(legacy, now_ms)
            except BaseException:
                metadata.close(clean=False)
                raise
        return controller

    def _import_legacy(self, legacy: Callable[[MetadataImage], LegacyImport | None], now_ms: int) -> None:
        fresh = self.metadata.end_offset == 0 and self.metadata.snapshot_offset == 0
        found = legacy(self.image)
        if found is None:
            return
        if not fresh:
            # Imported by an earlier start that stopped before the files were removed.
            log.warning("removing %s, imported into the metadata log by an earlier start", ", ".join(found.sources))
        else:
            if found.records:
                self.metadata.append(found.records, now_ms)
                self.metadata.snapshot(now_ms)
            log.info("imported %s into the metadata log (%d record(s)); the files are removed",
                     ", ".join(found.sources), len(found.records))
        found.cleanup()

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    def close(self, clean: bool = True, now_ms: int | None = None) -> None:
        self.metadata.close(clean, now_ms)

    # -- publishing ---------------------------------------------------------------------------------

    def subscribe(self, publisher: Publisher) -> None:
        """Call `publisher(records, now_ms)` after every commit."""
        self._publishers.append(publisher)

    def unsubscribe(self, publisher: Publisher) -> None:
        if publisher in self._publishers:
            self._publishers.remove(publisher)

    def attach(self, host: ReplicaHost) -> None:
        """A broker's log manager, prepared before changes to the partitions it hosts."""
        self.hosts[host.node_id] = host

    def detach(self, node_id: int) -> None:
        self.hosts.pop(node_id, None)

    def commit(self, records: Sequence[MetadataRecord], now_ms: int) -> int:
        """Write `records` (one batch, durable on return), apply them, tell the subscribers.
        Returns the offset of the first. An OSError changes nothing."""
        if not records:
            return self.metadata.end_offset
        offset = self.metadata.append(records, now_ms)
        for publisher in list(self._publishers):
            try:
                publisher(records, now_ms)
            except Exception:  # one subscriber's bug must not keep the others from the change
                log.exception("a metadata subscriber failed on %d record(s) at offset %d", len(records), offset)
        return offset

    # -- brokers ------------------------------------------------------------------------------------

    def register_broker(self, broker_id: int, rack: str | None, now_ms: int) -> None:
        """A broker starts: registered (or its rack changed), or back from fenced. Nothing is written
        when the image already has it so (a broker restarting as it was)."""
        current = self.image.cluster.brokers.get(broker_id)
        if current is None or current.rack != rack:
            self.commit([RegisterBrokerRecord(broker_id, self.metadata.end_offset, rack, False)], now_ms)
        elif current.fenced:
            self.commit([UnfenceBrokerRecord(broker_id, current.epoch)], now_ms)

    def fence_broker(self, broker_id: int, now_ms: int, extra: Sequence[MetadataRecord] = ()) -> None:
        current = self.image.cluster.brokers.get(broker_id)
        if current is not None and not current.fenced:
            self.commit([FenceBrokerRecord(broker_id, current.epoch), *extra], now_ms)

    def usable_brokers(self) -> list[UsableBroker]:
        return [UsableBroker(b.broker_id, b.rack, b.fenced) for b in self.image.cluster.brokers.values()]

    def registered_brokers(self) -> list[int]:
        return sorted(self.image.cluster.brokers)

    def unfenced_brokers(self) -> list[int]:
        return self.image.cluster.unfenced()

    # -- topics -------------------------------------------------------------------------------------

    def check_new_topic(self, name: str, num_partitions: Any, overrides: Mapping[str, str], log_config: LogConfig,
                        topic_id: uuid.UUID | None = None, replication_factor: int | None = None,
                        assignments: Mapping[int, Sequence[int]] | None = None) -> tuple[LogConfig, list[list[int]]]:
        """Kafka's checks of a new topic, in its order (ReplicationControlManager.createTopic): the
        name, that it is free and collides with no other; the manual assignments, or the
        replication factor, the partition count and the placement; the configs; the id. Returns
        the effective LogConfig and each partition's replicas."""
        validate_topic_name(name)
        topics = self.image.topics
        if name in topics.by_name:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        colliding = sorted(t for t in topics.by_name if has_collision(t, name))
        if colliding:
            raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {colliding[0]}")
        if assignments:
            replicas = self.check_assignments(assignments)
            if sorted(assignments) != list(range(len(assignments))):
                raise InvalidReplicaAssignmentError("partitions must be numbered 0..n-1 in replica assignments")
        else:
            if replication_factor is not None and (replication_factor == 0 or replication_factor < -1):
                raise InvalidReplicationFactorError(
                    "Replication factor must be larger than 0, or -1 to use the default value.")
            if not isinstance(num_partitions, int) or num_partitions < 1:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            if num_partitions > MAX_PARTITIONS:
                raise InvalidPartitionsError(
                    f"Number of partitions {num_partitions} is above the limit of {MAX_PARTITIONS}.")
            replicas = self.assign(name, num_partitions, replication_factor)
        config = log_config.with_topic_overrides(overrides)
        if topic_id is not None and (topic_id in topics.by_id):
            raise TopicExistsError(f"Topic id {topic_id} is already in use.")
        return config, replicas

    def assign(self, name: str, partitions: int, replication_factor: int | None,
               existing: Sequence[Sequence[int]] = ()) -> list[list[int]]:
        """Replicas for `partitions` new partitions, placed over the registered brokers."""
        factor = self.default_replication_factor if replication_factor in (None, -1) else replication_factor
        try:
            return place_replicas(self.usable_brokers(), partitions, factor, self.rng, existing)
        except PlacementError as exc:
            raise InvalidReplicationFactorError(f"Unable to replicate the partition {factor} time(s): {exc}") from None

    def check_assignments(self, assignments: Mapping[int, Sequence[int]]) -> list[list[int]]:
        """Manual replica assignments (CreateTopics' and CreatePartitions'), checked as Kafka's
        ReplicationControlManager.validateManualPartitionAssignment; in partition order."""
        registered = self.image.cluster.brokers
        result = []
        for index in sorted(assignments):
            replicas = list(assignments[index])
            if not replicas:
                raise InvalidReplicaAssignmentError(
                    "The manual partition assignment includes an empty replica list.")
            seen: set[int] = set()
            for broker_id in replicas:
                if broker_id not in registered:
                    raise InvalidReplicaAssignmentError(
                        f"The manual partition assignment includes broker {broker_id}, but no such broker is registered.")
                if broker_id in seen:
                    raise InvalidReplicaAssignmentError(
                        f"The manual partition assignment includes the broker {broker_id} more than once.")
                seen.add(broker_id)
            if all(registered[b].fenced for b in replicas):
                raise InvalidReplicaAssignmentError(
                    f"All brokers specified in the manual partition assignment for partition {index} are fenced "
                    "or in controlled shutdown.")
            result.append(replicas)
        return result

    def _partition_record(self, topic_id: uuid.UUID, index: int, replicas: Sequence[int]) -> PartitionRecord:
        brokers = self.image.cluster.brokers
        isr = tuple(b for b in replicas if b in brokers and not brokers[b].fenced)
        return PartitionRecord(topic_id, index, tuple(replicas), isr, isr[0] if isr else NO_LEADER)

    def create_topic(self, name: str, num_partitions: int, overrides: Mapping[str, str] | None, now_ms: int, *,
                     log_config: LogConfig, replication_factor: int | None = None,
                     assignments: Mapping[int, Sequence[int]] | None = None, validate_only: bool = False,
                     topic_id: uuid.UUID | None = None) -> tuple[TopicImage, LogConfig]:
        """Create a topic (or only check that it could be): its TopicImage and effective config.
        Raises the ApiErrors of `check_new_topic`, `assign` and `check_assignments`."""
        overrides = dict(overrides or {})
        config, replicas = self.check_new_topic(name, num_partitions, overrides, log_config, topic_id,
                                                replication_factor, assignments)
        num_partitions = len(replicas)
        topic_id = topic_id or new_topic_id()
        image = TopicImage(name, topic_id)
        records: list[MetadataRecord] = [TopicRecord(name, topic_id)]
        partition_records = [self._partition_record(topic_id, index, r) for index, r in enumerate(replicas)]
        records += partition_records
        records += [ConfigRecord(TOPIC_RESOURCE, name, key, value) for key, value in sorted(overrides.items())]
        if validate_only:
            for partition_record in partition_records:
                image.partitions[partition_record.partition_id] = _registration(partition_record)
            return image, config
        self._prepare_and_commit(name, topic_id, replicas, range(num_partitions), overrides, records, now_ms)
        return self.image.topics.by_name[name], config

    def _prepare_and_commit(self, name: str, topic_id: uuid.UUID, replicas: Sequence[Sequence[int]],
                            indexes: Iterable[int], overrides: Mapping[str, str], records: Sequence[MetadataRecord],
                            now_ms: int) -> None:
        """Create the partition directories on the hosts that are up, then commit; undo on failure."""
        by_host: dict[int, list[int]] = {}
        for index, partition_replicas in zip(indexes, replicas):
            for broker_id in partition_replicas:
                by_host.setdefault(broker_id, []).append(index)
        prepared: list[tuple[ReplicaHost, list[int]]] = []
        try:
            for broker_id, partitions in sorted(by_host.items()):
                host = self.hosts.get(broker_id)
                if host is not None:
                    host.prepare_partitions(name, topic_id, partitions, overrides, now_ms)
                    prepared.append((host, partitions))
            self.commit(records, now_ms)
        except BaseException:
            for host, partitions in prepared:
                try:
                    host.abort_partitions(name, partitions)
                except OSError:
                    log.exception("could not remove the prepared partitions of topic %s", name)
            raise

    def delete_topic(self, name: str, now_ms: int) -> TopicImage:
        topic = self.image.topics.by_name.get(name)
        if topic is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        prepared: list[tuple[ReplicaHost, Any]] = []
        try:
            for host in list(self.hosts.values()):
                prepared.append((host, host.prepare_delete(name)))
            records: list[MetadataRecord] = [RemoveTopicRecord(topic.topic_id)]
            records += [ConfigRecord(TOPIC_RESOURCE, name, key, None) for key in sorted(self.image.topic_configs(name))]
            self.commit(records, now_ms)
        except BaseException:
            for host, token in reversed(prepared):
                host.abort_delete(token)
            raise
        return topic

    def create_partitions(self, name: str, count: int, now_ms: int, *, validate_only: bool = False,
                          assignments: Sequence[Sequence[int]] | None = None) -> TopicImage:
        """CreatePartitions: grow a topic to `count` partitions (never shrink it), with Kafka's
        messages (ReplicationControlManager.createPartitions)."""
        topic = self.image.topics.by_name.get(name)
        if topic is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        current = topic.num_partitions
        if count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
        if count < current:
            raise InvalidPartitionsError(
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.")
        if count > MAX_PARTITIONS:
            raise InvalidPartitionsError(f"Number of partitions {count} is above the limit of {MAX_PARTITIONS}.")
        existing = [topic.partitions[i].replicas for i in sorted(topic.partitions)]
        if assignments is not None:
            if len(assignments) != count - current:
                raise InvalidReplicaAssignmentError(
                    f"Attempted to add {count - current} additional partition(s), but only {len(assignments)} "
                    "assignment(s) were specified.")
            replicas = self.check_assignments(dict(enumerate(assignments)))
        else:
            factor = len(existing[0]) if existing else None
            replicas = self.assign(name, count - current, factor, existing)
        records: list[MetadataRecord] = [
            self._partition_record(topic.topic_id, current + i, r) for i, r in enumerate(replicas)]
        if validate_only:
            grown = TopicImage(topic.name, topic.topic_id, dict(topic.partitions))
            for record in records:
                assert isinstance(record, PartitionRecord)
                grown.partitions[record.partition_id] = _registration(record)
            return grown
        self._prepare_and_commit(name, topic.topic_id, replicas, range(current, count), self.image.topic_configs(name),
                                 records, now_ms)
        return self.image.topics.by_name[name]

    # -- configs -------------------------------------------------------------------------------------

    def replace_configs(self, resource_type: int, resource_name: str, configs: Mapping[str, str], now_ms: int) -> None:
        """Make `configs` the whole set of a resource's configs: records for what changed."""
        current = self.image.configs.get(resource_type, resource_name)
        records: list[MetadataRecord] = [ConfigRecord(resource_type, resource_name, key, None)
                                         for key in sorted(current) if key not in configs]
        records += [ConfigRecord(resource_type, resource_name, key, value)
                    for key, value in sorted(configs.items()) if current.get(key) != value]
        self.commit(records, now_ms)

    def alter_topic_configs(self, name: str, overrides: Mapping[str, str], now_ms: int, *,
                            log_config: LogConfig) -> LogConfig:
        """Replace a topic's overrides (validated first: nothing changes on a ConfigError)."""
        if name not in self.image.topics.by_name:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        config = log_config.with_topic_overrides(overrides)
        self.replace_configs(TOPIC_RESOURCE, name, overrides, now_ms)
        return config

    # -- producer ids ---------------------------------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int, now_ms: int, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> int:
        """A new block of `block_size` producer ids for a broker: its first id. The block is in the
        metadata log before any of its ids is handed out (Kafka's ProducerIdControlManager)."""
        start = self.image.producer_ids.next_producer_id
        end = start + block_size
        if end > MAX_PRODUCER_ID:
            raise ProducerIdsExhaustedError("producer ids are exhausted")
        broker = self.image.cluster.brokers.get(broker_id)
        self.commit([ProducerIdsRecord(broker_id, broker.epoch if broker else -1, end)], now_ms)
        return start


def _registration(record: PartitionRecord) -> PartitionRegistration:
    return PartitionRegistration(record.replicas, record.isr, record.leader, record.leader_epoch,
                                 record.partition_epoch, record.removing_replicas, record.adding_replicas,
                                 record.leader_recovery_state)

