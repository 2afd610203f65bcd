"""Group configs: the GROUP config resource (type 32) of Kafka 4 (KIP-848's dynamic group configs, and
KIP-932's share.* ones), read by DescribeConfigs and set by IncrementalAlterConfigs / AlterConfigs,
listed by ListConfigResources.

One table, GROUP_CONFIGS, names each group config with its type, the broker setting that is its
default (and its synonym in DescribeConfigs; a config without one has Kafka's built-in default), and
what a value must be (bounds from the broker's settings, as Kafka's GroupConfig.validate takes them
from the GroupCoordinatorConfig and ShareGroupConfig, or one of a set of strings); adding a group
config is one row. A group's overrides are kept per group id (`GroupConfigs`), whether or not the
group exists, in the cluster's metadata log (ConfigRecords of the GROUP resource, as Kafka keeps
them); the group coordinator reads a consumer group's session timeout and heartbeat interval
through `value`, and the share groups and share partitions read theirs (minibroker/share/) through
`get`. A change is committed first and applied as it is published, on every broker of the cluster.

Data directories written before the metadata log kept the overrides in `group-configs.json`
({group id: {name: value}}); `read_legacy_file` reads it once, into the metadata log
(minibroker.metadata_migration).
"""

from __future__ import annotations

import json
import re
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
CONFIG_TYPE_BOOLEAN = 1
CONFIG_TYPE_STRING = 2
CONFIG_TYPE_INT = 3


class Settings(Protocol):
    """The broker's settings by Kafka name (minibroker.config.BrokerConfig)."""

    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True)
class GroupConfigDef:
    name: str
    broker_key: str | None  # the broker setting that is the default (DescribeConfigs' synonym)
    bounds: Callable[[Settings], tuple[int, int]] | None = None  # inclusive, from the broker's settings
    type_id: int = CONFIG_TYPE_INT
    default: str | None = None  # Kafka's built-in default, for a config without a broker setting
    check: Callable[[str], str | None] | None = None  # a string's reason to be refused
    message: str = "between"  # how a value out of bounds is refused: "between" or Kafka 4.4's "range"


def _session_bounds(config: Settings) -> tuple[int, int]:
    return config["group.min.session.timeout.ms"], config["group.max.session.timeout.ms"]


def _heartbeat_bounds(config: Settings) -> tuple[int, int]:
    return 1, config["group.max.session.timeout.ms"]


def _share_bounds(name: str) -> Callable[[Settings], tuple[int, int]]:
    """The bounds group.share.min.<name> to group.share.max.<name> (Kafka's share group configs)."""
    return lambda config: (config[f"group.share.min.{name}"], config[f"group.share.max.{name}"])


_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_auto_offset_reset(value: str) -> tuple[str, int]:
    """share.auto.offset.reset: ("latest", 0), ("earliest", 0) or ("by_duration", milliseconds);
    ValueError for anything else (Kafka's ShareGroupAutoOffsetResetStrategy: an ISO-8601 duration
    of days, hours, minutes and seconds, not negative)."""
    text = value.strip().lower()
    if text in ("latest", "earliest"):
        return text, 0
    if text.startswith("by_duration:"):
        match = _DURATION.match(value.strip()[len("by_duration:"):].upper())
        if match and any(match.groups()):
            days, hours, minutes, seconds = match.groups()
            ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000 + round(
                float(seconds or 0) * 1000)
            return "by_duration", ms
        raise ValueError(f"Invalid duration {value[len('by_duration:'):]!r}: an ISO-8601 duration such as PT1H is "
                         f"expected")
    raise ValueError(f"Invalid value {value} for configuration share.auto.offset.reset: it must be latest, "
                     f"earliest or by_duration:<ISO-8601 duration>")


def _auto_offset_reset(value: str) -> str | None:
    try:
        parse_auto_offset_reset(value)
    except ValueError:
        return (f"Invalid value `{value}` for configuration share.auto.offset.reset. The value must be either "
                f"'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")
    return None


def _one_of(*choices: str) -> Callable[[str], str | None]:
    return lambda value: None if value in choices else f"String must be one of: {', '.join(choices)}"


def _dlq_topic(value: str) -> str | None:
    if value.startswith("__"):
        return "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"
    return None


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in [
    GroupConfigDef("consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms", _heartbeat_bounds),
    GroupConfigDef("consumer.session.timeout.ms", "group.consumer.session.timeout.ms", _session_bounds),
    # KIP-932's share group configs (Kafka 4.4's GroupConfig), used by minibroker/share/.
    GroupConfigDef("share.session.timeout.ms", "group.share.session.timeout.ms", _share_bounds("session.timeout.ms"),
                   message="range"),
    GroupConfigDef("share.heartbeat.interval.ms", "group.share.heartbeat.interval.ms",
                   _share_bounds("heartbeat.interval.ms"), message="range"),
    GroupConfigDef("share.record.lock.duration.ms", "group.share.record.lock.duration.ms",
                   _share_bounds("record.lock.duration.ms"), message="range"),
    GroupConfigDef("share.delivery.count.limit", "group.share.delivery.count.limit",
                   _share_bounds("delivery.count.limit"), message="range"),
    GroupConfigDef("share.partition.max.record.locks", "group.share.partition.max.record.locks",
                   _share_bounds("partition.max.record.locks"), message="range"),
    GroupConfigDef("share.assignment.interval.ms", "group.share.assignment.interval.ms",
                   _share_bounds("assignment.interval.ms"), message="range"),
    GroupConfigDef("share.auto.offset.reset", None, type_id=CONFIG_TYPE_STRING, default="latest",
                   check=_auto_offset_reset),
    GroupConfigDef("share.isolation.level", None, type_id=CONFIG_TYPE_STRING, default="read_uncommitted",
                   check=_one_of("read_committed", "read_uncommitted")),
    GroupConfigDef("share.renew.acknowledge.enable", None, type_id=CONFIG_TYPE_BOOLEAN, default="true"),
    # KIP-1191's dead-letter queue (share.version 2): accepted and described; not used here.
    GroupConfigDef("errors.deadletterqueue.topic.name", None, type_id=CONFIG_TYPE_STRING, default="", check=_dlq_topic),
    GroupConfigDef("errors.deadletterqueue.copy.record.enable", None, type_id=CONFIG_TYPE_BOOLEAN, default="false"),
]}

# Kafka 4.4's GroupConfig.validateSessionExceedsHeartbeat: the session timeout beyond the interval.
_SESSION_HEARTBEAT = (("share.session.timeout.ms", "share.heartbeat.interval.ms"),)


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
        """The effective value of an INT group config for a group: its override, else the broker's."""
        return int(self.get(group_id, name))

    def get(self, group_id: str, name: str) -> Any:
        """The effective value of a group config for a group, typed (int, str or bool): its
        override, else the broker's setting, else Kafka's default."""
        definition = GROUP_CONFIGS[name]
        raw = self.overrides.get(group_id, {}).get(name)
        if raw is None:
            if definition.broker_key is not None:
                return self.broker_config[definition.broker_key]
            raw = definition.default or ""
        if definition.type_id == CONFIG_TYPE_INT:
            return int(raw)
        if definition.type_id == CONFIG_TYPE_BOOLEAN:
            return raw.strip().lower() == "true"
        return raw

    def default_text(self, definition: GroupConfigDef) -> str:
        if definition.broker_key is None:
            return definition.default or ""
        value = self.broker_config[definition.broker_key]
        return str(value).lower() if isinstance(value, bool) else str(value)

    def check(self, values: Mapping[str, str]) -> None:
        """INVALID_CONFIG naming the key for an unknown key or a value out of type or bounds."""
        for name in values:
            if name not in GROUP_CONFIGS:
                raise GroupConfigError(ErrorCode.invalid_config, f"Unknown group config name: {name}")
        for name, raw in values.items():
            definition = GROUP_CONFIGS[name]
            if definition.type_id == CONFIG_TYPE_BOOLEAN:
                if str(raw).strip().lower() not in ("true", "false"):
                    raise GroupConfigError(ErrorCode.invalid_config,
                                           f"Invalid value {raw} for configuration {name}: Expected value to be either "
                                           f"true or false")
                continue
            if definition.type_id == CONFIG_TYPE_STRING:
                reason = definition.check(str(raw).strip()) if definition.check is not None else None
                if reason is not None:
                    raise GroupConfigError(ErrorCode.invalid_config,
                                           f"Invalid value {raw} for configuration {name}: {reason}")
                continue
            try:
                value = int(raw)
            except (TypeError, ValueError):
                raise GroupConfigError(ErrorCode.invalid_config,
                                       f"Invalid value {raw} for configuration {name}: Not a number of type INT") from None
            assert definition.bounds is not None
            low, high = definition.bounds(self.broker_config)
            if not low <= value <= high:
                if definition.message == "range":
                    raise GroupConfigError(ErrorCode.invalid_config,
                                           f"{name} must be in the range {low} to {high} inclusive.")
                raise GroupConfigError(ErrorCode.invalid_config,
                                       f"Invalid value {raw} for configuration {name}: must be between {low} and {high}")
        for session_key, heartbeat_key in _SESSION_HEARTBEAT:
            if session_key in values or heartbeat_key in values:
                session = int(values.get(session_key, self.default_text(GROUP_CONFIGS[session_key])))
                heartbeat = int(values.get(heartbeat_key, self.default_text(GROUP_CONFIGS[heartbeat_key])))
                if session <= heartbeat:
                    raise GroupConfigError(ErrorCode.invalid_config, f"{session_key} must be greater than {heartbeat_key}")

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
            default = self.default_text(definition)
            synonyms = [{"name": definition.broker_key or name, "value": default, "source": SOURCE_DEFAULT_CONFIG}]
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
