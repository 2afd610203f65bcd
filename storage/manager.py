"""`LogManager`: the data directory, its topics and their partition logs.

Layout of the data directory:

* `topics/<name>.json`: one file per topic, the commit point of its creation and deletion (its
  format: `minibroker.storage.topic_file`).
* `<topic>-<partition>/`: one `PartitionLog` directory per partition (see `minibroker.storage.log`).
* `<topic>-<partition>.<topic id hex>-delete/`: a partition of a topic being deleted (Kafka renames
  deleted partitions the same way before removing them).
* Anything else (the producer-ids file, other components' files) is left alone.

Create: validate everything, create the partition directories, then write the topic file (the commit
point). Delete: rename the partition directories to their `-delete` names, remove the topic file (the
commit point), then remove the directories. A crash during a deletion leaves `-delete` directories,
and perhaps the topic file: the next open finishes the deletion. A crash during a creation leaves
partition directories without records and without a topic file.

Damage (issue 11: a damaged file stops the broker or is recovered from what is on disk, never guessed
around and deleted): a topic file that cannot be read, or whose stored configs are no longer valid,
stops the open with a `DamagedFileError` naming the file; nothing is deleted. A partition directory
that holds records but belongs to no topic file (the file lost or removed by hand) is kept, logged,
and never deleted: creating that topic again is refused with `StrayDataError` (KAFKA_STORAGE_ERROR)
naming the directory, so an auto-creating Metadata request cannot wipe it. Directories of a topic
that holds no records (what a crashed creation leaves) are reused.

Topic name rules and the '.'/'_' collision check follow Kafka (`Topic.validate`, `Topic.hasCollision`,
ReplicationControlManager: a name that collides with an existing topic's is INVALID_TOPIC_EXCEPTION).
Which topics are internal (Kafka's set, `storage.config.INTERNAL_TOPICS`) matters to the handlers only:
here every topic is stored alike.
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
from typing import Any, Callable, Iterable, Mapping

from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.storage.config import (
    ConfigError,
    InvalidTopicError,
    LogConfig,
    has_collision,
    validate_topic_name,
)
from minibroker.storage.errors import StrayDataError
from minibroker.storage.file_cache import FileCache
from minibroker.storage.files import fsync_directory, sync_filesystem
from minibroker.storage.log import PartitionLog
from minibroker.storage.segment import LOG_SUFFIX
from minibroker.storage.topic_file import MAX_PARTITIONS, TopicInfo, new_topic_id, read_topic_file, write_topic_file

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

TOPICS_DIR = "topics"
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_DELETED_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<topic_id>[0-9a-f]{32})-delete$")
DELETE_SUFFIX = "-delete"
DEFAULT_CACHE_CAPACITY = 256  # open segment files when the owner gives no cache (tools, tests)
PARALLEL_RECOVERY_BYTES = 1 << 20  # a last segment this big is recovered on a worker thread


class TopicExistsError(ApiError):
    error_code = ErrorCode.topic_already_exists


class InvalidPartitionsError(ApiError, ValueError):
    error_code = ErrorCode.invalid_partitions


class UnknownTopicError(ApiError, KeyError):
    error_code = ErrorCode.unknown_topic_or_partition

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown topic"


@dataclass
class _Topic:
    info: TopicInfo
    logs: list[PartitionLog] = field(default_factory=list)


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
                 threads: int = 1) -> None:
        self.data_dir = data_dir
        self.broker_config = broker_config
        # The open segment files of every log (issue 21); bounded, shared by all partitions.
        self.files = files if files is not None else FileCache(DEFAULT_CACHE_CAPACITY)
        self.threads = max(1, threads)  # num.recovery.threads.per.data.dir
        self.recovery = Recovery()
        self._topics: dict[str, _Topic] = {}
        self._by_id: dict[uuid.UUID, _Topic] = {}
        # Told the topic's name after a topic is created, grown or deleted (`subscribe`): the shell
        # tells the quota callback (KIP-257).
        self._topic_listeners: list[Callable[[str], None]] = []

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call `listener(topic)` after each topic is created, grown or deleted."""
        self._topic_listeners.append(listener)

    def _topics_changed(self, name: str) -> None:
        for listener in self._topic_listeners:
            listener(name)

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(cls, data_dir: Path, broker_config: LogConfig, now_ms: int, *,
             files: FileCache | None = None, threads: int = 1) -> LogManager:
        """Open every topic of the data directory. Raises DamagedFileError (nothing changed on disk
        but temporary files) when a topic file cannot be used.

        Partitions are registered from the directory listing and loaded at their first use, so
        start-up does not grow with idle partitions (issue 21); those whose clean-shutdown marker
        is missing (a crash since they were last changed) are recovered here, before the broker
        serves anything, on `threads` threads (Kafka's num.recovery.threads.per.data.dir)."""
        data_dir = Path(data_dir)
        topics_dir = data_dir / TOPICS_DIR
        topics_dir.mkdir(parents=True, exist_ok=True)
        manager = cls(data_dir, broker_config, files, threads)
        infos: list[TopicInfo] = []
        for name in sorted(os.listdir(topics_dir)):
            path = topics_dir / name
            if name.endswith(".json.tmp"):  # a write that never reached its os.replace
                path.unlink(missing_ok=True)
                continue
            if not name.endswith(".json"):
                logger.warning("ignoring stray file %s", path)
                continue
            infos.append(read_topic_file(path, manager.broker_config))
        infos = manager._finish_deletions(infos)
        present = set(os.listdir(data_dir))
        for info in infos:
            topic = _Topic(info)
            for partition in range(info.num_partitions):
                directory = manager._partition_dir(info.name, partition)
                if directory.name not in present:
                    logger.warning("%s is missing: partition %d of topic %s starts empty",
                                   directory, partition, info.name)
                topic.logs.append(
                    PartitionLog.register(directory, info.config, now_ms, files=manager.files)
                )
            manager._topics[info.name] = topic
            manager._by_id[info.topic_id] = topic
        for name in sorted(present):
            match = _PARTITION_DIR.match(name)
            owner = manager._topics.get(match["topic"]) if match else None
            if match and owner is not None and int(match["partition"]) < owner.info.num_partitions:
                continue
            if name == TOPICS_DIR or not (data_dir / name).is_dir():
                continue
            if match and _holds_records(data_dir / name):
                logger.error(
                    "%s holds records, but no topic file accounts for it: kept as it is (restore "
                    "%s/%s.json, or move the directory away)", data_dir / name, TOPICS_DIR, match["topic"],
                )
            else:
                logger.warning("ignoring stray directory %s in the data directory", data_dir / name)
        manager._recover()
        return manager

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

    def _finish_deletions(self, infos: list[TopicInfo]) -> list[TopicInfo]:
        """Complete the deletions a crash cut short: every `-delete` directory goes, and so does a
        topic file whose topic had begun to be deleted (its id is on a `-delete` directory)."""
        deleting: dict[str, list[Path]] = {}
        for name in os.listdir(self.data_dir):
            match = _DELETED_DIR.match(name)
            if match and (self.data_dir / name).is_dir():
                deleting.setdefault(match["topic_id"], []).append(self.data_dir / name)
        if not deleting:
            return infos
        kept = []
        for info in infos:
            if info.topic_id.hex in deleting:
                logger.info("finishing the deletion of topic %s, cut short by a crash", info.name)
                self._delete_topic_files(info)
            else:
                kept.append(info)
        for directories in deleting.values():
            for directory in directories:
                shutil.rmtree(directory, ignore_errors=True)
        return kept

    def _leftover_directories(self, name: str, partitions: Iterable[int]) -> list[Path]:
        """The directories already there for these partitions of `name` (a creation or addition cut
        short by a crash); StrayDataError when one holds records, which must not be created over."""
        existing = [d for d in (self._partition_dir(name, p) for p in partitions) if d.exists()]
        for directory in existing:
            if _holds_records(directory):
                raise StrayDataError(directory, name)
        return existing

    def _write_topic_file(self, info: TopicInfo) -> None:
        write_topic_file(self._topic_file(info.name), info)

    def _topic_file(self, name: str) -> Path:
        return self.data_dir / TOPICS_DIR / (name + ".json")

    def _partition_dir(self, name: str, partition: int) -> Path:
        return self.data_dir / f"{name}-{partition}"

    # -- topics -----------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        overrides: Mapping[str, str] | None,
        now_ms: int,
        validate_only: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        """Create a topic (or only check that it could be created). Raises InvalidTopicError,
        TopicExistsError, InvalidPartitionsError or ConfigError, checked in Kafka's order.
        `topic_id` gives the new topic that id instead of a random one (a topic restored or
        replayed elsewhere keeps its id); one already in use is refused with TopicExistsError."""
        validate_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        colliding = sorted(t for t in self._topics if has_collision(t, name))
        if colliding:
            raise InvalidTopicError(
                f"Topic '{name}' collides with existing topic: {colliding[0]}"
            )
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        if num_partitions > MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"Number of partitions {num_partitions} is above the limit of {MAX_PARTITIONS}."
            )
        overrides = dict(overrides or {})
        config = self.broker_config.with_topic_overrides(overrides)
        if topic_id is not None and topic_id in self._by_id:
            raise TopicExistsError(f"Topic id {topic_id} is already in use.")
        info = TopicInfo(name, topic_id or new_topic_id(), num_partitions, overrides, config)
        if validate_only:
            return info
        existing = self._leftover_directories(name, range(num_partitions))
        topic = _Topic(info)
        try:
            for directory in existing:  # what a creation cut short by a crash left: no records
                logger.warning("reusing %s, which holds no records", directory)
                shutil.rmtree(directory)
            for partition in range(num_partitions):
                directory = self._partition_dir(name, partition)
                topic.logs.append(PartitionLog.create(directory, config, now_ms, files=self.files))
            fsync_directory(self.data_dir)  # the partition directories exist before the commit
            self._write_topic_file(info)
        except BaseException:
            for log in topic.logs:
                log.delete()
            raise
        self._topics[name] = topic
        self._by_id[info.topic_id] = topic
        self._topics_changed(name)
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic: its partition directories are renamed to `-delete` names first, so a
        crash at any point leaves nothing a later open could mistake for a lost topic's data."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        renamed = self._rename_for_deletion(topic.info)  # an OSError here leaves the topic as it was
        for log in topic.logs:
            log.close(clean=False)
        del self._topics[name]
        del self._by_id[topic.info.topic_id]
        self._commit_deletion(topic.info, renamed)
        self._topics_changed(name)
        return topic.info

    def _delete_topic_files(self, info: TopicInfo) -> None:
        self._commit_deletion(info, self._rename_for_deletion(info))

    def _rename_for_deletion(self, info: TopicInfo) -> list[Path]:
        """Rename the topic's partition directories to their `-delete` names (all or, on an
        OSError, none: the renames done are undone before it is raised)."""
        renamed: list[tuple[Path, Path]] = []
        try:
            for partition in range(info.num_partitions):
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
        return [target for _, target in renamed]

    def _commit_deletion(self, info: TopicInfo, renamed: list[Path]) -> None:
        """Remove the topic file (the deletion is then final), then the renamed directories. A
        failure here is only logged: the next open finishes the deletion from the `-delete` names."""
        try:
            self._topic_file(info.name).unlink(missing_ok=True)
            fsync_directory(self.data_dir / TOPICS_DIR)
        except OSError:
            logger.exception("topic %s: could not remove its topic file; the next start finishes "
                             "the deletion", info.name)
        for directory in renamed:
            shutil.rmtree(directory, ignore_errors=True)

    def alter_topic_config(self, name: str, overrides: Mapping[str, str]) -> TopicInfo:
        """Replace a topic's overrides (AlterConfigs semantics; incremental callers pass the merged
        result). Validates first: nothing changes on a ConfigError."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        overrides = dict(overrides)
        config = self.broker_config.with_topic_overrides(overrides)
        info = TopicInfo(name, topic.info.topic_id, topic.info.num_partitions, overrides, config)
        self._write_topic_file(info)
        topic.info = info
        for log in topic.logs:
            log.update_config(config)
        return info

    def add_partitions(self, name: str, count: int, now_ms: int, validate_only: bool = False) -> TopicInfo:
        """CreatePartitions: grow a topic to `count` partitions (never shrink it). Raises
        UnknownTopicError, or InvalidPartitionsError with Kafka's messages (ReplicationControlManager).

        The new partition directories are created first and the topic file, the commit point, is
        written last: a crash in between leaves directories without records, which the next
        addition reuses. A directory there that holds records is StrayDataError, as at creation."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        current = topic.info.num_partitions
        if count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
        if count < current:
            raise InvalidPartitionsError(
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase."
            )
        if count > MAX_PARTITIONS:
            raise InvalidPartitionsError(f"Number of partitions {count} is above the limit of {MAX_PARTITIONS}.")
        info = dataclasses.replace(topic.info, num_partitions=count)
        if validate_only:
            return info
        existing = self._leftover_directories(name, range(current, count))
        added: list[PartitionLog] = []
        try:
            for directory in existing:  # what an addition cut short by a crash left: no records
                logger.warning("reusing %s, which holds no records", directory)
                shutil.rmtree(directory)
            for partition in range(current, count):
                added.append(PartitionLog.create(self._partition_dir(name, partition), info.config,
                                                 now_ms, files=self.files))
            fsync_directory(self.data_dir)  # the partition directories exist before the commit
            self._write_topic_file(info)
        except BaseException:
            for log in added:
                log.delete()
            raise
        topic.logs.extend(added)
        topic.info = info
        self._topics_changed(name)
        return info

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
        entry = self._topics.get(topic)
        if entry is None or not 0 <= partition < len(entry.logs):
            return None
        return entry.logs[partition]

    def logs(self) -> Iterable[tuple[str, int, PartitionLog]]:
        for name in sorted(self._topics):
            for partition, log in enumerate(self._topics[name].logs):
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


def _holds_records(directory: Path) -> bool:
    """Whether a partition directory holds any record (a non-empty segment file)."""
    try:
        with os.scandir(directory) as entries:
            return any(e.name.endswith(LOG_SUFFIX) and e.stat().st_size > 0 for e in entries)
    except FileNotFoundError:
        return False
