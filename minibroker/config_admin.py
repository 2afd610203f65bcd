"""Config changes over the wire: what AlterConfigs (33) and IncrementalAlterConfigs (44) share.

Follows Kafka's split of the work: the broker's preprocessing (ConfigAdminManager.preprocess) and the
controller's persistence (ConfigurationControlManager, ControllerConfigurationValidator), which on a
combined node are one step here. Per resource, in Kafka's order:

1. a resource named twice in one request: INVALID_REQUEST "Each resource must appear at most once."
   (both copies); a config key twice: INVALID_REQUEST "Error due to duplicate config keys"; a null
   value (other than to DELETE): INVALID_REQUEST "Null value not supported for : k1, k2";
2. BROKER (4), named "" (the cluster-wide defaults) or by this broker's id (INVALID_REQUEST
   otherwise): the operations apply to that level's dynamic values (APPEND/SUBTRACT only to a LIST
   key, else INVALID_CONFIG), then minibroker.dynamic_config checks the result (read-only keys and
   bad values are INVALID_REQUEST, as Kafka);
3. TOPIC (2): "" is INVALID_REQUEST "Default topic resources are not allowed.", an illegal name
   INVALID_TOPIC_EXCEPTION; the operations apply to the topic's overrides (APPEND/SUBTRACT to a
   non-LIST key: INVALID_CONFIG "Can't APPEND to key X because its type is not LIST."), the result
   is validated as a whole (an unknown name or a bad value: INVALID_CONFIG naming the key), and only
   then must the topic exist (UNKNOWN_TOPIC_OR_PARTITION);
4. CLIENT_METRICS (16): a client telemetry subscription (KIP-714, minibroker.telemetry): `metrics`,
   `interval.ms`, `match`, checked as Kafka's ClientMetricsConfigs checks them; removing every key
   removes the subscription;
5. other resource types: INVALID_REQUEST (BROKER_LOGGER and GROUP configs are not kept here).

Before all but the first: ALTER_CONFIGS on the resource (the cluster for BROKER), else
CLUSTER_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED or GROUP_AUTHORIZATION_FAILED with no message.

A resource's changes apply all or none. validate_only checks everything and changes nothing. Applied
changes are in force before the response is sent: a topic's new retention, segment size, maximum
batch size or timestamp type governs its next append and retention pass, and is in its topic file;
a broker change reaches every topic without its own override and is in `broker-configs.json`.

APPEND adds the values not already present to the current list (the key's default when unset);
SUBTRACT removes them; both keep the list's order (Kafka's incrementalAlterConfigResource).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from minibroker.auth import AclOperation, ResourceType
from minibroker.dynamic_config import (
    KNOWN_KEYS,
    STATIC_DEFAULTS,
    BrokerConfigChangeError,
    check_against_topics,
)
from minibroker.group_configs import GroupConfigError
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import TOPIC_CONFIGS, ConfigError, InvalidTopicError, format_value, validate_topic_name
from minibroker.storage.errors import storage_error_message

if TYPE_CHECKING:
    from minibroker.context import RequestContext

log = logging.getLogger(__name__)

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


# Broker keys of Kafka's LIST type that this broker knows.
BROKER_LIST_KEYS = frozenset({"log.cleanup.policy", "listeners", "advertised.listeners", "sasl.enabled.mechanisms"})


def config_authorization_error(ctx: RequestContext, resource_type: int, name: str,
                               operation: AclOperation) -> ErrorCode | None:
    """The error a config resource is refused with when `operation` (DESCRIBE_CONFIGS, ALTER_CONFIGS) on it
    is not allowed (Kafka's ConfigHelper and configsAuthorizationApiError): BROKER, BROKER_LOGGER and
    CLIENT_METRICS ask the cluster, TOPIC and GROUP the topic or group. None: allowed (or a type the
    request is refused for anyway)."""
    if resource_type in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        return None if ctx.authorize_cluster(operation) else ErrorCode.cluster_authorization_failed
    if resource_type == TOPIC:
        return None if ctx.authorize(operation, ResourceType.TOPIC, name) else ErrorCode.topic_authorization_failed
    if resource_type == GROUP:
        return None if ctx.authorize(operation, ResourceType.GROUP, name) else ErrorCode.group_authorization_failed
    return None


class ConfigChangeError(Exception):
    def __init__(self, error_code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass(frozen=True)
class ConfigSchema:
    """What an edit needs to know of a resource type's keys."""

    is_list: Callable[[str], bool]
    default: Callable[[str], str | None]  # the key's built-in default, as a string
    not_a_list: Callable[[str, int], str]  # the message refusing APPEND/SUBTRACT to a key


# An edit turns a resource's current values into its new ones (or raises ConfigChangeError).
Edit = Callable[[Mapping[str, str], ConfigSchema], dict[str, str]]


def replace_all(configs: list[tuple[str, str]]) -> Edit:
    """Legacy AlterConfigs: the given keys become the resource's whole set (the rest are deleted)."""
    def edit(current, schema):
        return dict(configs)
    return edit


def incremental(ops: list[tuple[str, int, str | None]]) -> Edit:
    """IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT, one key each, in order."""
    def edit(current, schema):
        new = dict(current)
        for name, op, value in ops:
            if op == SET:
                new[name] = value
            elif op == DELETE:
                new.pop(name, None)
            elif op in (APPEND, SUBTRACT):
                if not schema.is_list(name):
                    raise ConfigChangeError(ErrorCode.invalid_config, schema.not_a_list(name, op))
                base = new.get(name, schema.default(name)) or ""
                parts = [part for part in base.split(",") if part]
                for item in value.split(","):
                    if op == APPEND and item not in parts:
                        parts.append(item)
                    elif op == SUBTRACT and item in parts:
                        parts.remove(item)
                new[name] = ",".join(parts)
            else:
                raise ConfigChangeError(ErrorCode.invalid_request, f"Unknown operations type {op}")
        return new
    return edit


def _topic_default(name: str) -> str | None:
    definition = TOPIC_CONFIGS.get(name)
    return format_value(definition, definition.default) if definition is not None else None


TOPIC_SCHEMA = ConfigSchema(
    is_list=lambda key: key in TOPIC_CONFIGS and TOPIC_CONFIGS[key].type == "LIST",
    default=_topic_default,
    not_a_list=lambda key, op: f"Can't {OP_NAMES[op]} to key {key} because its type is not LIST.",
)


def _broker_not_a_list(key: str, op: int) -> str:
    # Kafka's ConfigAdminManager.prepareIncrementalConfigs.
    if key not in KNOWN_KEYS:
        return f"Unknown config name: {key}"
    return f"Config value {OP_NAMES[op].lower()} is not allowed for config key: {key}"


BROKER_SCHEMA = ConfigSchema(
    is_list=lambda key: key in BROKER_LIST_KEYS,
    default=STATIC_DEFAULTS.get,
    not_a_list=_broker_not_a_list,
)


# Group configs are all numbers: none is a list.
GROUP_SCHEMA = ConfigSchema(
    is_list=lambda key: False,
    default=lambda key: None,
    not_a_list=lambda key, op: f"Can't {OP_NAMES[op]} to key {key} because its type is not LIST.",
)


def _check_request_shape(names: list[str], null_values: list[str]) -> None:
    if any(count > 1 for count in Counter(names).values()):
        raise ConfigChangeError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    if null_values:
        raise ConfigChangeError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(null_values))


def alter_request(ctx: RequestContext, request, incremental_ops: bool) -> list[dict]:
    """The response entries for an IncrementalAlterConfigs (incremental_ops) or AlterConfigs request."""
    resources = []
    for r in request.resources:
        if incremental_ops:
            nulls = [c.name for c in r.configs if c.value is None and c.config_operation != DELETE]
            edit = incremental([(c.name, c.config_operation, c.value) for c in r.configs])
        else:
            nulls = [c.name for c in r.configs if c.value is None]
            edit = replace_all([(c.name, c.value) for c in r.configs])
        resources.append((r.resource_type, r.resource_name, [c.name for c in r.configs], nulls, edit))
    return alter_resources(ctx, resources, bool(request.validate_only))


def alter_resources(ctx: RequestContext, resources: list[tuple[int, str, list[str], list[str], Edit]],
                    validate_only: bool) -> list[dict]:
    """Apply each resource's edit; one response entry per resource, in order. Each resource is
    (type, name, its config names, the names with a null value, its edit)."""
    counts = Counter((resource_type, name) for resource_type, name, *_ in resources)
    results = []
    for resource_type, name, names, null_values, edit in resources:
        message: str | None
        try:
            if counts[(resource_type, name)] > 1:
                raise ConfigChangeError(ErrorCode.invalid_request, "Each resource must appear at most once.")
            denied = config_authorization_error(ctx, resource_type, name, AclOperation.ALTER_CONFIGS)
            if denied is not None:
                raise ConfigChangeError(denied, None)
            _check_request_shape(names, null_values)
            if resource_type == TOPIC:
                _alter_topic(ctx, name, edit, validate_only)
            elif resource_type == BROKER:
                _alter_broker(ctx, name, edit, validate_only)
            elif resource_type == GROUP:
                _alter_group(ctx, name, edit, validate_only)
            elif resource_type == CLIENT_METRICS:
                _alter_client_metrics(ctx, name, edit, validate_only)
            else:
                raise ConfigChangeError(ErrorCode.invalid_request, f"Unknown resource type {resource_type}")
        except ConfigChangeError as exc:
            code, message = exc.error_code, exc.message
        except OSError as exc:  # the topic or broker-configs file could not be written: nothing changed
            log.error("altering the configs of %s failed: %s", name or "the cluster default", storage_error_message(exc))
            code, message = ErrorCode.kafka_storage_error, storage_error_message(exc)
        else:
            code, message = ErrorCode.none, None
        results.append({"error_code": code, "error_message": message, "resource_type": resource_type,
                        "resource_name": name})
    return results


def _alter_group(ctx: RequestContext, name: str, edit: Edit, validate_only: bool) -> None:
    """A group's configs (minibroker.group_configs): checked against the table and the broker's bounds."""
    if not name:
        raise ConfigChangeError(ErrorCode.invalid_request, "Group name must not be empty.")
    store = ctx.group_configs
    values = edit(store.overrides.get(name, {}), GROUP_SCHEMA)
    try:
        store.check(values)
    except GroupConfigError as exc:
        raise ConfigChangeError(ErrorCode(exc.error_code), exc.message) from None
    if not validate_only:
        store.replace(name, values)
        log.info("group %s: configs changed to %s", name, values)


def _alter_topic(ctx: RequestContext, name: str, edit: Edit, validate_only: bool) -> None:
    if name == "":
        raise ConfigChangeError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
    try:
        validate_topic_name(name)
    except InvalidTopicError as exc:
        raise ConfigChangeError(ErrorCode.invalid_topic_exception, str(exc)) from None
    logs = ctx.logs
    info = logs.topic(name)
    current = dict(info.overrides) if info is not None else {}
    overrides = edit(current, TOPIC_SCHEMA)
    for key in overrides:
        if key not in TOPIC_CONFIGS and key != "internal.segment.bytes":
            raise ConfigChangeError(ErrorCode.invalid_config, f"Unknown topic config name: {key}")
    try:
        logs.broker_config.with_topic_overrides(overrides)
    except ConfigError as exc:
        raise ConfigChangeError(ErrorCode.invalid_config, str(exc)) from None
    if info is None:
        raise ConfigChangeError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
    if validate_only or overrides == current:
        return
    logs.alter_topic_config(name, overrides, ctx.clock.now_ms())
    log.info("topic %s: configs changed to %s", name, overrides)


CLIENT_METRICS_SCHEMA = ConfigSchema(
    is_list=lambda key: key in ("metrics", "match"),
    default=lambda key: {"metrics": "", "interval.ms": "300000", "match": ""}.get(key),
    not_a_list=lambda key, op: f"Can't {OP_NAMES[op]} to key {key} because its type is not LIST.",
)


def _alter_client_metrics(ctx: RequestContext, name: str, edit: Edit, validate_only: bool) -> None:
    from minibroker.telemetry import SubscriptionError

    metrics = ctx.client_metrics
    configs = edit(metrics.configs.get(name, {}), CLIENT_METRICS_SCHEMA)
    try:
        metrics.set(name, configs, validate_only)
    except SubscriptionError as exc:
        raise ConfigChangeError(exc.error_code, exc.message) from None


def _alter_broker(ctx: RequestContext, name: str, edit: Edit, validate_only: bool) -> None:
    if name != "":
        try:
            node = int(name)
        except ValueError:
            raise ConfigChangeError(ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}") from None
        if node != ctx.node_id:
            raise ConfigChangeError(ErrorCode.invalid_request, f"Unexpected broker id, expected {ctx.node_id}, but received {name}")
    per_broker = name != ""
    dynamic = ctx.configs
    level = edit(dynamic.level(per_broker), BROKER_SCHEMA)
    try:
        new = dynamic.check(per_broker, level)
        check_against_topics(ctx.logs, new)
    except BrokerConfigChangeError as exc:
        raise ConfigChangeError(exc.error_code, exc.message) from None
    if validate_only:
        return
    dynamic.replace(per_broker, level)  # in force at once: its subscribers are told
    log.info("dynamic broker configs (%s) are now: %s", f"broker {name}" if per_broker else "cluster default",
             ", ".join(sorted(level)) or "none")
