"""DescribeConfigs (key 32), v1-v4: topic (resource type 2), broker (4), group (32,
minibroker.group_configs) and client telemetry subscription (CLIENT_METRICS, 16; KIP-714) configs, as
Kafka's ConfigHelper answers them.

Every value carries its source and, when asked (include_synonyms), its synonyms in precedence order:
a topic's own override (DYNAMIC_TOPIC_CONFIG), then its broker key's values from this broker's
dynamic configs (DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic defaults
(DYNAMIC_DEFAULT_BROKER_CONFIG), the broker's properties (STATIC_BROKER_CONFIG) and the built-in
defaults (DEFAULT_CONFIG); the source of a value is its first synonym's (minibroker.storage.config.describe
has Kafka's rule, quirks included). v3+ adds each config's type.

The broker resource named by this broker's id lists every broker setting with its effective value
(passwords never: is_sensitive with a null value), read_only for those that cannot change at runtime;
the resource named "" lists the cluster-wide dynamic defaults only, as Kafka. Any other name is
INVALID_REQUEST. configuration_keys filters (null or empty: everything).

Authorization (Kafka's ConfigHelper): DESCRIBE_CONFIGS on the resource (the cluster for BROKER and
BROKER_LOGGER), else it is answered CLUSTER_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED or
GROUP_AUTHORIZATION_FAILED with Kafka's message and no configs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.config import BROKER_CONFIGS
from minibroker.config_admin import config_authorization_error
from minibroker.dynamic_config import DYNAMIC_KEYS, STATIC_DEFAULTS
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import (
    BROKER_LOG_KEYS,
    CONFIG_TYPE_IDS,
    SOURCE_DEFAULT_CONFIG,
    SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
    TOPIC_CONFIGS,
    InvalidTopicError,
    config_synonyms,
    describe,
    validate_topic_name,
)

if TYPE_CHECKING:
    from minibroker.context import RequestContext

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SOURCE_CLIENT_METRICS_CONFIG = 9  # Kafka's DescribeConfigsResponse.ConfigSource.CLIENT_METRICS_CONFIG
CONFIG_TYPE_INT, CONFIG_TYPE_LIST = 3, 7
# Kafka's Errors' default messages, which DescribeConfigs answers a refused resource with.
_DENIED_MESSAGES = {ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
                    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
                    ErrorCode.group_authorization_failed: "Group authorization failed."}
CONFIG_TYPE_UNKNOWN = 0
_INT_BROKER_KEYS = {"log.retention.minutes", "log.retention.hours", "log.roll.hours", "log.roll.jitter.hours"}


def _synonyms(synonyms, include: bool) -> list[dict]:
    return [{"name": n, "value": v, "source": s} for n, v, s in synonyms] if include else []


def topic_config_entries(ctx: RequestContext, info, include_synonyms: bool = False) -> list[dict]:
    return [
        {
            "name": entry.name,
            "value": entry.value,
            "read_only": entry.read_only,
            "is_default": entry.is_default,
            "config_source": entry.source,
            "is_sensitive": entry.sensitive,
            "synonyms": _synonyms(entry.synonyms, include_synonyms),
            "config_type": entry.config_type,
            "documentation": None,
        }
        for entry in describe(info.config, info.overrides, ctx.configs.levels())
    ]


def _broker_config_type(name: str) -> int:
    key = BROKER_CONFIGS.get(name)
    if key is not None:
        parse = key.parse.__name__
        return CONFIG_TYPE_IDS[{"_int": "INT", "_bool": "BOOLEAN", "_float": "DOUBLE"}.get(parse, "STRING")]
    if name in _INT_BROKER_KEYS:
        return CONFIG_TYPE_IDS["INT"]
    for definition in TOPIC_CONFIGS.values():
        if any(name == k for k, _ in definition.broker_keys):
            return CONFIG_TYPE_IDS[definition.type]
    return CONFIG_TYPE_UNKNOWN


def broker_config_entries(ctx: RequestContext, per_broker: bool, include_synonyms: bool = False) -> list[dict]:
    """Kafka's ConfigHelper.createBrokerConfigEntry over every setting (per_broker) or over the
    cluster-wide dynamic defaults only."""
    dynamic = ctx.configs
    levels = dynamic.levels()
    effective = dynamic.effective_props()
    if per_broker:
        names = set(BROKER_CONFIGS) | BROKER_LOG_KEYS | set(effective)
    else:
        names = set(dynamic.cluster_default)
    entries = []
    for name in sorted(names):
        synonyms = config_synonyms(name, levels)
        if not per_broker:
            synonyms = [s for s in synonyms if s[2] == SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG]
        sensitive = name in BROKER_CONFIGS and BROKER_CONFIGS[name].sensitive
        if per_broker:
            value = effective.get(name, STATIC_DEFAULTS.get(name))
        else:
            value = dynamic.cluster_default[name]
        source = synonyms[0][2] if synonyms else SOURCE_DEFAULT_CONFIG
        entries.append({
            "name": name,
            "value": None if sensitive else value,
            "read_only": name not in DYNAMIC_KEYS and (name in BROKER_CONFIGS or name in BROKER_LOG_KEYS),
            "is_default": source == SOURCE_DEFAULT_CONFIG,
            "config_source": source,
            "is_sensitive": sensitive,
            "synonyms": _synonyms([(n, None if sensitive else v, s) for n, v, s in synonyms], include_synonyms),
            "config_type": _broker_config_type(name),
            "documentation": None,
        })
    return entries


def client_metrics_entries(ctx: RequestContext, name: str) -> list[dict]:
    """A client telemetry subscription's three keys (KIP-714): its values, or the defaults (also for
    a name with no subscription, as Kafka answers it)."""
    from minibroker.telemetry import DEFAULT_INTERVAL_MS

    configs = ctx.client_metrics.configs.get(name, {})
    defaults = {"metrics": "", "interval.ms": str(DEFAULT_INTERVAL_MS), "match": ""}
    types = {"metrics": CONFIG_TYPE_LIST, "interval.ms": CONFIG_TYPE_INT, "match": CONFIG_TYPE_LIST}
    return [{
        "name": key,
        "value": configs.get(key, default),
        "read_only": False,
        "is_default": key not in configs,
        "config_source": SOURCE_CLIENT_METRICS_CONFIG if key in configs else SOURCE_DEFAULT_CONFIG,
        "is_sensitive": False,
        "synonyms": (),
        "config_type": types[key],
        "documentation": None,
    } for key, default in defaults.items()]


def _broker_resource_error(ctx: RequestContext, name: str) -> str | None:
    if name == "":
        return None
    try:
        node = int(name)
    except ValueError:
        return f"Broker id must be an integer, but it is: {name}"
    if node != ctx.node_id:
        return f"Unexpected broker id, expected {ctx.node_id} or empty string, but received {name}"
    return None


@handler(32, 1, 4, client_throttles_from=2)
async def describe_configs(ctx: RequestContext, request: Any) -> Reply:
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    results = []
    for resource in request.resources:
        keys = resource.configuration_keys
        name = resource.resource_name
        result = {"error_code": ErrorCode.none, "error_message": None, "resource_type": resource.resource_type,
                  "resource_name": name, "configs": ()}
        denied = config_authorization_error(ctx, resource.resource_type, name, AclOperation.DESCRIBE_CONFIGS)
        if denied is not None:
            result.update(error_code=denied, error_message=_DENIED_MESSAGES[denied])
        elif resource.resource_type == TOPIC:
            info = ctx.logs.topic(name)
            try:
                validate_topic_name(name)
            except InvalidTopicError as exc:
                result.update(error_code=ErrorCode.invalid_topic_exception, error_message=str(exc))
            else:
                if info is None:
                    result.update(error_code=ErrorCode.unknown_topic_or_partition, error_message=f"Topic {name} does not exist")
                else:
                    result["configs"] = topic_config_entries(ctx, info, include_synonyms)
        elif resource.resource_type == BROKER:
            error = _broker_resource_error(ctx, name)
            if error is not None:
                result.update(error_code=ErrorCode.invalid_request, error_message=error)
            else:
                result["configs"] = broker_config_entries(ctx, name != "", include_synonyms)
        elif resource.resource_type == GROUP:
            if not name:
                result.update(error_code=ErrorCode.invalid_request, error_message="Group name must not be empty.")
            else:
                result["configs"] = ctx.group_configs.describe(name, include_synonyms)
        elif resource.resource_type == CLIENT_METRICS:
            result["configs"] = client_metrics_entries(ctx, name)
        else:
            result.update(error_code=ErrorCode.invalid_request, error_message=f"Unsupported resource type: {resource.resource_type}")
        if keys and result["configs"]:
            result["configs"] = [c for c in result["configs"] if c["name"] in keys]
        results.append(result)
    return Reply({"results": results})
