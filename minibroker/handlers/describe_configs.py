"""DescribeConfigs (key 32), v1-v4: topic (resource type 2) and broker (4) configs.

Topic configs show every known key with its effective value and source (DYNAMIC_TOPIC_CONFIG for an
override, STATIC_BROKER_CONFIG when the broker's properties set it, DEFAULT_CONFIG otherwise), with
synonyms when asked (v1+) and types (v3+). The broker resource shows the broker settings and the
log.* defaults; its name must be this broker's id or empty. configuration_keys filters.
"""

from minibroker.handlers import handler
from minibroker.handlers.common import INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION
from storage.config import describe

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 4, 5
CONFIG_TYPE_STRING = 2


def topic_config_entries(broker, info, include_synonyms: bool = False) -> list[dict]:
    entries = []
    for entry in describe(info.config, info.overrides):
        synonyms = []
        if include_synonyms:
            if entry.source == 1:
                synonyms.append({"name": entry.name, "value": entry.value, "source": 1})
            if entry.broker_key and entry.broker_key in broker.config.props:
                synonyms.append({"name": entry.broker_key, "value": broker.config.props[entry.broker_key], "source": SOURCE_STATIC_BROKER})
        entries.append({
            "name": entry.name,
            "value": entry.value,
            "read_only": entry.read_only,
            "is_default": entry.is_default,
            "config_source": entry.source,
            "is_sensitive": entry.sensitive,
            "synonyms": synonyms,
            "config_type": entry.config_type,
            "documentation": None,
        })
    return entries


def broker_config_entries(broker) -> list[dict]:
    rows = [(name, value, is_default) for name, value, is_default in broker.config.describe()]
    shown = {name for name, _, _ in rows}
    for entry in describe(broker.log_config, {}):
        if entry.broker_key and entry.broker_key not in shown:
            value = broker.config.props.get(entry.broker_key, entry.value)
            rows.append((entry.broker_key, value, entry.broker_key not in broker.config.props))
            shown.add(entry.broker_key)
    return [
        {
            "name": name,
            "value": value,
            "read_only": True,
            "is_default": is_default,
            "config_source": SOURCE_DEFAULT if is_default else SOURCE_STATIC_BROKER,
            "is_sensitive": value is None,
            "synonyms": (),
            "config_type": CONFIG_TYPE_STRING,
            "documentation": None,
        }
        for name, value, is_default in sorted(rows)
    ]


@handler(32, 1, 4)
async def describe_configs(ctx, request):
    broker = ctx.broker
    results = []
    for resource in request.resources:
        keys = resource.configuration_keys
        result = {"error_code": 0, "error_message": None, "resource_type": resource.resource_type,
                  "resource_name": resource.resource_name, "configs": ()}
        if resource.resource_type == TOPIC:
            info = broker.logs.topic(resource.resource_name)
            if info is None:
                result.update(error_code=UNKNOWN_TOPIC_OR_PARTITION, error_message=f"Topic {resource.resource_name} does not exist")
            else:
                result["configs"] = topic_config_entries(broker, info, getattr(request, "include_synonyms", False))
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.node_id)):
                result.update(error_code=INVALID_REQUEST, error_message=f"Unexpected broker id, expected {broker.node_id} or empty string, but received {resource.resource_name}")
            else:
                result["configs"] = broker_config_entries(broker)
        else:
            result.update(error_code=INVALID_REQUEST, error_message=f"Unsupported resource type {resource.resource_type}")
        if keys is not None and result["configs"]:
            result["configs"] = [c for c in result["configs"] if c["name"] in keys]
        results.append(result)
    return {"throttle_time": 0, "results": results}
