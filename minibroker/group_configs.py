"""Group configs: the GROUP config resource (type 32) of Kafka 4 (KIP-848's dynamic group configs),
read by DescribeConfigs and set by IncrementalAlterConfigs / AlterConfigs, listed by
ListConfigResources.

One table, GROUP_CONFIGS, names each group config with its type, the broker setting that is its
default (and its synonym in DescribeConfigs), and the bounds a value must keep (from the broker's
settings, as Kafka's GroupConfig.validate takes them from the GroupCoordinatorConfig); adding a group
config (the share.* ones of KIP-932, say) is one row. A group's overrides are kept per group id
(`GroupConfigs`), whether or not the group exists, in the cluster's metadata log (ConfigRecords of
the GROUP resource, as Kafka keeps them); the group coordinator reads a consumer group's session
timeout and heartbeat interval through `value`. A change is committed first and applied as it is
published, on every broker of the cluster.

Data directories written before the metadata log kept the overrides in `group-configs.json`
({group id: {name: value}}); `read_legacy_file` reads it once, into the metadata log
(minibroker.metadata_migration).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.metadata_image import GROUP_RESOURCE, ConfigRecord, MetadataRecord

if TYPE_CHECKING:
    from minibroker.metadata import BrokerMetadata

GROUP_CONFIGS_FILE = "group-configs.json"

GROUP = 32
SOURCE_GROUP_CONFIG = 8  # DescribeConfigs' ConfigSource.GROUP_CONFIG
SOURCE_DEFAULT_CONFIG = 5
CONFIG_TYPE_INT = 3


class Settings(Protocol):
    """The broker's settings by Kafka name (minibroker.config.BrokerConfig)."""

    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True)
class GroupConfigDef:
    name: str
    broker_key: str  # the broker setting that is the default (DescribeConfigs' synonym)
    bounds: Callable[[Settings], tuple[int, int]]  # inclusive, from the broker's settings
    type_id: int = CONFIG_TYPE_INT


def _session_bounds(config: Settings) -> tuple[int, int]:
    return config["group.min.session.timeout.ms"], config["group.max.session.timeout.ms"]


def _heartbeat_bounds(config: Settings) -> tuple[int, int]:
    return 1, config["group.max.session.timeout.ms"]


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in [
    GroupConfigDef("consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms", _heartbeat_bounds),
    GroupConfigDef("consumer.session.timeout.ms", "group.consumer.session.timeout.ms", _session_bounds),
]}


class GroupConfigError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class GroupConfigs:
    """Each group id's overrides, kept in the metadata (`metadata`) when given, else in memory."""

    def __init__(self, broker_config: Settings, metadata: BrokerMetadata | None = None) -> None:
        self.broker_config = broker_config
        self.metadata = metadata
        self.overrides: dict[str, dict[str, str]] = {}
        if metadata is not None:
            self._read()
            metadata.subscribe(self._on_metadata)

    def _read(self) -> None:
        assert self.metadata is not None
        configs = self.metadata.image.configs
        self.overrides = {name: configs.get(GROUP_RESOURCE, name) for name in configs.names(GROUP_RESOURCE)}

    def _on_metadata(self, records) -> None:
        if any(isinstance(r, ConfigRecord) and r.resource_type == GROUP_RESOURCE for r in records):
            self._read()

    def value(self, group_id: str, name: str) -> int:
        """The effective value of a group config for a group: its override, else the broker's."""
        raw = self.overrides.get(group_id, {}).get(name)
        return int(raw) if raw is not None else int(self.broker_config[GROUP_CONFIGS[name].broker_key])

    def check(self, values: Mapping[str, str]) -> None:
        """INVALID_CONFIG naming the key for an unknown key or a value out of type or bounds."""
        for name, raw in values.items():
            definition = GROUP_CONFIGS.get(name)
            if definition is None:
                raise GroupConfigError(ErrorCode.invalid_config, f"Unknown group config name: {name}")
            try:
                value = int(raw)
            except (TypeError, ValueError):
                raise GroupConfigError(ErrorCode.invalid_config,
                                       f"Invalid value {raw} for configuration {name}: Not a number of type INT") from None
            low, high = definition.bounds(self.broker_config)
            if not low <= value <= high:
                raise GroupConfigError(ErrorCode.invalid_config,
                                       f"Invalid value {raw} for configuration {name}: must be between {low} and {high}")

    def replace(self, group_id: str, values: Mapping[str, str]) -> None:
        """Make `values` the group's overrides (committed to the metadata log first)."""
        if self.metadata is not None:
            self.metadata.controller.replace_configs(GROUP_RESOURCE, group_id, dict(values),
                                                     self.metadata.clock.now_ms())
        elif values:
            self.overrides[group_id] = dict(values)
        else:
            self.overrides.pop(group_id, None)

    def describe(self, group_id: str, include_synonyms: bool) -> list[dict[str, Any]]:
        """DescribeConfigs entries of a group: every group config, its override or the broker's value."""
        entries = []
        own = self.overrides.get(group_id, {})
        for name, definition in sorted(GROUP_CONFIGS.items()):
            default = str(self.broker_config[definition.broker_key])
            synonyms = [{"name": definition.broker_key, "value": default, "source": SOURCE_DEFAULT_CONFIG}]
            if name in own:
                synonyms.insert(0, {"name": name, "value": own[name], "source": SOURCE_GROUP_CONFIG})
            entries.append({
                "name": name, "value": own.get(name, default), "read_only": False,
                "is_default": name not in own, "config_source": synonyms[0]["source"], "is_sensitive": False,
                "synonyms": synonyms if include_synonyms else [], "config_type": definition.type_id,
                "documentation": None,
            })
        return entries


def read_legacy_file(data_dir: Path) -> list[MetadataRecord] | None:
    """The records of an earlier version's `group-configs.json` (None: no file); ValueError naming
    the file when it cannot be read."""
    path = Path(data_dir) / GROUP_CONFIGS_FILE
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text())
        return [ConfigRecord(GROUP_RESOURCE, str(group), str(name), str(value))
                for group, values in sorted(state.items()) for name, value in sorted(values.items())]
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: unreadable group configs ({exc}); restore the file or remove it") from None
