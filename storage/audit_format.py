"""The audit event: the contract between the broker's audit stream and the pipeline that reads it.

The broker (`minibroker.audit.AuditLog`, opt-in with `audit.enable`) records ONE event per quota
decision: per produced partition batch, per fetched partition, per InitProducerId; and its quota
configuration, at start and at each change (below). Events are stored
as records of the internal topic `__minibroker_audit` (partition 0), in ordinary uncompressed v2
batches, so any Kafka client can consume them and `pipeline/` can read the data directory directly:

* key: the principal, UTF-8 (`b"User:alice"`);
* value: one compact JSON object, UTF-8, with exactly the fields below;
* record timestamp: the time the batch was flushed (the event's own time is `ts`).

| field | type | meaning |
|---|---|---|
| `ts` | long | ms since the epoch: the exact `now_ms` the broker passed to its quota decisions |
| `principal` | string | `"User:alice"` (`"User:ANONYMOUS"` without authentication) |
| `client_id` | string | the request header's client id (`""` when absent) |
| `listener` | string | the listener the connection came in on (`"PLAINTEXT"`) |
| `api` | string | `"Produce"`, `"Fetch"`, `"InitProducerId"` (and `"QuotaConfig"`, `"AlterClientQuotas"`: below) |
| `api_key` | int | 0, 1, 22 (-1, 49) |
| `api_version` | int | the request's version |
| `topic` | string or null | the partition's topic; null for InitProducerId |
| `partition` | int | the partition; -1 when none |
| `bytes` | long | Produce: the partition's record bytes; Fetch: the bytes returned; else 0 |
| `records` | int | records in the produced batch (or returned); else 0 |
| `producer_id` | long | the batch's producer id (Produce), the id handed out (InitProducerId); -1 if none |
| `producer_epoch` | int | its epoch; -1 if none |
| `error_code` | int | the partition's (or response's) Kafka error code; 0 = NONE |
| `throttle_time_ms` | int | the throttle time the broker decided for this request (0 = none) |
| `throttle_quota` | string | which quota set it: `""`, `"producer_byte_rate"`, `"consumer_byte_rate"`, `"request_percentage"`, `"producer_ids_rate"`; `"producer_ids_rate:held"` for a batch refused because an earlier batch of its producer id to the same partition was throttled and has not come back yet (the quota is not asked) |
| `pid_new` | boolean or null | Produce with a producer id under a `producer_ids_rate`: true when the PID quota saw the PID as new (admitted or rejected), false when known; null when not tracked |

Quota-configuration events. The broker also records its client-quota configuration, so a reader
knows which quotas made the decisions it sees, and when they changed: one event at start (`api`
`"QuotaConfig"`, `api_key` -1, `principal`, `client_id` and `listener` `""`, `api_version` -1): the
whole configuration; and one per AlterClientQuotas that changes something (`api` `"AlterClientQuotas"`,
`api_key` 49, the requester's `principal`, `client_id`, `listener` and `api_version`): the entities
it altered. Their decision fields keep the defaults (`topic` null, `partition` -1, counts 0, ids -1,
`throttle_quota` ""). Two more fields, present only in these events:

| field | type | meaning |
|---|---|---|
| `quotas` | array of objects | one `{"entity": {TYPE: NAME}, "values": {KEY: VALUE}}` per quota entity: TYPE `"user"`, `"client-id"` or `"ip"`, NAME null for the default (`{"user": null}` is the user default); VALUE a double. At start: every configured entity; at AlterClientQuotas: each entity the request changed, with its values after the change (`{}` when its last key was removed) |
| `quota_settings` | object | the broker settings the quotas are measured with, as doubles: `producer.id.quota.window.size.seconds`, `producer.id.quota.cache.layer.count`, `producer.id.quota.cache.false.positive.rate`, `quota.window.num`, `quota.window.size.seconds`, `producer.id.expiration.ms` (`QUOTA_SETTING_KEYS`) |

A start event also means the broker (re)started: its quota managers began empty then (the
producer-id quota's admission counts and Bloom layers live in memory only; producer state survives).

Replay contract (what `minibroker.pipeline.replay` relies on to reproduce the broker's decisions exactly): the
broker calls `ProducerIdQuotaManager.track(user, producer_id, ts)` for exactly the Produce events with
`producer_id >= 0` (transactional batches included: KIP-98's are appended after the quota like any
batch with a producer id; except batches held back behind a throttled earlier one, `throttle_quota`
HELD_BY_PID_QUOTA),
once per event, in the order the events are recorded, with `user` = the principal
without its `User:` prefix; and events are recorded in the order the decisions were made. A
quota-configuration event is recorded when its change takes effect: the decisions recorded after it
were made under it.

Pure: no I/O, no clock. Both the broker and the pipeline import this module.
"""

from __future__ import annotations

import json
from typing import Any, Final

from minibroker.protocol.errors import ErrorCode

__all__ = [
    "AUDIT_FIELDS",
    "AUDIT_FIELD_NAMES",
    "AUDIT_TOPIC",
    "HELD_BY_PID_QUOTA",
    "REFUSED_BEFORE_PID_QUOTA",
    "API_FETCH",
    "API_INIT_PRODUCER_ID",
    "API_PRODUCE",
    "API_QUOTA_CONFIG",
    "API_ALTER_CLIENT_QUOTAS",
    "QUOTA_CONFIG_FIELDS",
    "QUOTA_SETTING_KEYS",
    "THROTTLE_QUOTAS",
    "audit_event",
    "decode_event",
    "encode_event",
    "quota_config_event",
    "user_of",
]

AUDIT_TOPIC: Final = "__minibroker_audit"

# (name, type, nullable). Types: "long" (int64), "int" (int32), "string", "boolean".
AUDIT_FIELDS: Final[tuple[tuple[str, str, bool], ...]] = (
    ("ts", "long", False),
    ("principal", "string", False),
    ("client_id", "string", False),
    ("listener", "string", False),
    ("api", "string", False),
    ("api_key", "int", False),
    ("api_version", "int", False),
    ("topic", "string", True),
    ("partition", "int", False),
    ("bytes", "long", False),
    ("records", "int", False),
    ("producer_id", "long", False),
    ("producer_epoch", "int", False),
    ("error_code", "int", False),
    ("throttle_time_ms", "int", False),
    ("throttle_quota", "string", False),
    ("pid_new", "boolean", True),
)
AUDIT_FIELD_NAMES: Final = tuple(name for name, _, _ in AUDIT_FIELDS)

THROTTLE_QUOTAS: Final = (
    "",
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "producer_ids_rate",
    "producer_ids_rate:held",
)
# throttle_quota of a batch held back behind a throttled earlier batch of its producer id.
HELD_BY_PID_QUOTA: Final = "producer_ids_rate:held"

API_PRODUCE: Final = ("Produce", 0)
API_FETCH: Final = ("Fetch", 1)
API_INIT_PRODUCER_ID: Final = ("InitProducerId", 22)
# Quota-configuration events: at broker start, and for each AlterClientQuotas that changed something.
API_QUOTA_CONFIG: Final = ("QuotaConfig", -1)
API_ALTER_CLIENT_QUOTAS: Final = ("AlterClientQuotas", 49)

# The fields only quota-configuration events carry: (name, type). "quotas": array of
# {"entity": map<string, string|null>, "values": map<string, double>}; "quota_settings":
# map<string, double>.
QUOTA_CONFIG_FIELDS: Final = (("quotas", "quota_entries"), ("quota_settings", "settings"))
QUOTA_SETTING_KEYS: Final = (
    "producer.id.quota.window.size.seconds",
    "producer.id.quota.cache.layer.count",
    "producer.id.quota.cache.false.positive.rate",
    "quota.window.num",
    "quota.window.size.seconds",
    "producer.id.expiration.ms",
)

# Produce errors given before the producer-id quota is asked (the batch's PID is not tracked): none
# since transactional batches are accepted (KIP-98; before, INVALID_TXN_STATE was one).
REFUSED_BEFORE_PID_QUOTA: Final[frozenset[ErrorCode]] = frozenset()

_USER_PREFIX: Final = "User:"


def audit_event(
    *,
    ts: int,
    principal: str,
    client_id: str,
    listener: str,
    api: str,
    api_key: int,
    api_version: int,
    topic: str | None = None,
    partition: int = -1,
    bytes: int = 0,  # noqa: A002 - the field's name in the contract
    records: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    error_code: int = 0,
    throttle_time_ms: int = 0,
    throttle_quota: str = "",
    pid_new: bool | None = None,
) -> dict[str, Any]:
    """One event, every field present, in contract order (defaults for what does not apply)."""
    return {
        "ts": ts,
        "principal": principal,
        "client_id": client_id,
        "listener": listener,
        "api": api,
        "api_key": api_key,
        "api_version": api_version,
        "topic": topic,
        "partition": partition,
        "bytes": bytes,
        "records": records,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "error_code": error_code,
        "throttle_time_ms": throttle_time_ms,
        "throttle_quota": throttle_quota,
        "pid_new": pid_new,
    }


def quota_config_event(
    *,
    ts: int,
    quotas: list[dict[str, Any]],
    settings: dict[str, float],
    principal: str = "",
    client_id: str = "",
    listener: str = "",
    api_version: int = -1,
) -> dict[str, Any]:
    """A quota-configuration event: at start without a requester (`principal` ""), else an
    AlterClientQuotas by `principal`. `quotas`: [{"entity": {type: name or None}, "values": {key: value}}]."""
    api, api_key = API_QUOTA_CONFIG if not principal else API_ALTER_CLIENT_QUOTAS
    event = audit_event(ts=ts, principal=principal, client_id=client_id, listener=listener, api=api,
                        api_key=api_key, api_version=api_version)
    event["quotas"] = quotas
    event["quota_settings"] = settings
    return event


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode_event(event: dict[str, Any]) -> bytes:
    """The record value: compact JSON, UTF-8."""
    return _encoder.encode(event).encode()


def decode_event(value: bytes | bytearray | memoryview) -> dict[str, Any]:
    """A record value back to an event; a missing field reads as None (a quota-configuration event
    keeps its two extra fields). Raises ValueError on a value that is not a JSON object."""
    event = json.loads(bytes(value))
    if not isinstance(event, dict):
        raise ValueError(f"audit value is a JSON {type(event).__name__}, not an object")
    decoded = {name: event.get(name) for name in AUDIT_FIELD_NAMES}
    for name, _ in QUOTA_CONFIG_FIELDS:
        if name in event:
            decoded[name] = event[name]
    return decoded


def user_of(principal: str) -> str:
    """The quota user of a principal: "User:alice" -> "alice" (the `/config/users/<user>` name)."""
    return principal[len(_USER_PREFIX):] if principal.startswith(_USER_PREFIX) else principal
