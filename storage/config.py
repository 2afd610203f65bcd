"""Log (topic) configuration: Kafka's topic-level config names, their broker synonyms and defaults.

Follows Kafka 4.x `LogConfig` / `ServerLogConfigs` / `ServerTopicConfigSynonyms`:

* every topic config has a default, and a broker key (sometimes several, with units: `log.retention.ms`
  wins over `log.retention.minutes`, which wins over `log.retention.hours`) that supplies the default
  for topics without an override;
* values are strings on the wire, parsed and range-checked the way Kafka's `ConfigDef` does; a bad value
  or an unknown topic config name raises `ConfigError` (the broker answers INVALID_CONFIG, 40).

Only some settings change what this broker does: segment.bytes, segment.ms, retention.bytes,
retention.ms, index.interval.bytes, max.message.bytes, flush.messages, flush.ms,
message.timestamp.type, and the timestamp bounds, min.insync.replicas, and the compaction settings
(cleanup.policy, min.cleanable.dirty.ratio, min/max.compaction.lag.ms, delete.retention.ms: the log
cleaner's, minibroker.storage.cleaner). The rest are accepted, validated, stored and described so clients and
admin tools see what they expect.

Like Kafka 4, segment.bytes must be at least 1 MiB; the internal `internal.segment.bytes` topic
override (Kafka's testing-only key, not described) sets any positive segment size.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from minibroker.protocol.errors import ApiError, ErrorCode

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

# DescribeConfigs ConfigType ids (DescribeConfigsResponse v3+).
CONFIG_TYPE_IDS = {
    "BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7,
    "CLASS": 8, "PASSWORD": 9,
}

# DescribeConfigs ConfigSource ids.
SOURCE_TOPIC_CONFIG = 1  # DYNAMIC_TOPIC_CONFIG: a per-topic override
SOURCE_DYNAMIC_BROKER_CONFIG = 2  # set at runtime for this broker (resource name = its id)
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3  # set at runtime for every broker (resource name "")
SOURCE_STATIC_BROKER_CONFIG = 4  # from the broker's properties
SOURCE_DEFAULT_CONFIG = 5  # Kafka's built-in default


class ConfigError(ApiError, ValueError):
    """A config name is unknown or its value is invalid: Kafka's INVALID_CONFIG. `key` names it,
    `reason` says what is wrong. The one error for broker settings and topic configs alike; the
    message words it the way Kafka answers each: "Invalid config retention.ms: ..." for a topic
    config (`topic=True`: CreateTopics, AlterConfigs on a topic), "invalid value for log.retention.ms:
    ..." for a broker setting (at start, and the broker's dynamic configs)."""

    error_code = ErrorCode.invalid_config

    def __init__(self, key: str, reason: str, *, topic: bool = False) -> None:
        super().__init__(f"Invalid config {key}: {reason}" if topic else f"invalid value for {key}: {reason}")
        self.key = key
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# Parsers: str -> typed value, raising ValueError with the reason (wrapped into ConfigError).


def _integer(low: int, high: int, at_least: int | None = None, at_most: int | None = None):
    def parse(text: str) -> int:
        stripped = text.strip()
        try:
            value = int(stripped, 10)
        except ValueError:
            raise ValueError(f"value {text!r} is not a number") from None
        if not low <= value <= high:
            raise ValueError(f"value {value} is out of range [{low}, {high}]")
        if at_least is not None and value < at_least:
            raise ValueError(f"value {value} must be at least {at_least}")
        if at_most is not None and value > at_most:
            raise ValueError(f"value {value} must be no more than {at_most}")
        return value

    return parse


def _int(at_least: int | None = None, at_most: int | None = None):
    return _integer(INT_MIN, INT_MAX, at_least, at_most)


def _long(at_least: int | None = None, at_most: int | None = None):
    return _integer(LONG_MIN, LONG_MAX, at_least, at_most)


def _double(low: float, high: float):
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError(f"value {text!r} is not a number") from None
        if not low <= value <= high:
            raise ValueError(f"value {value} must be between {low} and {high}")
        return value

    return parse


def _gzip_level(text: str) -> int:
    # java.util.zip.Deflater: DEFAULT_COMPRESSION (-1) or BEST_SPEED (1) .. BEST_COMPRESSION (9).
    value = _int(-1, 9)(text)
    if value == 0:
        raise ValueError("value 0 is not a gzip level: use -1 or 1 to 9")
    return value


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError(f"value {text!r} is not a boolean (true or false)")


def _one_of(*choices: str):
    def parse(text: str) -> str:
        value = text.strip()
        if value not in choices:
            raise ValueError(f"value {text!r} is not one of {', '.join(choices)}")
        return value

    return parse


def _list_of(*choices: str, allow_empty: bool = False):
    def parse(text: str) -> str:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items and not allow_empty:
            raise ValueError("the list is empty")
        for item in items:
            if item not in choices:
                raise ValueError(f"{item!r} is not one of {', '.join(choices)}")
        return ",".join(items)

    return parse


_REPLICA_LIST = re.compile(r"^(\*|(\d+:\d+)(,\d+:\d+)*)?$")


def _throttled_replicas(text: str) -> str:
    value = ",".join(item.strip() for item in text.split(",") if item.strip())
    if not _REPLICA_LIST.match(value):
        raise ValueError(f"value {text!r} must be '*' or a list of partition:broker pairs")
    return value


# ---------------------------------------------------------------------------------------------


class TopicConfigDef(NamedTuple):
    """One known topic config: its Kafka name, type, default, broker synonyms and parser."""

    name: str
    type: str  # Kafka ConfigDef type name: INT, LONG, DOUBLE, BOOLEAN, STRING, LIST
    default: Any
    # Broker keys that supply the default, highest precedence first, each with the factor that turns
    # its unit into the topic config's unit (log.retention.hours -> ms is 3_600_000).
    broker_keys: tuple[tuple[str, int], ...]
    parse: Callable[[str], Any]

    @property
    def field(self) -> str:
        return self.name.replace(".", "_")

    @property
    def broker_key(self) -> str | None:
        """The broker key Kafka names as this config's synonym (the highest-precedence one)."""
        return self.broker_keys[0][0] if self.broker_keys else None


_WEEK_MS = 7 * 24 * 3600 * 1000
_H = 3_600_000
_M = 60_000


def _def(name, type_, default, broker_keys, parse) -> TopicConfigDef:
    keys = tuple((k, 1) if isinstance(k, str) else k for k in broker_keys)
    return TopicConfigDef(name, type_, default, keys, parse)


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in [
        # An empty list is valid since Kafka 4.2 (KIP-1161): no compaction and no retention, the
        # records kept until DeleteRecords removes them (as delete with infinite retention).
        _def("cleanup.policy", "LIST", "delete", ["log.cleanup.policy"],
             _list_of("compact", "delete", allow_empty=True)),
        _def("compression.type", "STRING", "producer", ["compression.type"],
             _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        _def("compression.gzip.level", "INT", -1, ["compression.gzip.level"], _gzip_level),
        _def("compression.lz4.level", "INT", 9, ["compression.lz4.level"], _int(1, 17)),
        _def("compression.zstd.level", "INT", 3, ["compression.zstd.level"], _int(-131072, 22)),
        _def("delete.retention.ms", "LONG", 86_400_000, ["log.cleaner.delete.retention.ms"], _long(0)),
        # Kafka 4.4's share-group dead letter queues (KIP-1191): accepted and described, no effect here.
        _def("errors.deadletterqueue.group.enable", "BOOLEAN", False, [], _boolean),
        _def("file.delete.delay.ms", "LONG", 60_000, ["log.segment.delete.delay.ms"], _long(0)),
        _def("flush.messages", "LONG", LONG_MAX, ["log.flush.interval.messages"], _long(1)),
        _def("flush.ms", "LONG", LONG_MAX,
             ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"], _long(0)),
        _def("follower.replication.throttled.replicas", "LIST", "", [], _throttled_replicas),
        _def("index.interval.bytes", "INT", 4096, ["log.index.interval.bytes"], _int(0)),
        _def("leader.replication.throttled.replicas", "LIST", "", [], _throttled_replicas),
        _def("local.retention.bytes", "LONG", -2, ["log.local.retention.bytes"], _long(-2)),
        _def("local.retention.ms", "LONG", -2, ["log.local.retention.ms"], _long(-2)),
        _def("max.compaction.lag.ms", "LONG", LONG_MAX, ["log.cleaner.max.compaction.lag.ms"], _long(1)),
        # Kafka 4.4's bound on a batch's decompressed size; accepted and described (minibroker bounds
        # decompression at 64 times max.message.bytes: minibroker.protocol.records.validation).
        _def("max.decompressed.message.bytes", "INT", 2_147_483_639, [], _int(0)),
        _def("max.message.bytes", "INT", 1_048_588, ["message.max.bytes"], _int(0)),
        # One hour ahead at most, Kafka 4's default (KIP-1030): a producer's clock far ahead gets
        # INVALID_TIMESTAMP.
        _def("message.timestamp.after.max.ms", "LONG", 3_600_000,
             ["log.message.timestamp.after.max.ms"], _long(0)),
        _def("message.timestamp.before.max.ms", "LONG", LONG_MAX,
             ["log.message.timestamp.before.max.ms"], _long(0)),
        _def("message.timestamp.type", "STRING", "CreateTime", ["log.message.timestamp.type"],
             _one_of("CreateTime", "LogAppendTime")),
        _def("min.cleanable.dirty.ratio", "DOUBLE", 0.5, ["log.cleaner.min.cleanable.ratio"],
             _double(0.0, 1.0)),
        _def("min.compaction.lag.ms", "LONG", 0, ["log.cleaner.min.compaction.lag.ms"], _long(0)),
        _def("min.insync.replicas", "INT", 1, ["min.insync.replicas"], _int(1)),
        _def("preallocate", "BOOLEAN", False, ["log.preallocate"], _boolean),
        # Tiered storage (KIP-405) is not served: its topic configs are accepted and described.
        _def("remote.copy.lag.bytes", "LONG", -1, [], _long(-1)),
        _def("remote.copy.lag.ms", "LONG", 0, [], _long(0)),
        _def("remote.log.copy.disable", "BOOLEAN", False, [], _boolean),
        _def("remote.log.delete.on.disable", "BOOLEAN", False, [], _boolean),
        _def("remote.storage.enable", "BOOLEAN", False, [], _boolean),
        _def("retention.bytes", "LONG", -1, ["log.retention.bytes"], _long()),
        _def("retention.ms", "LONG", _WEEK_MS,
             ["log.retention.ms", ("log.retention.minutes", _M), ("log.retention.hours", _H)],
             _long(-1)),
        _def("segment.bytes", "INT", 1 << 30, ["log.segment.bytes"], _int(1024 * 1024)),
        _def("segment.index.bytes", "INT", 10 * 1024 * 1024, ["log.index.size.max.bytes"], _int(4)),
        _def("segment.jitter.ms", "LONG", 0,
             ["log.roll.jitter.ms", ("log.roll.jitter.hours", _H)], _long(0)),
        _def("segment.ms", "LONG", _WEEK_MS, ["log.roll.ms", ("log.roll.hours", _H)], _long(1)),
        _def("unclean.leader.election.enable", "BOOLEAN", False, ["unclean.leader.election.enable"],
             _boolean),
    ]
}

# Every broker property that supplies a topic config's default (the log.* keys storage reads).
BROKER_LOG_KEYS: frozenset[str] = frozenset(
    key for definition in TOPIC_CONFIGS.values() for key, _ in definition.broker_keys
)

# Broker keys whose type or range differs from their topic config's (KafkaConfig / ServerLogConfigs).
_BROKER_KEY_PARSERS: dict[str, Callable[[str], Any]] = {
    "log.retention.ms": _long(),  # any negative value means forever
    "log.retention.minutes": _int(),
    "log.retention.hours": _int(),
    "log.roll.ms": _long(1),
    "log.roll.hours": _int(1),
    "log.roll.jitter.hours": _int(0),
    "log.flush.scheduler.interval.ms": _long(),
}

# Broker keys whose default in Kafka's KafkaConfig is null: the next synonym (or the topic config's own
# default) applies. Every other broker log key defaults to its topic config's default, in its unit.
_BROKER_KEYS_WITHOUT_DEFAULT = frozenset({
    "log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.roll.jitter.ms", "log.flush.interval.ms",
})


def _broker_key_defaults() -> dict[str, str]:
    defaults: dict[str, str] = {}
    for definition in TOPIC_CONFIGS.values():
        for key, factor in definition.broker_keys:
            if key not in _BROKER_KEYS_WITHOUT_DEFAULT:
                defaults[key] = format_value(definition, definition.default // factor if factor != 1 else definition.default)
    return defaults


# Kafka's DescribeConfigs "staticDefaultConfigs" for the broker log keys: KafkaConfig's defaults as
# strings (log.retention.hours=168, log.segment.bytes=1073741824, ...).
BROKER_KEY_DEFAULTS: dict[str, str] = {}  # filled below, once format_value exists

# Broker keys that set one value in several units (Kafka's DynamicBrokerConfig.brokerConfigSynonyms):
# describing any of them lists all of them, highest precedence first.
_BROKER_KEY_GROUPS: tuple[tuple[str, ...], ...] = tuple(
    tuple(key for key, _ in definition.broker_keys)
    for definition in TOPIC_CONFIGS.values()
    if len(definition.broker_keys) > 1
)


def broker_synonyms(key: str) -> tuple[str, ...]:
    """The broker keys that set the same value as `key`, in precedence order (just `key` for most)."""
    for group in _BROKER_KEY_GROUPS:
        if key in group:
            return group
    return (key,)


# Kafka's testing-only override of segment.bytes: accepted as a topic override, never described.
INTERNAL_SEGMENT_BYTES = "internal.segment.bytes"
_parse_internal_segment_bytes = _int(1)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The effective configuration of one partition log (a topic's overrides over the broker's).

    Field names are the topic config names with '.' replaced by '_'.
    """

    cleanup_policy: str = "delete"  # "delete", "compact" or "compact,delete" (minibroker.storage.cleaner)
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86_400_000
    errors_deadletterqueue_group_enable: bool = False
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX  # never flush by count: rely on the OS page cache
    flush_ms: int = LONG_MAX  # never flush by time
    follower_replication_throttled_replicas: str = ""
    index_interval_bytes: int = 4096
    leader_replication_throttled_replicas: str = ""
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    max_compaction_lag_ms: int = LONG_MAX
    max_decompressed_message_bytes: int = 2_147_483_639
    max_message_bytes: int = 1_048_588
    message_timestamp_after_max_ms: int = 3_600_000
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_copy_lag_bytes: int = -1
    remote_copy_lag_ms: int = 0
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    remote_storage_enable: bool = False
    retention_bytes: int = -1  # -1: no size limit
    retention_ms: int = _WEEK_MS  # -1: keep forever
    segment_bytes: int = 1 << 30
    segment_index_bytes: int = 10 * 1024 * 1024
    segment_jitter_ms: int = 0
    segment_ms: int = _WEEK_MS
    unclean_leader_election_enable: bool = False

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_broker(cls, props: Mapping[str, str]) -> LogConfig:
        """The broker-wide defaults from broker properties (server.properties keys).

        Keys that are not log settings are ignored. For a topic config with several broker keys the
        first one set wins (log.retention.ms, then .minutes, then .hours); a negative broker
        retention time means "forever" (-1), as in Kafka's KafkaConfig.logRetentionTimeMillis.
        """
        values: dict[str, Any] = {}
        for definition in TOPIC_CONFIGS.values():
            for key, factor in definition.broker_keys:
                if key not in props or props[key] is None:
                    continue
                parse = _BROKER_KEY_PARSERS.get(key, definition.parse)
                value = _parse_value(key, parse, props[key])
                if factor != 1:
                    value = value * factor
                if definition.name == "retention.ms" and value < 0:
                    value = -1
                values[definition.field] = value
                break
        return cls(**values)

    def with_topic_overrides(self, overrides: Mapping[str, str]) -> LogConfig:
        """This (broker-level) config with a topic's overrides applied; validates every override."""
        changes: dict[str, Any] = {}
        internal_segment_bytes = None
        for name, text in overrides.items():
            if name == INTERNAL_SEGMENT_BYTES:
                internal_segment_bytes = _parse_value(name, _parse_internal_segment_bytes, text, topic=True)
                continue
            definition = TOPIC_CONFIGS.get(name)
            if definition is None:
                raise ConfigError(name, "unknown topic config name", topic=True)
            changes[definition.field] = _parse(name, definition, text)
        if internal_segment_bytes is not None:
            changes["segment_bytes"] = internal_segment_bytes
        if changes.get("remote_storage_enable"):
            # Kafka's LogConfig.validateRemoteStorageOnlyIfSystemEnabled: there is no tiered storage.
            raise ConfigError("remote.storage.enable", "Tiered Storage functionality is disabled in the broker. "
                              "Topic cannot be configured with remote log storage.", topic=True)
        config = dataclasses.replace(self, **changes) if changes else self
        if ("min_compaction_lag_ms" in changes or "max_compaction_lag_ms" in changes) and (
                config.min_compaction_lag_ms > config.max_compaction_lag_ms):
            # Kafka's LogConfig.validateValues, on the topic's effective values.
            raise ConfigError("min.compaction.lag.ms",
                              f"conflict topic config setting min.compaction.lag.ms ({config.min_compaction_lag_ms}) "
                              f"> max.compaction.lag.ms ({config.max_compaction_lag_ms})", topic=True)
        return config

    def value_of(self, name: str) -> Any:
        return getattr(self, TOPIC_CONFIGS[name].field)


def _parse_value(key: str, parse: Callable[[str], Any], text: Any, *, topic: bool = False) -> Any:
    if not isinstance(text, str):
        raise ConfigError(key, f"value {text!r} is not a string", topic=topic)
    try:
        return parse(text)
    except ValueError as exc:
        raise ConfigError(key, str(exc), topic=topic) from None


def _parse(key: str, definition: TopicConfigDef, text: Any) -> Any:
    """A topic config's value (an override)."""
    if text is None:
        raise ConfigError(key, "a null value is not allowed", topic=True)
    return _parse_value(key, definition.parse, text, topic=True)


def format_value(definition: TopicConfigDef, value: Any) -> str:
    """A typed value the way Kafka's DescribeConfigs shows it."""
    if definition.type == "BOOLEAN":
        return "true" if value else "false"
    if definition.type == "DOUBLE":
        return repr(float(value))
    return str(value)


BROKER_KEY_DEFAULTS.update(_broker_key_defaults())


class ConfigEntry(NamedTuple):
    """One row of DescribeConfigs for a topic."""

    name: str
    value: str
    source: int  # SOURCE_TOPIC_CONFIG, SOURCE_DYNAMIC_*, SOURCE_STATIC_BROKER_CONFIG or SOURCE_DEFAULT_CONFIG
    is_default: bool  # for DescribeConfigs v0
    config_type: int  # DescribeConfigs v3 ConfigType id
    broker_key: str | None  # the synonym that supplies the default, if any
    synonyms: tuple[tuple[str, str | None, int], ...] = ()  # (name, value, source), highest precedence first
    read_only: bool = False
    sensitive: bool = False


# Where broker-level values come from, highest precedence first: (source id, {key: value}). Kafka's
# are the dynamic per-broker configs, the dynamic cluster defaults, the static properties and
# KafkaConfig's defaults.
BrokerLevels = Sequence[tuple[int, Mapping[str, str]]]
DEFAULT_LEVELS: BrokerLevels = ((SOURCE_DEFAULT_CONFIG, BROKER_KEY_DEFAULTS),)


def config_synonyms(key: str, levels: BrokerLevels) -> list[tuple[str, str | None, int]]:
    """Kafka's ConfigHelper.configSynonyms for broker key `key`: every level's value of each of its
    synonyms, level by level, then everything before the first entry named `key` dropped. So a
    topic's retention.ms lists nothing unless log.retention.ms itself is set somewhere (Kafka's
    answer too: log.retention.hours=168 is dropped, being listed before log.retention.ms)."""
    found: list[tuple[str, str | None, int]] = [
        (name, level[name], source) for source, level in levels for name in broker_synonyms(key) if name in level]
    for i, (name, _, _) in enumerate(found):
        if name == key:
            return found[i:]
    return []


def describe(config: LogConfig, overrides: Mapping[str, str], levels: BrokerLevels = DEFAULT_LEVELS) -> list[ConfigEntry]:
    """All known topic configs of a topic whose effective config is `config`, sorted by name, each
    with its synonyms and the source of the value (the first synonym's), as Kafka's
    ConfigHelper.createTopicConfigEntry: the topic's override, then its broker key's values."""
    entries = []
    for name in sorted(TOPIC_CONFIGS):
        definition = TOPIC_CONFIGS[name]
        value = format_value(definition, config.value_of(name))
        synonyms = config_synonyms(definition.broker_key, levels) if definition.broker_key else []
        if name in overrides:
            synonyms.insert(0, (name, value, SOURCE_TOPIC_CONFIG))
        source = synonyms[0][2] if synonyms else SOURCE_DEFAULT_CONFIG
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=source,
                is_default=source == SOURCE_DEFAULT_CONFIG,
                config_type=CONFIG_TYPE_IDS[definition.type],
                broker_key=definition.broker_key,
                synonyms=tuple(synonyms),
            )
        )
    return entries


# ---------------------------------------------------------------------------------------------
# Topic names (Kafka's org.apache.kafka.common.internals.Topic).

MAX_TOPIC_NAME_LENGTH = 249
# Kafka's Topic.INTERNAL_TOPICS: the topics Metadata marks is_internal and that clients may not write.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


class InvalidTopicError(ApiError, ValueError):
    """An illegal topic name, or one that collides with an existing topic: INVALID_TOPIC_EXCEPTION."""

    error_code = ErrorCode.invalid_topic_exception


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless `name` is a legal Kafka topic name."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("Topic name is invalid: the empty string is not allowed")
    if name in (".", ".."):
        raise InvalidTopicError(f"Topic name is invalid: '{name}' is not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is invalid: the length of '{name}' is longer than the max allowed length "
            f"{MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(
            f"Topic name is invalid: '{name}' contains one or more characters other than ASCII "
            "alphanumerics, '.', '_' and '-'"
        )


def unify_collision_chars(name: str) -> str:
    """Kafka's Topic.unifyCollisionChars: '.' and '_' collide in metric names."""
    return name.replace(".", "_")


def is_internal(name: str) -> bool:
    """Kafka's Topic.isInternal: one of Kafka's own topics (not merely a name starting with '__')."""
    return name in INTERNAL_TOPICS


def has_collision(a: str, b: str) -> bool:
    return unify_collision_chars(a) == unify_collision_chars(b)
