"""A topic's file, `topics/<name>.json`: the commit point of its creation and deletion.

{"version": 1, "name", "topic_id" (UUID string), "num_partitions", "configs" (the topic's config
overrides, strings)}, written atomically (minibroker.storage.files.write_atomically). The topic id is a uuid4
drawn at creation and kept for the topic's life, across restarts. (Kafka keeps the id in each
partition directory's `partition.metadata` and the configs in the metadata log; one file per topic
serves both here.) A file that cannot be read, or whose stored configs are no longer valid, is a
DamagedFileError naming it: dropping a setting would be a guess (a lost retention.ms=-1 means
deleted data).
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from minibroker.storage.config import ConfigError, LogConfig, validate_topic_name
from minibroker.storage.errors import DamagedFileError
from minibroker.storage.files import write_atomically

__all__ = ["MAX_PARTITIONS", "TopicInfo", "new_topic_id", "read_topic_file", "write_topic_file"]

MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    overrides: Mapping[str, str]  # the topic-level config overrides, as given
    config: LogConfig  # the effective config (broker defaults + overrides)


def new_topic_id() -> uuid.UUID:
    """A random topic id; like Kafka's Uuid.randomUuid, never one whose base64 form starts with '-'
    (it would read as a command-line option)."""
    while True:
        topic_id = uuid.uuid4()
        if not base64.urlsafe_b64encode(topic_id.bytes).startswith(b"-"):
            return topic_id


def read_topic_file(path: Path, broker_config: LogConfig) -> TopicInfo:
    """The topic a file describes, its configs over `broker_config`; DamagedFileError naming the
    file when it cannot be used as it is (nothing is changed on disk)."""
    remedy = (
        "the topic's partition directories are untouched; restore this file (from a backup, or "
        "rewrite it: {\"version\": 1, \"name\", \"topic_id\", \"num_partitions\", \"configs\"}) "
        "or move it and the topic's directories away to drop the topic"
    )
    try:
        state = json.loads(path.read_bytes())
        name = state["name"]
        validate_topic_name(name)
        if path.name != name + ".json":
            raise ValueError(f"names topic {name!r}")
        num_partitions = state["num_partitions"]
        if type(num_partitions) is not int or not 1 <= num_partitions <= MAX_PARTITIONS:
            raise ValueError(f"bad partition count {num_partitions!r}")
        configs = state.get("configs", {})
        if not isinstance(configs, dict):
            raise ValueError(f"configs is not an object: {configs!r}")
        overrides = {str(k): str(v) for k, v in configs.items()}
        topic_id = uuid.UUID(state["topic_id"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DamagedFileError(path, f"unreadable topic file ({exc})", remedy) from exc
    try:
        config = broker_config.with_topic_overrides(overrides)
    except ConfigError as exc:
        raise DamagedFileError(
            path, f"stored config {exc.key} is invalid ({exc})",
            "correct or remove that entry of \"configs\" in the file",
        ) from exc
    return TopicInfo(name, topic_id, num_partitions, overrides, config)


def write_topic_file(path: Path, info: TopicInfo) -> None:
    state = {
        "version": 1,
        "name": info.name,
        "topic_id": str(info.topic_id),
        "num_partitions": info.num_partitions,
        "configs": dict(info.overrides),
    }
    write_atomically(path, json.dumps(state, indent=1).encode() + b"\n")
