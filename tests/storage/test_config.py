"""LogConfig: Kafka's defaults, broker keys and their precedence, topic overrides and their
validation, DescribeConfigs rows, topic-name rules."""

from __future__ import annotations

import pytest

from minibroker.storage.config import (
    BROKER_KEY_DEFAULTS,
    DEFAULT_LEVELS,
    INTERNAL_SEGMENT_BYTES,
    SOURCE_DYNAMIC_BROKER_CONFIG,
    SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
    SOURCE_DEFAULT_CONFIG,
    SOURCE_STATIC_BROKER_CONFIG,
    SOURCE_TOPIC_CONFIG,
    TOPIC_CONFIGS,
    ConfigError,
    InvalidTopicError,
    LogConfig,
    config_synonyms,
    describe,
    has_collision,
    validate_topic_name,
)


def test_defaults_are_kafkas():
    config = LogConfig.from_broker({})
    assert config == LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == 604800000
    assert config.retention_ms == 604800000
    assert config.retention_bytes == -1
    assert config.index_interval_bytes == 4096
    assert config.max_message_bytes == 1048588
    assert config.flush_messages == config.flush_ms == 9223372036854775807
    assert config.message_timestamp_type == "CreateTime"
    assert config.cleanup_policy == "delete"
    assert config.min_insync_replicas == 1
    for definition in TOPIC_CONFIGS.values():
        assert config.value_of(definition.name) == definition.default, definition.name


@pytest.mark.parametrize(
    "props, expected",
    [
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.minutes": "2", "log.retention.hours": "1"}, 120_000),
        ({"log.retention.ms": "5", "log.retention.minutes": "2", "log.retention.hours": "1"}, 5),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-5"}, -1),
    ],
)
def test_broker_retention_precedence(props, expected):
    assert LogConfig.from_broker(props).retention_ms == expected


def test_broker_keys():
    config = LogConfig.from_broker(
        {
            "log.segment.bytes": "2097152",
            "log.roll.hours": "2",
            "log.flush.interval.messages": "10",
            "log.flush.scheduler.interval.ms": "500",
            "log.index.interval.bytes": "100",
            "message.max.bytes": "2000000",
            "log.message.timestamp.type": "LogAppendTime",
            "log.retention.bytes": "12345",
            "num.partitions": "3",  # not a log setting: ignored
        }
    )
    assert config.segment_bytes == 2097152
    assert config.segment_ms == 7_200_000
    assert config.flush_messages == 10
    assert config.flush_ms == 500
    assert config.index_interval_bytes == 100
    assert config.max_message_bytes == 2000000
    assert config.log_append_time
    assert config.retention_bytes == 12345
    assert LogConfig.from_broker({"log.roll.ms": "10", "log.roll.hours": "2"}).segment_ms == 10
    assert LogConfig.from_broker({"log.flush.interval.ms": "7", "log.flush.scheduler.interval.ms": "500"}).flush_ms == 7


@pytest.mark.parametrize(
    "key, value",
    [
        ("log.segment.bytes", "1000"),  # below 1 MiB, as Kafka 4
        ("log.segment.bytes", "abc"),
        ("log.retention.hours", "1.5"),
        ("log.message.timestamp.type", "Wallclock"),
        ("message.max.bytes", "99999999999"),  # not an int32
    ],
)
def test_bad_broker_value_names_the_key(key, value):
    with pytest.raises(ConfigError) as info:
        LogConfig.from_broker({key: value})
    assert info.value.key == key
    assert key in str(info.value)
    assert info.value.error_code == 40


def test_topic_overrides():
    broker = LogConfig.from_broker({"log.retention.hours": "1"})
    config = broker.with_topic_overrides(
        {
            "retention.ms": "1000",
            "cleanup.policy": "compact, delete",
            "min.cleanable.dirty.ratio": "0.25",
            "preallocate": "TRUE",
            "message.timestamp.type": "LogAppendTime",
        }
    )
    assert config.retention_ms == 1000
    assert config.cleanup_policy == "compact,delete"
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.preallocate is True
    assert config.log_append_time
    assert broker.with_topic_overrides({}) is broker
    assert broker.with_topic_overrides({INTERNAL_SEGMENT_BYTES: "1000"}).segment_bytes == 1000


@pytest.mark.parametrize(
    "key, value, reason",
    [
        ("retention.ms", "-2", "at least -1"),
        ("segment.bytes", "100", "at least 1048576"),
        ("segment.ms", "0", "at least 1"),
        ("cleanup.policy", "shred", "not one of"),
        ("compression.type", "brotli", "not one of"),
        ("compression.gzip.level", "0", "gzip level"),
        ("min.insync.replicas", "0", "at least 1"),
        ("unclean.leader.election.enable", "yes", "boolean"),
        ("min.cleanable.dirty.ratio", "1.5", "between"),
        ("max.message.bytes", "ten", "not a number"),
        ("retention.bytes", None, "null"),
        ("no.such.config", "1", "unknown topic config"),
    ],
)
def test_bad_topic_override_names_the_key_and_reason(key, value, reason):
    with pytest.raises(ConfigError) as info:
        LogConfig().with_topic_overrides({key: value})
    assert info.value.key == key
    assert key in str(info.value) and reason in str(info.value)
    assert isinstance(info.value, ValueError)


def test_describe_sources_and_values():
    static = {"log.retention.hours": "1", "log.segment.bytes": "2097152"}
    broker = LogConfig.from_broker(static)
    overrides = {"retention.ms": "1000", "preallocate": "true"}
    levels = ((SOURCE_STATIC_BROKER_CONFIG, static), (SOURCE_DEFAULT_CONFIG, BROKER_KEY_DEFAULTS))
    rows = {e.name: e for e in describe(broker.with_topic_overrides(overrides), overrides, levels)}
    assert set(rows) == set(TOPIC_CONFIGS)
    assert (rows["retention.ms"].value, rows["retention.ms"].source) == ("1000", SOURCE_TOPIC_CONFIG)
    assert rows["retention.ms"].synonyms == (("retention.ms", "1000", SOURCE_TOPIC_CONFIG),)
    assert (rows["segment.bytes"].value, rows["segment.bytes"].source) == ("2097152", SOURCE_STATIC_BROKER_CONFIG)
    assert rows["segment.bytes"].synonyms == (("log.segment.bytes", "2097152", SOURCE_STATIC_BROKER_CONFIG),
                                              ("log.segment.bytes", "1073741824", SOURCE_DEFAULT_CONFIG))
    assert rows["segment.bytes"].broker_key == "log.segment.bytes"
    assert (rows["flush.ms"].value, rows["flush.ms"].source) == ("9223372036854775807", SOURCE_DEFAULT_CONFIG)
    assert rows["flush.ms"].is_default and not rows["retention.ms"].is_default
    assert rows["preallocate"].value == "true"
    assert rows["min.cleanable.dirty.ratio"].value == "0.5"
    assert rows["retention.ms"].broker_key == "log.retention.ms"
    assert rows["retention.ms"].config_type == 5  # LONG
    assert INTERNAL_SEGMENT_BYTES not in rows


def test_synonyms_follow_kafkas_config_helper():
    """Kafka's ConfigHelper.configSynonyms: each level's values of the key's synonyms, then all
    before the first entry named for the key itself dropped (DynamicBrokerReconfigurationTest)."""
    static = {"log.retention.ms": "1680000000", "log.retention.hours": "168"}
    levels = ((SOURCE_DYNAMIC_BROKER_CONFIG, {}), (SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG, {}),
              (SOURCE_STATIC_BROKER_CONFIG, static), (SOURCE_DEFAULT_CONFIG, BROKER_KEY_DEFAULTS))
    assert [(n, s) for n, _, s in config_synonyms("log.retention.ms", levels)] == [
        ("log.retention.ms", SOURCE_STATIC_BROKER_CONFIG), ("log.retention.hours", SOURCE_STATIC_BROKER_CONFIG),
        ("log.retention.hours", SOURCE_DEFAULT_CONFIG)]
    assert [(n, s) for n, _, s in config_synonyms("log.retention.hours", levels)] == [
        ("log.retention.hours", SOURCE_STATIC_BROKER_CONFIG), ("log.retention.hours", SOURCE_DEFAULT_CONFIG)]
    assert config_synonyms("log.roll.hours", levels) == [("log.roll.hours", "168", SOURCE_DEFAULT_CONFIG)]
    # A topic's retention.ms when only log.retention.hours is set: Kafka lists no synonym and says
    # DEFAULT_CONFIG, though the value comes from the hours.
    hours_only = {"log.retention.hours": "1"}
    rows = {e.name: e for e in describe(LogConfig.from_broker(hours_only), {},
                                        ((SOURCE_STATIC_BROKER_CONFIG, hours_only),) + DEFAULT_LEVELS)}
    assert (rows["retention.ms"].value, rows["retention.ms"].source, rows["retention.ms"].synonyms) == (
        "3600000", SOURCE_DEFAULT_CONFIG, ())
    dynamic = {"log.retention.ms": "5"}
    rows = {e.name: e for e in describe(LogConfig.from_broker(dynamic), {},
                                        ((SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG, dynamic),) + DEFAULT_LEVELS)}
    assert (rows["retention.ms"].value, rows["retention.ms"].source) == ("5", SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_cross_field_checks_are_kafkas():
    with pytest.raises(ConfigError) as conflict:
        LogConfig().with_topic_overrides({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert conflict.value.key == "min.compaction.lag.ms" and "(10) > max.compaction.lag.ms (5)" in str(conflict.value)
    LogConfig().with_topic_overrides({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"})
    with pytest.raises(ConfigError) as tiered:
        LogConfig().with_topic_overrides({"remote.storage.enable": "true"})
    assert tiered.value.key == "remote.storage.enable" and "Tiered Storage" in str(tiered.value)
    assert not LogConfig().with_topic_overrides({"remote.storage.enable": "false"}).remote_storage_enable


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "__consumer_offsets", "x" * 249, "..a", "-"])
def test_valid_topic_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a/b", "a b", "é", "a\x00", "a:b"])
def test_invalid_topic_names(name):
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name(name)
    assert info.value.error_code == 17


def test_collision_rule():
    assert has_collision("a.b", "a_b")
    assert has_collision("a.b_c", "a_b.c")
    assert not has_collision("a.b", "a-b")


def test_an_empty_cleanup_policy_is_valid():
    # Kafka 4.2+ (KIP-1161): an empty cleanup.policy is neither compact nor delete by retention.
    config = LogConfig().with_topic_overrides({"cleanup.policy": ""})
    assert config.cleanup_policy == ""
