"""`LogManager`: one broker's partition logs, for the partitions the cluster's metadata places on it.

The topics themselves (names, ids, partition counts, replica assignments, configs) are the
controller's (minibroker.storage.controller), kept in the metadata log; the log manager keeps a log
for each partition the metadata gives this broker a replica of, and follows every change the
controller publishes: a topic created or grown gets its partitions' logs, a topic deleted loses them,
a topic's configs changed reach its logs. The topic methods here (`create_topic`, `delete_topic`,
`alter_topic_config`, `add_partitions`) ask the controller, which prepares the change here first.

Layout of the data directory:

* `__cluster_metadata-0/`: the metadata log, when this broker is the controller's node
  (minibroker.storage.metadata_log).
* `<topic>-<partition>/`: one `PartitionLog` directory per partition hosted here (see
  `minibroker.storage.log`), with `partition.metadata` naming its topic id.
* `<topic>-<partition>.<topic id hex>-delete/`: a partition of a topic being deleted (Kafka renames
  deleted partitions the same way before removing them).
* Anything else (meta.properties, other components' files) is left alone.

Create: the controller checks the topic, this broker creates the partition directories it hosts
(`prepare_partitions`), then the controller commits the topic to the metadata log (the commit point).
Delete: the partition directories are renamed to their `-delete` names (`prepare_delete`), the
controller commits the deletion, then the directories are removed. A crash during a creation leaves
partition directories without records whose topic id the metadata log never committed: they are
reused. A crash during a deletion leaves `-delete` directories, or directories whose topic id the
metadata log saw deleted: the next open removes them.

Damage (a damaged file stops the broker or is recovered from what is on disk, never guessed around
and deleted): a partition directory that holds records but belongs to no topic of the metadata log
(and to no topic it saw deleted) is kept, logged, and never deleted: creating that topic again is
refused with `StrayDataError` (KAFKA_STORAGE_ERROR) naming the directory, so an auto-creating
Metadata request cannot wipe it.

A log manager opened on its own (`LogManager.open` without a controller: tools and storage tests) is
a one-broker cluster of its own: it opens the metadata log in its data directory.

Topic name rules and the '.'/'_' collision check follow Kafka (`Topic.validate`, `Topic.hasCollision`,
ReplicationControlManager: a name that collides with an existing topic's is INVALID_TOPIC_EXCEPTION);
the controller applies them. Which topics are internal (Kafka's set, `storage.config.INTERNAL_TOPICS`)
matters to the handlers only: here every topic is stored alike.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import os
import re
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from minibroker.storage.config import (
    ConfigError,
    InvalidTopicError,
    LogConfig,
)
from minibroker.storage.controller import Controller
from minibroker.storage.errors import (
    DamagedFileError,
    InvalidPartitionsError,
    StrayDataError,
    TopicExistsError,
    UnknownTopicError,
)
from minibroker.storage.file_cache import FileCache
from minibroker.storage.files import fsync_directory, sync_filesystem
from minibroker.storage.log import PartitionLog
from minibroker.storage.log_dir import read_partition_metadata, write_partition_metadata
from minibroker.storage.metadata_image import (
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicImage,
    TopicRecord,
)
from minibroker.storage.metadata_log import METADATA_DIR
from minibroker.storage.segment import LOG_SUFFIX
from minibroker.storage.topic_file import MAX_PARTITIONS, TopicInfo

__all__ = [
    "ConfigError",
    "InvalidPartitionsError",
    "InvalidTopicError",
    "LogManager",
    "MAX_PARTITIONS",
    "StrayDataError",
    "TopicExistsError",
    "TopicInfo",
    "UnknownTopicError",
]

logger = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_DELETED_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<topic_id>[0-9a-f]{32})-delete$")
DELETE_SUFFIX = "-delete"
STANDALONE_NODE_ID = 1  # a log manager opened without a controller (the default node.id)
DEFAULT_CACHE_CAPACITY = 256  # open segment files when the owner gives no cache (tools, tests)
PARALLEL_RECOVERY_BYTES = 1 << 20  # a last segment this big is recovered on a worker thread


@dataclass
class _Topic:
    info: TopicInfo
    logs: list[PartitionLog | None] = field(default_factory=list)  # None: not hosted here


@dataclass(frozen=True)
class Recovery:
    """What `LogManager.open` found: partitions registered, and those recovered before the open
    returned (not closed cleanly, or changed since their last clean load)."""

    partitions: int = 0
    recovered: int = 0
    threads: int = 1
    # (topic, partition) of each log recovered: the shell rebuilds the producer state of the large
    # ones before it serves (minibroker.producers.ProducerStates.rebuild_recovered).
    recovered_partitions: tuple[tuple[str, int], ...] = ()


def _in_context(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`fn` for a worker thread, run in a copy of the caller's context (the shell's log lines name
    their broker from a context variable), a copy per call."""
    context = contextvars.copy_context()
    return lambda arg: context.copy().run(fn, arg)


class LogManager:
    def __init__(self, data_dir: Path, broker_config: LogConfig, files: FileCache | None = None,
                 threads: int = 1, *, controller: Controller, node_id: int) -> None:
        self.data_dir = data_dir
        self.broker_config = broker_config
        # The open segment files of every log (log.max.open.files); bounded, shared by all partitions.
        self.files = files if files is not None else FileCache(DEFAULT_CACHE_CAPACITY)
        self.threads = max(1, threads)  # num.recovery.threads.per.data.dir
        self.recovery = Recovery()
        self.controller = controller
        self.node_id = node_id
        self._owns_controller = False
        self._topics: dict[str, _Topic] = {}
        self._by_id: dict[uuid.UUID, _Topic] = {}
        # Logs created for a change the controller has not committed yet (prepare_partitions), and
        # the renamed directories of a deletion it has not (prepare_delete).
        self._prepared: dict[tuple[str, int], PartitionLog] = {}
        self._deleting: dict[uuid.UUID, list[Path]] = {}
        # Told the topic's name after a topic is created, grown or deleted (`subscribe`): the shell
        # tells the quota callback (KIP-257).
        self._topic_listeners: list[Callable[[str], None]] = []
        # Told (topic, partition, log or None) when a partition comes to be hosted here or stops.
        self._replica_listeners: list[Callable[[str, int, PartitionLog | None], None]] = []
        self._closed = False

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call `listener(topic)` after each topic is created, grown or deleted."""
        self._topic_listeners.append(listener)

    def _topics_changed(self, name: str) -> None:
        for listener in self._topic_listeners:
            listener(name)

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(cls, data_dir: Path, broker_config: LogConfig, now_ms: int, *,
             files: FileCache | None = None, threads: int = 1, controller: Controller | None = None,
             node_id: int | None = None) -> LogManager:
        """Open the logs of every partition the metadata places on this broker (`node_id`), in the
        data directory. Without a `controller`, the data directory's own metadata log is opened (a
        cluster of one, node STANDALONE_NODE_ID unless given: the broker's default node.id, so that
        a broker opens what a tool wrote). Raises DamagedFileError (nothing changed on disk but
        temporary files) when a file cannot be used.

        Partitions are registered from the metadata and loaded at their first use, so start-up does
        not grow with idle partitions (docs/storage.md); those whose clean-shutdown marker is missing (a
        crash since they were last changed) are recovered here, before the broker serves anything,
        on `threads` threads (Kafka's num.recovery.threads.per.data.dir)."""
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        owns = controller is None
        if controller is None:
            node_id = STANDALONE_NODE_ID if node_id is None else node_id
            controller = Controller.open(data_dir, node_id, now_ms, files=files)
            controller.register_broker(node_id, None, now_ms)
        manager = cls(data_dir, broker_config, files, threads, controller=controller,
                      node_id=node_id if node_id is not None else controller.node_id)
        manager._owns_controller = owns
        try:
            manager._open(now_ms)
        except BaseException:
            manager.close(clean=False)
            raise
        return manager

    def _open(self, now_ms: int) -> None:
        data_dir = self.data_dir
        image = self.controller.image
        present = set(os.listdir(data_dir))
        self._check_metadata_is_not_lost(present)
        self._finish_deletions(present)
        present = set(os.listdir(data_dir))
        for name in sorted(image.topics.by_name):
            topic = image.topics.by_name[name]
            self._add_topic(topic, now_ms, present=present)
        deleted_ids = image.topics.deleted_ids
        for name in sorted(present):
            match = _PARTITION_DIR.match(name)
            owner = self._topics.get(match["topic"]) if match else None
            if match and owner is not None and int(match["partition"]) < owner.info.num_partitions \
                    and owner.logs[int(match["partition"])] is not None:
                continue
            directory = data_dir / name
            if name == METADATA_DIR or not directory.is_dir() or not match:
                if directory.is_dir() and name != METADATA_DIR:
                    logger.warning("ignoring stray directory %s in the data directory", directory)
                continue
            topic_id = read_partition_metadata(directory)
            if topic_id is not None and (topic_id in deleted_ids or (
                    owner is not None and owner.info.topic_id == topic_id)):
                # A deleted topic's partition (the deletion was cut short), or one this broker no
                # longer hosts: its data is the topic's other replicas' or gone with the topic.
                logger.info("removing %s: a partition of %s", directory,
                            "a deleted topic" if topic_id in deleted_ids else "a topic no longer hosted here")
                shutil.rmtree(directory, ignore_errors=True)
            elif _holds_records(directory):
                logger.error("%s holds records, but no topic of the metadata log accounts for it: kept as it is "
                             "(move the directory away to drop it)", directory)
            else:
                logger.warning("ignoring stray directory %s in the data directory", directory)
        self._recover()
        self.controller.attach(self)
        self.controller.subscribe(self._on_metadata)

    def _check_metadata_is_not_lost(self, present: set[str]) -> None:
        """A metadata log made by this start, beside partition directories that name their topic
        ids (so the metadata log that had them is gone): every topic would be unknown. Refused,
        naming the metadata log, before anything is touched."""
        metadata = self.controller.metadata
        if not metadata.created or self.controller.image.topics.by_name or metadata.directory.parent != self.data_dir:
            return
        named = sorted(name for name in present if _PARTITION_DIR.match(name) and name != METADATA_DIR
                       and (self.data_dir / name).is_dir() and read_partition_metadata(self.data_dir / name))
        if named:
            raise DamagedFileError(
                metadata.directory, f"missing, but {len(named)} partition director{'y' if len(named) == 1 else 'ies'} "
                f"of its topics are here ({', '.join(named[:3])}{', ...' if len(named) > 3 else ''})",
                "restore the metadata log directory from a backup; until then the broker does not start "
                "(it would take every topic for unknown)")

    def _recover(self) -> None:
        """Load the logs that need recovery. Threads help where reading and checksumming dominate
        (os.pread and crc32c release the GIL): logs whose last segment holds at least
        PARALLEL_RECOVERY_BYTES. A small log's recovery is mostly Python, where threads only
        contend for the GIL (10,000 one-batch partitions: 0.7 s on one thread, 1.1 s on two), so
        those are recovered on this thread, after the large ones."""
        entries = list(self.logs())
        unclean_entries = [entry for entry in entries if entry[2].needs_recovery]
        unclean = [log for _, _, log in unclean_entries]
        large = []
        if self.threads > 1 and len(unclean) > 1:
            large = [log for log in unclean if log.tail_bytes_on_disk() >= PARALLEL_RECOVERY_BYTES]
        threads = min(self.threads, len(large))
        if threads > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="log-recovery") as pool:
                for _ in pool.map(_in_context(PartitionLog.load), large):
                    pass
        for log in unclean:
            log.load()  # (a no-op for those loaded above)
        self.recovery = Recovery(len(entries), len(unclean), max(threads, 1),
                                 tuple((name, partition) for name, partition, _ in unclean_entries))

    def _finish_deletions(self, present: set[str]) -> None:
        """Complete the deletions a crash cut short: every `-delete` directory goes."""
        for name in sorted(present):
            if _DELETED_DIR.match(name) and (self.data_dir / name).is_dir():
                logger.info("finishing the deletion of %s, cut short by a crash", self.data_dir / name)
                shutil.rmtree(self.data_dir / name, ignore_errors=True)

    def _hosts(self, replicas: Sequence[int], adding: Sequence[int] = ()) -> bool:
        return self.node_id in replicas or self.node_id in adding

    def _add_topic(self, topic: TopicImage, now_ms: int, present: set[str] | None = None) -> _Topic:
        """Register a topic of the image: its config, and a log for each partition hosted here."""
        overrides = self.controller.image.topic_configs(topic.name)
        try:
            config = self.broker_config.with_topic_overrides(overrides)
        except ConfigError as exc:
            raise ConfigError(exc.key, f"{exc.reason} (the stored config of topic {topic.name}; change the "
                              "broker's setting back, or alter the topic's config on another broker)",
                              topic=True) from None
        info = TopicInfo(topic.name, topic.topic_id, topic.num_partitions, overrides, config)
        entry = _Topic(info)
        self._topics[topic.name] = entry
        self._by_id[topic.topic_id] = entry
        for index in range(topic.num_partitions):
            entry.logs.append(self._host(entry, index, now_ms, present))
        return entry

    def _host(self, entry: _Topic, index: int, now_ms: int, present: set[str] | None) -> PartitionLog | None:
        """The log of partition `index` of a topic, when this broker hosts it: the one prepared for
        it, or the directory's (registered, read at its first use)."""
        info = entry.info
        registration = self.controller.image.topics.by_id[info.topic_id].partitions[index]
        if not self._hosts(registration.replicas, registration.adding_replicas):
            return None
        prepared = self._prepared.pop((info.name, index), None)
        if prepared is not None:
            prepared.update_config(info.config)
            prepared.leader_epoch = registration.leader_epoch if registration.leader == self.node_id else None
            self._replica_added(info.name, index, prepared)
            return prepared
        directory = self._partition_dir(info.name, index)
        exists = directory.name in present if present is not None else directory.exists()
        if not exists:
            if present is not None and len(registration.replicas) == 1:
                logger.warning("%s is missing: partition %d of topic %s starts empty", directory, index, info.name)
            directory.mkdir(parents=True, exist_ok=True)
            write_partition_metadata(directory, info.topic_id)
        elif read_partition_metadata(directory) != info.topic_id:
            write_partition_metadata(directory, info.topic_id)  # a directory of an earlier version: adopted
        log = PartitionLog.register(directory, info.config, now_ms, files=self.files)
        log.leader_epoch = registration.leader_epoch if registration.leader == self.node_id else None
        self._replica_added(info.name, index, log)
        return log

    def _replica_added(self, name: str, index: int, log: PartitionLog | None) -> None:
        for listener in self._replica_listeners:
            listener(name, index, log)

    def subscribe_replicas(self, listener: Callable[[str, int, PartitionLog | None], None]) -> None:
        """Call `listener(topic, partition, log)` when a partition comes to be hosted here, and
        `listener(topic, partition, None)` when it stops being."""
        self._replica_listeners.append(listener)

    def _leftover_directories(self, name: str, partitions: Iterable[int]) -> list[Path]:
        """The directories already there for these partitions of `name` (a creation or addition cut
        short by a crash); StrayDataError when one holds records, which must not be created over.
        One left of a topic the metadata log saw deleted is that topic's, and goes."""
        deleted = self.controller.image.topics.deleted_ids
        existing = []
        for directory in (self._partition_dir(name, p) for p in partitions):
            if not directory.exists():
                continue
            if _holds_records(directory) and read_partition_metadata(directory) not in deleted:
                raise StrayDataError(directory, name)
            existing.append(directory)
        return existing

    def _partition_dir(self, name: str, partition: int) -> Path:
        return self.data_dir / f"{name}-{partition}"

    # -- the controller's side of a change (minibroker.storage.controller.ReplicaHost) --------------------

    def prepare_partitions(self, name: str, topic_id: uuid.UUID, partitions: Sequence[int],
                           overrides: Mapping[str, str], now_ms: int) -> None:
        """Create the logs of new partitions hosted here, before the controller commits them."""
        config = self.broker_config.with_topic_overrides(overrides)
        existing = self._leftover_directories(name, partitions)
        created: list[tuple[int, PartitionLog]] = []
        try:
            for directory in existing:  # what a creation cut short by a crash left: no records
                logger.warning("reusing %s, which holds no records", directory)
                shutil.rmtree(directory)
            for partition in partitions:
                directory = self._partition_dir(name, partition)
                log = PartitionLog.create(directory, config, now_ms, files=self.files)
                created.append((partition, log))
                write_partition_metadata(directory, topic_id)
            fsync_directory(self.data_dir)  # the partition directories exist before the commit
        except BaseException:
            for _, log in created:
                log.delete()
            raise
        for partition, log in created:
            self._prepared[(name, partition)] = log

    def abort_partitions(self, name: str, partitions: Sequence[int]) -> None:
        for partition in partitions:
            log = self._prepared.pop((name, partition), None)
            if log is not None:
                log.delete()

    def prepare_delete(self, name: str) -> Any:
        """Rename a topic's partition directories to their `-delete` names (an OSError leaves them
        as they were); the token undoes it (`abort_delete`)."""
        topic = self._topics.get(name)
        if topic is None:
            return None
        renamed = self._rename_for_deletion(topic)
        self._deleting[topic.info.topic_id] = [target for _, target in renamed]
        return topic.info.topic_id, renamed

    def abort_delete(self, token: Any) -> None:
        if token is None:
            return
        topic_id, renamed = token
        self._deleting.pop(topic_id, None)
        for directory, target in reversed(renamed):
            try:
                os.rename(target, directory)
            except OSError:
                logger.exception("could not move %s back to %s", target, directory)

    def _rename_for_deletion(self, topic: _Topic) -> list[tuple[Path, Path]]:
        """Rename the topic's partition directories to their `-delete` names (all or, on an
        OSError, none: the renames done are undone before it is raised)."""
        info = topic.info
        renamed: list[tuple[Path, Path]] = []
        try:
            for partition, log in enumerate(topic.logs):
                if log is None:
                    continue
                directory = self._partition_dir(info.name, partition)
                target = self.data_dir / f"{directory.name}.{info.topic_id.hex}{DELETE_SUFFIX}"
                try:
                    os.rename(directory, target)
                except FileNotFoundError:
                    continue
                renamed.append((directory, target))
            if renamed:
                fsync_directory(self.data_dir)
        except OSError:
            for directory, target in reversed(renamed):
                try:
                    os.rename(target, directory)
                except OSError:
                    logger.exception("could not move %s back to %s", target, directory)
            raise
        return renamed

    def _on_metadata(self, records: Sequence[MetadataRecord], now_ms: int) -> None:
        """A change committed: make the logs here what the image says (module docstring)."""
        topic_ids: dict[uuid.UUID, None] = {}
        config_names: dict[str, None] = {}
        for record in records:
            if isinstance(record, (TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord)):
                topic_ids[record.topic_id] = None
            elif isinstance(record, ConfigRecord) and record.resource_type == TOPIC_RESOURCE:
                config_names[record.resource_name] = None
        changed: list[str] = []
        image = self.controller.image
        for topic_id in topic_ids:
            topic = image.topics.by_id.get(topic_id)
            entry = self._by_id.get(topic_id)
            if topic is None:
                if entry is not None:
                    self._remove_topic(entry)
                    changed.append(entry.info.name)
                continue
            if entry is None:
                self._add_topic(topic, now_ms)
                changed.append(topic.name)
                continue
            grown = topic.num_partitions > entry.info.num_partitions
            self._update_partitions(entry, topic, now_ms)
            if grown:
                changed.append(topic.name)
        for name in config_names:
            entry = self._topics.get(name)
            if entry is not None and name not in changed:
                self._update_config(entry)
        for name in changed:
            self._topics_changed(name)

    def _update_partitions(self, entry: _Topic, topic: TopicImage, now_ms: int) -> None:
        """A topic grown, or partitions that came here or left (a reassignment)."""
        if topic.num_partitions != entry.info.num_partitions:
            entry.info = dataclasses.replace(entry.info, num_partitions=topic.num_partitions)
        for index in range(topic.num_partitions):
            registration = topic.partitions[index]
            hosted = self._hosts(registration.replicas, registration.adding_replicas)
            if index >= len(entry.logs):
                entry.logs.append(self._host(entry, index, now_ms, None))
            elif hosted and entry.logs[index] is None:
                entry.logs[index] = self._host(entry, index, now_ms, None)
            elif hosted and entry.logs[index] is not None:
                log = entry.logs[index]
                assert log is not None
                log.leader_epoch = registration.leader_epoch if registration.leader == self.node_id else None
            elif not hosted and entry.logs[index] is not None:
                log = entry.logs[index]
                entry.logs[index] = None
                assert log is not None
                self._replica_added(entry.info.name, index, None)
                log.close(clean=False)
                shutil.rmtree(log.directory, ignore_errors=True)

    def _update_config(self, entry: _Topic) -> None:
        overrides = self.controller.image.topic_configs(entry.info.name)
        try:
            config = self.broker_config.with_topic_overrides(overrides)
        except ConfigError as exc:  # checked by the controller against its broker's config
            logger.error("topic %s: its new config does not hold on this broker (%s); keeping the one before",
                         entry.info.name, exc)
            return
        entry.info = dataclasses.replace(entry.info, overrides=overrides, config=config)
        for log in entry.logs:
            if log is not None:
                log.update_config(config)

    def _remove_topic(self, entry: _Topic) -> None:
        info = entry.info
        renamed = self._deleting.pop(info.topic_id, None)
        if renamed is None:  # not prepared here (this broker was not there): rename now
            try:
                renamed = [target for _, target in self._rename_for_deletion(entry)]
            except OSError as exc:
                logger.error("topic %s: could not rename its directories for deletion (%s); the next start "
                             "removes them", info.name, exc)
                renamed = []
        for index, log in enumerate(entry.logs):
            if log is not None:
                self._replica_added(info.name, index, None)
                log.close(clean=False)
        del self._topics[info.name]
        del self._by_id[info.topic_id]
        for directory in renamed:
            shutil.rmtree(directory, ignore_errors=True)

    # -- topics -----------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        overrides: Mapping[str, str] | None,
        now_ms: int,
        validate_only: bool = False,
        topic_id: uuid.UUID | None = None,
        *,
        replication_factor: int | None = None,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic through the controller (or only check that it could be created). Raises
        InvalidTopicError, TopicExistsError, InvalidPartitionsError or ConfigError, checked in Kafka's
        order, and InvalidReplicationFactorError / InvalidReplicaAssignmentError. `topic_id` gives
        the new topic that id instead of a random one; one already in use is refused with
        TopicExistsError."""
        topic, config = self.controller.create_topic(
            name, num_partitions, overrides, now_ms, log_config=self.broker_config,
            replication_factor=replication_factor, assignments=assignments, validate_only=validate_only,
            topic_id=topic_id)
        if validate_only:
            return TopicInfo(name, topic.topic_id, topic.num_partitions, dict(overrides or {}), config)
        return self._topics[name].info

    def delete_topic(self, name: str, now_ms: int = 0) -> TopicInfo:
        """Delete a topic: its partition directories are renamed to `-delete` names first, so a
        crash at any point leaves nothing a later open could mistake for a lost topic's data."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        info = topic.info
        self.controller.delete_topic(name, now_ms)
        return info

    def alter_topic_config(self, name: str, overrides: Mapping[str, str], now_ms: int = 0) -> TopicInfo:
        """Replace a topic's overrides (AlterConfigs semantics; incremental callers pass the merged
        result). Validates first: nothing changes on a ConfigError."""
        if name not in self._topics:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        self.controller.alter_topic_configs(name, overrides, now_ms, log_config=self.broker_config)
        return self._topics[name].info

    def add_partitions(self, name: str, count: int, now_ms: int, validate_only: bool = False,
                       assignments: Sequence[Sequence[int]] | None = None) -> TopicInfo:
        """CreatePartitions: grow a topic to `count` partitions (never shrink it). Raises
        UnknownTopicError, or InvalidPartitionsError with Kafka's messages (ReplicationControlManager).

        The new partition directories are created first and the metadata log's records, the commit
        point, are written last: a crash in between leaves directories without records, which the
        next addition reuses. A directory there that holds records is StrayDataError, as at creation."""
        topic = self.controller.create_partitions(name, count, now_ms, validate_only=validate_only,
                                                  assignments=assignments)
        if validate_only:
            return dataclasses.replace(self._topics[name].info, num_partitions=topic.num_partitions)
        return self._topics[name].info

    def check_broker_config(self, broker_config: LogConfig) -> None:
        """Raise ConfigError (naming the topic) if some topic's overrides would be invalid over these
        broker-level defaults (min.compaction.lag.ms above a new max.compaction.lag.ms, say)."""
        for name, topic in self._topics.items():
            try:
                broker_config.with_topic_overrides(topic.info.overrides)
            except ConfigError as exc:
                raise ConfigError(exc.key, f"{exc.reason} (for topic {name})", topic=True) from None

    def set_broker_config(self, broker_config: LogConfig) -> None:
        """New broker-level log defaults (a dynamic broker config changed, after check_broker_config):
        every topic's effective config is derived afresh from them and its own overrides, and applied
        to its open logs."""
        self.broker_config = broker_config
        for topic in self._topics.values():
            config = broker_config.with_topic_overrides(topic.info.overrides)
            if config != topic.info.config:
                topic.info = dataclasses.replace(topic.info, config=config)
                for log in topic.logs:
                    if log is not None:
                        log.update_config(config)

    def topic(self, name: str) -> TopicInfo | None:
        topic = self._topics.get(name)
        return topic.info if topic else None

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        topic = self._by_id.get(topic_id)
        return topic.info if topic else None

    def resolve(self, name: str | None, topic_id: uuid.UUID | None = None) -> TopicInfo | None:
        """The topic a request names: by `name`, or by `topic_id` when it gives no name (the
        versions that name topics by id); None when there is no such topic."""
        if name is not None:
            return self.topic(name)
        return self.topic_by_id(topic_id) if topic_id is not None else None

    def topics(self) -> list[TopicInfo]:
        return [self._topics[name].info for name in sorted(self._topics)]

    def log(self, topic: str, partition: int) -> PartitionLog | None:
        """The log of a partition hosted here; None for an unknown partition or one hosted elsewhere."""
        entry = self._topics.get(topic)
        if entry is None or not 0 <= partition < len(entry.logs):
            return None
        return entry.logs[partition]

    def logs(self) -> Iterable[tuple[str, int, PartitionLog]]:
        """Every log hosted here."""
        for name in sorted(self._topics):
            for partition, log in enumerate(self._topics[name].logs):
                if log is not None:
                    yield name, partition, log

    # -- housekeeping -----------------------------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> int:
        """Retention over every log; a log whose files cannot be changed is logged and skipped."""
        return self._over_logs(lambda log: log.enforce_retention(now_ms), "retention")

    def maybe_flush(self, now_ms: int) -> int:
        return self._over_logs(lambda log: int(log.maybe_flush(now_ms)), "flush")

    def _over_logs(self, action, what: str) -> int:
        """Sum `action(log)` over every log; a storage error is logged (that log is tried again the
        next time) and does not stop the others."""
        total = 0
        for name, partition, log in self.logs():
            try:
                total += action(log)
            except OSError as exc:
                logger.error("%s-%d: %s failed, tried again next time: %s", name, partition, what, exc)
        return total

    def flush(self) -> None:
        for _, _, log in self.logs():
            log.flush()

    def close(self, clean: bool = True) -> None:
        """Close every log. A clean close writes each changed log's index files, makes everything
        durable with one sync of the file system (`sync_filesystem`), then writes the markers;
        where that sync is not available each log fsyncs its own files, on `threads` threads (as
        Kafka uses its recovery threads at shutdown: fsync waits release the GIL; without fsyncs
        the work is small and threads would only contend for it). A log that fails to close is
        logged and left without its marker (the next start recovers it); the others still close.
        Then every segment file still open is closed."""
        logs = [(name, partition, log) for name, partition, log in self.logs() if log.loaded]
        self._topics.clear()
        self._by_id.clear()
        for log in self._prepared.values():
            logs.append(("(prepared)", 0, log))
        self._prepared.clear()
        if not self._closed:
            self._closed = True
            self.controller.unsubscribe(self._on_metadata)
            if self.controller.hosts.get(self.node_id) is self:
                self.controller.detach(self.node_id)

        def failed(name: str, partition: int, exc: OSError) -> None:
            logger.error("%s-%d: could not close cleanly, it is recovered at the next start: %s",
                         name, partition, exc)

        def close_one(entry) -> None:
            try:
                entry[2].close(clean)
            except OSError as exc:
                failed(entry[0], entry[1], exc)

        try:
            changed = []
            if clean:
                for entry in logs:
                    try:
                        if entry[2].prepare_clean_close():
                            changed.append(entry)
                    except OSError as exc:
                        failed(entry[0], entry[1], exc)
            try:
                synced = bool(changed) and sync_filesystem(self.data_dir)
            except OSError as exc:
                logger.error("syncing the data directory failed (%s); fsyncing each file", exc)
                synced = False
            if synced:
                for entry in changed:
                    entry[2].mark_durable()
            threads = min(self.threads, len(changed))
            if changed and not synced and threads > 1:
                with ThreadPoolExecutor(threads, thread_name_prefix="log-flush") as pool:
                    for _ in pool.map(_in_context(close_one), changed):
                        pass
            for entry in logs:
                close_one(entry)  # (a no-op for those closed above)
        finally:
            self.files.close_all()
            if self._owns_controller:
                self._owns_controller = False
                self.controller.close(clean)


def _holds_records(directory: Path) -> bool:
    """Whether a partition directory holds any record (a non-empty segment file)."""
    try:
        with os.scandir(directory) as entries:
            return any(e.name.endswith(LOG_SUFFIX) and e.stat().st_size > 0 for e in entries)
    except FileNotFoundError:
        return False
