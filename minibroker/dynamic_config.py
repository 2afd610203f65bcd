"""Dynamic broker configs (Kafka's KIP-226 `DynamicBrokerConfig`): broker settings changed while the
broker runs, through AlterConfigs / IncrementalAlterConfigs on the BROKER resource, and kept in the
cluster's metadata log (ConfigRecords of the BROKER resource, as KRaft keeps them).

Two levels, as in Kafka: the resource named by this broker's id holds per-broker values
(DYNAMIC_BROKER_CONFIG) and the resource named "" cluster-wide defaults
(DYNAMIC_DEFAULT_BROKER_CONFIG). A setting's value is the first of: per-broker, cluster default,
the broker's properties (STATIC_BROKER_CONFIG), the built-in default (DEFAULT_CONFIG).

Which keys may change at runtime:
- the broker defaults of topic configs Kafka reconfigures live (`DynamicLogConfig`: the first broker
  synonym of each topic config: log.retention.ms, log.retention.bytes, log.segment.bytes,
  log.roll.ms, message.max.bytes, log.cleanup.policy, log.message.timestamp.type,
  min.insync.replicas, compression.type, ...). Every topic without its own override takes the new
  value at once. The unit variants (log.retention.hours, log.roll.hours, ...) are read-only, as in
  Kafka;
- `quota.window.num` and `quota.window.size.seconds`: read-only in Kafka, which builds its quota
  sensors once; here the quota managers start afresh on the new window (the rates measured so far
  are dropped), so they are dynamic. docs/differences.md lists this difference;
- keys the broker does not know (a plugin's, say) are stored and described, as Kafka keeps them.
Any other known key is refused as Kafka refuses it: INVALID_REQUEST "Cannot update these configs
dynamically: Set(...)". A value the broker's own parser rejects is INVALID_REQUEST too (Kafka wraps
the ConfigException of its dynamic validation that way, KAFKA-13609).

A change is committed to the metadata log first, and put in force as it is published: a
cluster-default change on one broker reaches every broker of the cluster, a per-broker one its
broker. A stored value that is no longer valid (the properties changed under it) is logged and
ignored, as Kafka's `removeInvalidConfigs` does.

Data directories written before the metadata log kept both levels in `broker-configs.json`
({"version": 1, "cluster_default": {key: value}, "broker": {key: value}}); `read_legacy_file` reads
it once, into the metadata log (minibroker.metadata_migration); a file that cannot be read stops the
broker with a message naming it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from minibroker.config import BROKER_CONFIGS, BrokerConfig, ConfigError
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import (
    BROKER_KEY_DEFAULTS,
    BROKER_LOG_KEYS,
    SOURCE_DYNAMIC_BROKER_CONFIG,
    SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
    SOURCE_STATIC_BROKER_CONFIG,
    SOURCE_DEFAULT_CONFIG,
    TOPIC_CONFIGS,
    BrokerLevels,
)
from minibroker.storage.metadata_image import BROKER_RESOURCE, ConfigRecord, MetadataRecord

if TYPE_CHECKING:
    from minibroker.client_quotas import BrokerQuotas
    from minibroker.metadata import BrokerMetadata
    from minibroker.storage.manager import LogManager

log = logging.getLogger(__name__)

BROKER_CONFIGS_FILE = "broker-configs.json"

# Kafka's DynamicLogConfig.ReconfigurableConfigs: the highest-precedence broker synonym of every topic
# config (message.format.version, which Kafka excludes, is not a config here).
DYNAMIC_LOG_KEYS = frozenset(d.broker_key for d in TOPIC_CONFIGS.values() if d.broker_key)
# Static in Kafka; applied live here (module docstring).
DYNAMIC_QUOTA_KEYS = frozenset({"quota.window.num", "quota.window.size.seconds"})
DYNAMIC_KEYS = DYNAMIC_LOG_KEYS | DYNAMIC_QUOTA_KEYS
KNOWN_KEYS = frozenset(BROKER_CONFIGS) | BROKER_LOG_KEYS

# The built-in defaults, as DescribeConfigs shows them (DEFAULT_CONFIG); a key without one is absent.
STATIC_DEFAULTS: dict[str, str] = {
    **BROKER_KEY_DEFAULTS,
    **{name: key.default for name, key in BROKER_CONFIGS.items() if key.default},
}


class BrokerConfigChangeError(Exception):
    """A refused change to a broker resource: the error code and Kafka's message."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def _scala_set(names) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


# Told of every change put in force: (the config before, the config now).
ConfigListener = Callable[[BrokerConfig, BrokerConfig], None]


@dataclass
class DynamicBrokerConfigs:
    """The static properties, the two dynamic levels (from the metadata, `metadata`), and the config
    in force (`config`), which a change published renews and announces to the subscribers."""

    static: BrokerConfig
    metadata: BrokerMetadata | None
    cluster_default: dict[str, str]
    per_broker: dict[str, str]
    config: BrokerConfig = field(init=False)
    _listeners: list[ConfigListener] = field(init=False, default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.config = self.current()

    def subscribe(self, listener: ConfigListener) -> None:
        """Call `listener(old, new)` whenever a change is put in force."""
        self._listeners.append(listener)

    @classmethod
    def load(cls, metadata: BrokerMetadata | None, static: BrokerConfig) -> DynamicBrokerConfigs:
        """The dynamic configs the metadata holds for this broker (`metadata.node_id`) and the
        cluster, over `static`; None: no dynamic configs (tools, tests)."""
        configs = cls(static, metadata, {}, {})
        if metadata is not None:
            configs._read_levels()
            if configs.cluster_default or configs.per_broker:
                log.info("%d dynamic broker config(s) from the metadata log",
                         len(configs.cluster_default) + len(configs.per_broker))
            metadata.subscribe(configs._on_metadata)
        configs.config = configs.current()
        return configs

    def _resource(self, per_broker: bool) -> str:
        assert self.metadata is not None
        return str(self.metadata.node_id) if per_broker else ""

    def _read_levels(self) -> None:
        """Both levels from the image, a value no longer valid logged and left out."""
        assert self.metadata is not None
        image = self.metadata.image
        self.cluster_default, self.per_broker = {}, {}
        for per_broker in (False, True):
            for key, value in sorted(image.configs.get(BROKER_RESOURCE, self._resource(per_broker)).items()):
                try:
                    self._check_values(per_broker=per_broker, level={**self._level(per_broker), key: value})
                except BrokerConfigChangeError as exc:
                    log.error("ignoring the %s config %s=%r: %s", "broker" if per_broker else "cluster_default",
                              key, value, exc.message)
                    continue
                self._level(per_broker)[key] = value

    def _on_metadata(self, records) -> None:
        assert self.metadata is not None
        mine = ("", self._resource(True))
        if any(isinstance(r, ConfigRecord) and r.resource_type == BROKER_RESOURCE and r.resource_name in mine
               for r in records):
            self._read_levels()
            old, self.config = self.config, self.current()
            for listener in self._listeners:
                listener(old, self.config)

    def _level(self, per_broker: bool) -> dict[str, str]:
        return self.per_broker if per_broker else self.cluster_default

    def level(self, per_broker: bool) -> dict[str, str]:
        """A copy of the dynamic values of one level (this broker's, or the cluster default)."""
        return dict(self._level(per_broker))

    def effective_props(self, cluster_default: Mapping[str, str] | None = None,
                        per_broker: Mapping[str, str] | None = None) -> dict[str, str]:
        """The properties in force: static, then the cluster defaults, then this broker's values."""
        return {
            **self.static.props,
            **(self.cluster_default if cluster_default is None else cluster_default),
            **(self.per_broker if per_broker is None else per_broker),
        }

    def current(self) -> BrokerConfig:
        return BrokerConfig(self.effective_props())

    def levels(self) -> BrokerLevels:
        """Where values come from, highest precedence first (for DescribeConfigs' synonyms)."""
        return (
            (SOURCE_DYNAMIC_BROKER_CONFIG, self.per_broker),
            (SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG, self.cluster_default),
            (SOURCE_STATIC_BROKER_CONFIG, self.static.props),
            (SOURCE_DEFAULT_CONFIG, STATIC_DEFAULTS),
        )

    # ---- changes ---------------------------------------------------------------------------------

    def check(self, per_broker: bool, level: Mapping[str, str]) -> BrokerConfig:
        """Validate `level` as the new complete set of one level's dynamic values; returns the broker
        config that would result. Raises BrokerConfigChangeError."""
        read_only = sorted(k for k in level if k in KNOWN_KEYS and k not in DYNAMIC_KEYS)
        if read_only:
            raise BrokerConfigChangeError(
                ErrorCode.invalid_request, f"Cannot update these configs dynamically: {_scala_set(read_only)}")
        return self._check_values(per_broker, level)

    def _check_values(self, per_broker: bool, level: Mapping[str, str]) -> BrokerConfig:
        if per_broker:
            props = self.effective_props(per_broker=level)
        else:
            props = self.effective_props(cluster_default=level)
        try:
            return BrokerConfig(props)
        except ConfigError as exc:
            raise BrokerConfigChangeError(ErrorCode.invalid_request, str(exc)) from None

    def replace(self, per_broker: bool, level: Mapping[str, str]) -> None:
        """Make `level` (already checked) the level's values: committed to the metadata log, then
        put in force as published (the subscribers are told)."""
        if self.metadata is None:
            target = self._level(per_broker)
            target.clear()
            target.update(level)
            old, self.config = self.config, self.current()
            for listener in self._listeners:
                listener(old, self.config)
            return
        self.metadata.controller.replace_configs(BROKER_RESOURCE, self._resource(per_broker), dict(level),
                                                 self.metadata.clock.now_ms())


def apply(old: BrokerConfig, new: BrokerConfig, *, logs: LogManager, quotas: BrokerQuotas) -> None:
    """Put a changed broker config in force (a `DynamicBrokerConfigs` subscriber): topics without an
    override take the new log defaults, and the client quotas move to the new window."""
    if new.log_config != old.log_config:
        logs.set_broker_config(new.log_config)
    window = (new["quota.window.num"], new["quota.window.size.seconds"])
    if window != (old["quota.window.num"], old["quota.window.size.seconds"]):
        quotas.reconfigure_window(*window)
        log.info("client quota window is now %d sample(s) of %d s", *window)


def check_against_topics(logs: LogManager, new: BrokerConfig) -> None:
    """A new broker-level default that some topic's own overrides contradict is refused."""
    try:
        logs.check_broker_config(new.log_config)
    except ConfigError as exc:
        raise BrokerConfigChangeError(ErrorCode.invalid_request, str(exc)) from None


def read_legacy_file(data_dir: Path, node_id: int) -> list[MetadataRecord] | None:
    """The records of an earlier version's `broker-configs.json` (None: no file); ValueError naming
    the file when it cannot be read."""
    path = Path(data_dir) / BROKER_CONFIGS_FILE
    if not path.exists():
        return None
    levels: dict[str, dict[str, str]] = {"cluster_default": {}, "broker": {}}
    try:
        state = json.loads(path.read_bytes())
        if not isinstance(state, dict) or state.get("version") != 1:
            raise ValueError("not a version 1 broker-configs file")
        for level in levels:
            stored = state.get(level, {})
            if not isinstance(stored, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in stored.items()):
                raise ValueError(f"{level!r} is not an object of strings")
            levels[level] = dict(stored)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{path}: unreadable dynamic broker configs ({exc}); restore the file or remove it "
            "to start with the broker's properties only") from None
    return [ConfigRecord(BROKER_RESOURCE, "" if level == "cluster_default" else str(node_id), key, value)
            for level, values in levels.items() for key, value in sorted(values.items())]
