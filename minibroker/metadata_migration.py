"""Data directories written before the metadata log: their per-purpose files, read once into it.

Earlier versions kept cluster-wide state in files of their own in the data directory:

    topics/<name>.json        each topic: its id, partition count and config overrides
    producer-ids              the next producer-id block
    scram-credentials.json    SCRAM credentials set or removed at runtime
    client-quotas.json        client quotas
    broker-configs.json       dynamic broker configs, both levels
    group-configs.json        GROUP config overrides

The first start of this version on such a directory reads them (each with its own reader and its
own checks: a file that cannot be read stops the start, naming it, and nothing is changed), writes
what they hold to the new metadata log as records, in one batch, with a snapshot, and only then
removes them. A start interrupted between the two finds the metadata log written and removes the
files then. The partition directories stay where they are; each gets its `partition.metadata` when
the log manager adopts it.

A topic whose deletion a crash cut short (a `-delete` directory names its id) is imported as
deleted, so that what is left of it is removed, as the earlier version would have finished it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from minibroker.client_quotas import QUOTA_STORE_FILE, read_legacy_file as read_quotas
from minibroker.dynamic_config import BROKER_CONFIGS_FILE, read_legacy_file as read_broker_configs
from minibroker.group_configs import GROUP_CONFIGS_FILE, read_legacy_file as read_group_configs
from minibroker.scram_credentials import SCRAM_CREDENTIALS_FILE, read_legacy_file as read_scram
from minibroker.storage.config import LogConfig
from minibroker.storage.controller import LegacyImport
from minibroker.storage.files import TMP_SUFFIX, fsync_directory, unlink_if_exists
from minibroker.storage.metadata_image import (
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataImage,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from minibroker.storage.producer_ids import PRODUCER_IDS_FILE, read_legacy_file as read_producer_ids
from minibroker.storage.topic_file import read_topic_file

__all__ = ["legacy_importer"]

TOPICS_DIR = "topics"
_DELETED_DIR = re.compile(r"^.+-\d+\.(?P<topic_id>[0-9a-f]{32})-delete$")
FILES = (PRODUCER_IDS_FILE, SCRAM_CREDENTIALS_FILE, QUOTA_STORE_FILE, BROKER_CONFIGS_FILE, GROUP_CONFIGS_FILE)


def legacy_importer(data_dir: Path, node_id: int, log_config: LogConfig):
    """The `legacy` reader minibroker.storage.controller.Controller.open takes, for a data directory
    of one broker (`node_id`), whose topic configs are checked against `log_config`."""

    def read(image: MetadataImage) -> LegacyImport | None:
        return read_legacy(Path(data_dir), node_id, log_config)

    return read


def read_legacy(data_dir: Path, node_id: int, log_config: LogConfig) -> LegacyImport | None:
    topics_dir = data_dir / TOPICS_DIR
    present = [name for name in FILES if (data_dir / name).exists()]
    if not topics_dir.is_dir() and not present:
        return None
    records: list[MetadataRecord] = []
    sources: list[str] = []
    if topics_dir.is_dir():
        deleting = {m["topic_id"] for m in map(_DELETED_DIR.match, os.listdir(data_dir)) if m}
        names = sorted(os.listdir(topics_dir))
        count = 0
        for name in names:
            if not name.endswith(".json"):
                continue
            info = read_topic_file(topics_dir / name, log_config)
            records.append(TopicRecord(info.name, info.topic_id))
            records += [PartitionRecord(info.topic_id, p, (node_id,), (node_id,), node_id)
                        for p in range(info.num_partitions)]
            if info.topic_id.hex in deleting:
                records.append(RemoveTopicRecord(info.topic_id))
                continue
            records += [ConfigRecord(TOPIC_RESOURCE, info.name, key, value)
                        for key, value in sorted(info.overrides.items())]
            count += 1
        sources.append(f"{count} topic(s) of {topics_dir}")
    next_producer_id = read_producer_ids(data_dir)
    if next_producer_id is not None:
        records.append(ProducerIdsRecord(node_id, -1, next_producer_id))
    for read in (read_scram, read_quotas, read_group_configs):
        found = read(data_dir)
        if found is not None:
            records += found
    broker_configs = read_broker_configs(data_dir, node_id)
    if broker_configs is not None:
        records += broker_configs
    sources += [str(data_dir / name) for name in present]

    def cleanup() -> None:
        for name in present:
            unlink_if_exists(data_dir / name)
            unlink_if_exists(data_dir / (name + TMP_SUFFIX))
        if topics_dir.is_dir():
            shutil.rmtree(topics_dir)
        fsync_directory(data_dir)

    return LegacyImport(records, sources, cleanup)
