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

from minibroker.protocol.errors import ErrorCode
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
    RECOVERING,
    TOPIC_RESOURCE,
    PartitionChangeRecord,
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


@dataclass(frozen=True)
class InternalTopic:
    """How Kafka creates one of its internal topics (__consumer_offsets, __transaction_state,
    __share_group_state): its own replication factor (offsets.topic.replication.factor, ...) and
    min.insync.replicas (transaction.state.log.min.isr, ...). A setting left at its default
    (`capped`) is capped so that a small cluster works: the factor at the brokers registered, the
    min.insync.replicas at the factor (a difference from Kafka, whose creation fails with
    INVALID_REPLICATION_FACTOR until enough brokers register: what a setting given explicitly does
    here too)."""

    replication_factor: int
    factor_capped: bool = True
    min_insync_replicas: int | None = None  # None: the broker's min.insync.replicas
    min_isr_capped: bool = True

    def resolve(self, registered: int) -> tuple[int, dict[str, str]]:
        """(the replication factor, the topic's own configs) on a cluster of `registered` brokers."""
        factor = min(self.replication_factor, max(registered, 1)) if self.factor_capped else self.replication_factor
        if self.min_insync_replicas is None:
            return factor, {}
        min_isr = min(self.min_insync_replicas, factor) if self.min_isr_capped else self.min_insync_replicas
        return factor, {"min.insync.replicas": str(min_isr)}


class Controller:
    """See the module docstring. `Controller.open` opens the metadata log and builds its image."""

    def __init__(self, metadata: MetadataLog, node_id: int, rng: random.Random | None = None) -> None:
        self.metadata = metadata
        self.node_id = node_id  # the controller's node (the quorum's one voter)
        self.rng = rng if rng is not None else random.Random()
        self.hosts: dict[int, ReplicaHost] = {}
        self._publishers: list[Publisher] = []
        self.default_replication_factor = 1
        self.unclean_leader_election = False  # the brokers' unclean.leader.election.enable
        # Kafka's internal topics, created with their own settings rather than the defaults.
        self.internal_topics: dict[str, InternalTopic] = {}

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
        """A broker starts: registered (or its rack changed), or back from fenced, and elected
        leader of the partitions left without one whose ISR holds it (Kafka's
        handleBrokerUnfenced). Nothing is written when the image already has it so (a broker
        restarting as it was)."""
        current = self.image.cluster.brokers.get(broker_id)
        records: list[MetadataRecord] = []
        if current is None or current.rack != rack:
            records.append(RegisterBrokerRecord(broker_id, self.metadata.end_offset, rack, False))
        elif current.fenced:
            records.append(UnfenceBrokerRecord(broker_id, current.epoch))
        if not records:
            return
        self.commit(records + self._leaderless_elections(alive_too={broker_id}), now_ms)

    def fence_broker(self, broker_id: int, now_ms: int) -> None:
        """A broker stopped (its session timed out, or its controlled shutdown ended): fenced, out
        of every ISR it is in (kept as the last member of an ISR it alone is in, as Kafka keeps it),
        and its leaderships moved to another ISR member that is up, or to none (leader -1)
        (Kafka's handleBrokerFenced)."""
        current = self.image.cluster.brokers.get(broker_id)
        if current is None or current.fenced:
            return
        changes = self._leave(broker_id, leave_isr=True)
        self.commit([FenceBrokerRecord(broker_id, current.epoch), *changes], now_ms)

    def controlled_shutdown(self, broker_id: int, now_ms: int) -> None:
        """A broker stopping cleanly: its leaderships move first (to another ISR member that is up),
        then it is fenced (Kafka's controlled shutdown), so clients find the new leaders at once."""
        changes = self._leave(broker_id, leave_isr=False)
        if changes:
            self.commit(changes, now_ms)
        self.fence_broker(broker_id, now_ms)

    def _leave(self, broker_id: int, leave_isr: bool) -> list[MetadataRecord]:
        """The partition changes that take `broker_id`'s leaderships (and, with `leave_isr`, its ISR
        memberships) away."""
        changes: list[MetadataRecord] = []
        for topic in self.image.topics.by_name.values():
            for index, reg in topic.partitions.items():
                if broker_id != reg.leader and not (leave_isr and broker_id in reg.isr):
                    continue
                isr = reg.isr
                if leave_isr and broker_id in isr and len(isr) > 1:
                    isr = tuple(b for b in isr if b != broker_id)
                leader: int | None = None
                if reg.leader == broker_id:
                    leader = self._choose_leader(reg.replicas, isr, exclude={broker_id})
                    if leader == NO_LEADER and not leave_isr:
                        continue  # no one to hand it to: it stays until the broker is fenced
                if leader is None and isr == reg.isr:
                    continue
                changes.append(PartitionChangeRecord(topic.topic_id, index, isr=None if isr == reg.isr else isr,
                                                     leader=leader))
        return changes

    def _is_alive(self, broker_id: int) -> bool:
        registration = self.image.cluster.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    def _choose_leader(self, replicas: Sequence[int], isr: Sequence[int], exclude: set[int] = frozenset(),  # type: ignore[assignment]
                       alive_too: set[int] = frozenset()) -> int:  # type: ignore[assignment]
        """The first replica, in the replica order (the preferred first), that is in the ISR and up."""
        for broker_id in replicas:
            if broker_id in isr and broker_id not in exclude and (self._is_alive(broker_id) or broker_id in alive_too):
                return broker_id
        return NO_LEADER

    def _leaderless_elections(self, alive_too: set[int] = frozenset()) -> list[MetadataRecord]:  # type: ignore[assignment]
        """Leaders for the partitions that have none: an ISR member that is up, or, where the
        topic allows unclean elections, any replica that is up (its ISR is then that replica, its
        log recovering: KIP-704)."""
        changes: list[MetadataRecord] = []
        for topic in self.image.topics.by_name.values():
            for index, reg in topic.partitions.items():
                if reg.leader != NO_LEADER and self._is_alive(reg.leader):
                    continue
                leader = self._choose_leader(reg.replicas, reg.isr, alive_too=alive_too)
                if leader != NO_LEADER:
                    changes.append(PartitionChangeRecord(topic.topic_id, index, leader=leader))
                elif self._unclean_allowed(topic.name):
                    leader = self._choose_leader(reg.replicas, reg.replicas, alive_too=alive_too)
                    if leader != NO_LEADER:
                        changes.append(PartitionChangeRecord(topic.topic_id, index, leader=leader, isr=(leader,),
                                                             leader_recovery_state=RECOVERING))
        return changes

    def _unclean_allowed(self, topic: str) -> bool:
        value = self.image.topic_configs(topic).get("unclean.leader.election.enable")
        if value is None:
            return self.unclean_leader_election
        return value.strip().lower() == "true"

    # -- partitions: ISR changes, elections, moves, reassignments ------------------------------------

    def _registration(self, topic: str, partition: int) -> tuple[TopicImage, PartitionRegistration]:
        image = self.image.topics.by_name.get(topic)
        if image is None or partition not in image.partitions:
            raise UnknownTopicError(f"No such partition as {topic}-{partition}")
        return image, image.partitions[partition]

    def alter_partition(self, topic: str, partition: int, leader_id: int, leader_epoch: int, isr: Sequence[int],
                        now_ms: int) -> ErrorCode:
        """A leader's new ISR (Kafka's AlterPartition): refused when the leader or its epoch is not
        the current one (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH), or an added member is not up
        (INELIGIBLE_REPLICA). A reassignment whose new replicas are all in the ISR completes."""
        image, reg = self._registration(topic, partition)
        if reg.leader != leader_id:
            return ErrorCode.not_leader_or_follower
        if reg.leader_epoch != leader_epoch:
            return ErrorCode.fenced_leader_epoch
        isr = tuple(b for b in reg.replicas if b in isr)
        if leader_id not in isr or any(b not in reg.isr and not self._is_alive(b) for b in isr):
            return ErrorCode.ineligible_replica
        if isr == reg.isr:
            return ErrorCode.none
        records: list[MetadataRecord] = [PartitionChangeRecord(image.topic_id, partition, isr=isr)]
        merged = reg.merge(records[0])  # type: ignore[arg-type]
        records += self._complete_reassignment(image.topic_id, partition, merged)
        self.commit(records, now_ms)
        return ErrorCode.none

    def elect_leader(self, topic: str, partition: int, unclean: bool, now_ms: int) -> tuple[ErrorCode, str | None]:
        """ElectLeaders for one partition (Kafka's ReplicationControlManager.electLeader): the
        preferred replica when it is up and in the ISR (preferred), else
        PREFERRED_LEADER_NOT_AVAILABLE; a leader for a partition without one, from the ISR or any
        replica up (unclean), else ELIGIBLE_LEADERS_NOT_AVAILABLE; ELECTION_NOT_NEEDED when the
        partition already has the leader asked for."""
        image, reg = self._registration(topic, partition)
        if not unclean:
            preferred = reg.preferred_leader
            if reg.leader == preferred:
                return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
            if preferred not in reg.isr or not self._is_alive(preferred):
                return ErrorCode.preferred_leader_not_available, (
                    f"Failed to elect leader for partition {topic}-{partition} under strategy PREFERRED")
            self.commit([PartitionChangeRecord(image.topic_id, partition, leader=preferred)], now_ms)
            return ErrorCode.none, None
        if reg.leader != NO_LEADER and self._is_alive(reg.leader):
            return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
        leader = self._choose_leader(reg.replicas, reg.isr)
        change = PartitionChangeRecord(image.topic_id, partition, leader=leader)
        if leader == NO_LEADER:
            leader = self._choose_leader(reg.replicas, reg.replicas)
            change = PartitionChangeRecord(image.topic_id, partition, leader=leader, isr=(leader,),
                                           leader_recovery_state=RECOVERING)
        if leader == NO_LEADER:
            return ErrorCode.eligible_leaders_not_available, (
                f"Failed to elect leader for partition {topic}-{partition} under strategy UNCLEAN")
        self.commit([change], now_ms)
        return ErrorCode.none, None

    def move_leader(self, topic: str, partition: int, broker_id: int, now_ms: int) -> None:
        """Make `broker_id` the partition's leader (a test's control): it must be an ISR member that
        is up (anything else would lose acknowledged records). ValueError says why not; the same
        leader again is a new leader epoch, as a leader given always is."""
        image, reg = self._registration(topic, partition)
        if broker_id not in reg.replicas:
            raise ValueError(f"broker {broker_id} is not a replica of {topic}-{partition} (replicas {list(reg.replicas)})")
        if broker_id not in reg.isr:
            raise ValueError(f"broker {broker_id} is not in the ISR of {topic}-{partition} (ISR {list(reg.isr)})")
        if not self._is_alive(broker_id):
            raise ValueError(f"broker {broker_id} is stopped")
        self.commit([PartitionChangeRecord(image.topic_id, partition, leader=broker_id)], now_ms)

    def shuffle_leaders(self, now_ms: int, rng: random.Random | None = None,
                        topics: Iterable[str] | None = None) -> int:
        """A new leader for every partition with more than one ISR member up: another of them,
        chosen at random (kfake's ShufflePartitionLeaders). Returns how many moved."""
        rng = rng if rng is not None else self.rng
        names = set(topics) if topics is not None else None
        changes: list[MetadataRecord] = []
        for topic in self.image.topics.by_name.values():
            if names is not None and topic.name not in names:
                continue
            for index, reg in topic.partitions.items():
                candidates = [b for b in reg.isr if b != reg.leader and self._is_alive(b)]
                if candidates:
                    changes.append(PartitionChangeRecord(topic.topic_id, index, leader=rng.choice(candidates)))
        self.commit(changes, now_ms)
        return len(changes)

    def preferred_elections(self, now_ms: int) -> int:
        """Kafka's auto leader rebalance: every partition whose preferred replica is up, in the ISR
        and not leading gets it back as its leader. Returns how many moved."""
        changes: list[MetadataRecord] = []
        for topic in self.image.topics.by_name.values():
            for index, reg in topic.partitions.items():
                preferred = reg.preferred_leader
                if reg.leader != preferred and preferred in reg.isr and self._is_alive(preferred) \
                        and not reg.reassignment_in_progress:
                    changes.append(PartitionChangeRecord(topic.topic_id, index, leader=preferred))
        self.commit(changes, now_ms)
        return len(changes)

    def reassign(self, topic: str, partition: int, target: Sequence[int] | None, now_ms: int) -> None:
        """AlterPartitionReassignments for one partition (checked by the caller): the target
        replicas join (adding), the others stay until the new ones are in the ISR, then leave
        (removing), as Kafka's reassignment runs; None cancels one in progress (back to the
        replicas before it)."""
        image, reg = self._registration(topic, partition)
        if target is None:
            original = tuple(b for b in reg.replicas if b not in reg.adding_replicas)
            isr = tuple(b for b in reg.isr if b in original) or reg.isr
            leader = reg.leader if reg.leader in original else self._choose_leader(original, isr)
            self.commit([PartitionChangeRecord(image.topic_id, partition, replicas=original, isr=isr,
                                               adding_replicas=(), removing_replicas=(),
                                               leader=None if leader == reg.leader else leader)], now_ms)
            return
        target = tuple(target)
        current = tuple(b for b in reg.replicas if b not in reg.adding_replicas)
        adding = tuple(b for b in target if b not in current)
        removing = tuple(b for b in current if b not in target)
        replicas = target + removing
        change = PartitionChangeRecord(image.topic_id, partition, replicas=replicas, adding_replicas=adding,
                                       removing_replicas=removing)
        records: list[MetadataRecord] = [change]
        records += self._complete_reassignment(image.topic_id, partition, reg.merge(change))
        self.commit(records, now_ms)

    def _complete_reassignment(self, topic_id: uuid.UUID, partition: int,
                               reg: PartitionRegistration) -> list[MetadataRecord]:
        """The change that completes a reassignment whose target replicas are all in the ISR: the
        replicas become the target, the ISR loses the removed ones, and a removed leader hands over
        to the first target replica in the ISR."""
        target = tuple(b for b in reg.replicas if b not in reg.removing_replicas)
        if not reg.reassignment_in_progress or any(b not in reg.isr for b in target):
            return []
        isr = tuple(b for b in reg.isr if b in target)
        leader = reg.leader if reg.leader in target else self._choose_leader(target, isr)
        return [PartitionChangeRecord(topic_id, partition, replicas=target, isr=isr, adding_replicas=(),
                                      removing_replicas=(), leader=None if leader == reg.leader else leader)]

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
        internal = self.internal_topics.get(name)
        if internal is not None and replication_factor in (None, -1) and not assignments:
            replication_factor, internal_configs = internal.resolve(len(self.image.cluster.brokers))
            overrides = {**internal_configs, **overrides}
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

