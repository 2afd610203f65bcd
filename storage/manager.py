"""`LogManager`: the data directory, its topics and their partition logs.

Layout of the data directory:

* `topics/<name>.json`: one file per topic, the commit point of its creation and deletion:
  {"version": 1, "name", "topic_id" (UUID string), "num_partitions", "configs" (the topic's config
  overrides, strings)}. Written atomically (tmp file, fsync, os.replace, directory fsync). The topic
  id is a uuid4 drawn at creation and kept for the topic's life, across restarts. (Kafka keeps the
  id in each partition directory's `partition.metadata` and the configs in the metadata log; one file
  per topic serves both here.)
* `<topic>-<partition>/`: one `PartitionLog` directory per partition (see `storage.log`).
* Anything else (the producer-ids file, other components' files) is left alone; directories that look
  like partitions of no known topic (e.g. a deletion interrupted by a crash) are logged and skipped,
  and removed if a topic of that name is created again.

Create: validate everything, create the partition directories, then write the topic file. Delete:
remove the topic file, then the directories. Either way a crash leaves at worst stray directories.

Topic name rules and the '.'/'_' collision check follow Kafka (`Topic.validate`, `Topic.hasCollision`,
ReplicationControlManager: a name that collides with an existing topic's is INVALID_TOPIC_EXCEPTION).
Internal topics (names starting with `__`) are ordinary topics here.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

from storage.config import (
    ConfigError,
    InvalidTopicError,
    LogConfig,
    has_collision,
    validate_topic_name,
)
from storage.log import PartitionLog, fsync_directory, write_atomically

__all__ = [
    "ConfigError",
    "InvalidPartitionsError",
    "InvalidTopicError",
    "LogManager",
    "MAX_PARTITIONS",
    "TopicExistsError",
    "TopicInfo",
    "UnknownTopicError",
]

logger = logging.getLogger(__name__)

TOPICS_DIR = "topics"
MAX_PARTITIONS = 10_000
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


class TopicExistsError(Exception):
    """TOPIC_ALREADY_EXISTS (36)."""

    error_code = 36


class InvalidPartitionsError(ValueError):
    """INVALID_PARTITIONS (37)."""

    error_code = 37


class UnknownTopicError(KeyError):
    """UNKNOWN_TOPIC_OR_PARTITION (3)."""

    error_code = 3

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown topic"


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    overrides: Mapping[str, str]  # the topic-level config overrides, as given
    config: LogConfig  # the effective config (broker defaults + overrides)


@dataclass
class _Topic:
    info: TopicInfo
    logs: list[PartitionLog] = field(default_factory=list)


def new_topic_id() -> uuid.UUID:
    """A random topic id; like Kafka's Uuid.randomUuid, never one whose base64 form starts with '-'
    (it would read as a command-line option)."""
    while True:
        topic_id = uuid.uuid4()
        if not base64.urlsafe_b64encode(topic_id.bytes).startswith(b"-"):
            return topic_id


class LogManager:
    def __init__(self, data_dir: Path, broker_config: LogConfig) -> None:
        self.data_dir = data_dir
        self.broker_config = broker_config
        self._topics: dict[str, _Topic] = {}
        self._by_id: dict[uuid.UUID, _Topic] = {}
        # Called with the topic's name after a topic is created or deleted (and, once the broker can
        # add partitions, after that): the shell tells the quota callback (KIP-257).
        self.on_topics_changed: Callable[[str], None] | None = None

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(cls, data_dir: Path, broker_config: LogConfig, now_ms: int) -> LogManager:
        data_dir = Path(data_dir)
        topics_dir = data_dir / TOPICS_DIR
        topics_dir.mkdir(parents=True, exist_ok=True)
        manager = cls(data_dir, broker_config)
        for name in sorted(os.listdir(topics_dir)):
            path = topics_dir / name
            if name.endswith(".json.tmp"):
                path.unlink(missing_ok=True)
                continue
            if not name.endswith(".json"):
                logger.warning("ignoring stray file %s", path)
                continue
            try:
                info = manager._read_topic_file(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.error("ignoring unreadable topic file %s: %s", path, exc)
                continue
            topic = _Topic(info)
            for partition in range(info.num_partitions):
                topic.logs.append(
                    PartitionLog.open(manager._partition_dir(info.name, partition), info.config, now_ms)
                )
            manager._topics[info.name] = topic
            manager._by_id[info.topic_id] = topic
        for name in sorted(os.listdir(data_dir)):
            if name == TOPICS_DIR or not (data_dir / name).is_dir():
                continue
            match = _PARTITION_DIR.match(name)
            topic = manager._topics.get(match["topic"]) if match else None
            if topic is None or int(match["partition"]) >= topic.info.num_partitions:
                logger.warning("ignoring stray directory %s in the data directory", data_dir / name)
        return manager

    def _read_topic_file(self, path: Path) -> TopicInfo:
        state = json.loads(path.read_text())
        name = state["name"]
        validate_topic_name(name)
        if path.name != name + ".json":
            raise ValueError(f"names topic {name!r}")
        num_partitions = int(state["num_partitions"])
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise ValueError(f"bad partition count {num_partitions}")
        overrides = {str(k): str(v) for k, v in state.get("configs", {}).items()}
        try:
            config = self.broker_config.with_topic_overrides(overrides)
        except ConfigError as exc:
            # Keep the topic (its data matters more than one bad setting), without that setting.
            logger.error("topic %s: dropping invalid stored config: %s", name, exc)
            overrides.pop(exc.key, None)
            config = _config_skipping_invalid(self.broker_config, overrides)
        return TopicInfo(name, uuid.UUID(state["topic_id"]), num_partitions, overrides, config)

    def _write_topic_file(self, info: TopicInfo) -> None:
        state = {
            "version": 1,
            "name": info.name,
            "topic_id": str(info.topic_id),
            "num_partitions": info.num_partitions,
            "configs": dict(info.overrides),
        }
        write_atomically(self._topic_file(info.name), json.dumps(state, indent=1).encode() + b"\n")

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
    ) -> TopicInfo:
        """Create a topic (or only check that it could be created). Raises InvalidTopicError,
        TopicExistsError, InvalidPartitionsError or ConfigError, checked in Kafka's order."""
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
        info = TopicInfo(name, new_topic_id(), num_partitions, overrides, config)
        if validate_only:
            return info
        topic = _Topic(info)
        try:
            for partition in range(num_partitions):
                directory = self._partition_dir(name, partition)
                if directory.exists():  # left over from a deletion cut short
                    logger.warning("removing stale directory %s", directory)
                    shutil.rmtree(directory)
                topic.logs.append(PartitionLog.open(directory, config, now_ms))
            self._write_topic_file(info)
        except BaseException:
            for log in topic.logs:
                log.delete()
            raise
        self._topics[name] = topic
        self._by_id[info.topic_id] = topic
        if self.on_topics_changed is not None:
            self.on_topics_changed(name)
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        self._topic_file(name).unlink()
        fsync_directory(self.data_dir / TOPICS_DIR)
        del self._topics[name]
        del self._by_id[topic.info.topic_id]
        for log in topic.logs:
            log.delete()
        if self.on_topics_changed is not None:
            self.on_topics_changed(name)
        return topic.info

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

    def topic(self, name: str) -> TopicInfo | None:
        topic = self._topics.get(name)
        return topic.info if topic else None

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        topic = self._by_id.get(topic_id)
        return topic.info if topic else None

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
        return sum(log.enforce_retention(now_ms) for _, _, log in self.logs())

    def maybe_flush(self, now_ms: int) -> int:
        return sum(1 for _, _, log in self.logs() if log.maybe_flush(now_ms))

    def flush(self) -> None:
        for _, _, log in self.logs():
            log.flush()

    def close(self, clean: bool = True) -> None:
        for _, _, log in self.logs():
            log.close(clean)
        self._topics.clear()
        self._by_id.clear()


def _config_skipping_invalid(base: LogConfig, overrides: dict[str, str]) -> LogConfig:
    while True:
        try:
            return base.with_topic_overrides(overrides)
        except ConfigError as exc:
            overrides.pop(exc.key, None)
