"""Group configs: the GROUP config resource (type 32) of Kafka 4 (KIP-848's dynamic group configs),
read by DescribeConfigs and set by IncrementalAlterConfigs / AlterConfigs, listed by
ListConfigResources.

One table, GROUP_CONFIGS, names each group config with its type, the broker setting that is its
default (and its synonym in DescribeConfigs), and the bounds a value must keep (from the broker's
settings, as Kafka's GroupConfig.validate takes them from the GroupCoordinatorConfig); adding a group
config (the share.* ones of KIP-932, say) is one row. A group's overrides are kept per group id
(`GroupConfigs`), whether or not the group exists, as Kafka keeps them in its metadata; the group
coordinator reads a consumer group's session timeout and heartbeat interval through `value`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from minibroker.protocol.errors import ErrorCode

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
    """Each group id's overrides, kept in `path` (a JSON file in the data directory) when given."""

    def __init__(self, broker_config: Settings, path: Path | None = None) -> None:
        self.broker_config = broker_config
        self.path = path
        self.overrides: dict[str, dict[str, str]] = {}
        if path is not None and path.is_file():
            self.overrides = {g: dict(v) for g, v in json.loads(path.read_text()).items()}

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
        if values:
            self.overrides[group_id] = dict(values)
        else:
            self.overrides.pop(group_id, None)
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.overrides, sort_keys=True))
        os.replace(tmp, self.path)

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
