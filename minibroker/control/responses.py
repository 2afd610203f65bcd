"""An API's response carrying one error code, built from the message schemas rather than by hand
per API: what a request pushed onto an error stack (minibroker.control.rules) is answered.

Kafka gives every request class a `getErrorResponse`; librdkafka's mock cluster and kfake answer a
pushed error per API by hand. Here the response is derived from the request and the response's kio
schema for any API and version:

- every array of the response that answers an array of the request (Produce's `responses` answer
  `topic_data`, their `partition_responses` answer `partition_data`; DescribeGroups' `groups` answer
  the request's list of group ids; FindCoordinator v4's `coordinators` its `coordinator_keys`) gets
  one entry per request entry, with the request's keys copied over (topic name or id, partition
  index, group id, coordinator key, resource name) and the error in its `error_code`;
- the top-level `error_code`, where the response has one, carries it too, except Fetch's (the
  fetch session's error, KIP-227: a client reading it ignores the partitions, so an error pushed on
  Fetch is answered per partition as a leader would);
- the other fields take the schema's defaults, else -1 for ids, epochs, offsets and ports (Kafka's
  "unknown") and zero or empty values.

Metadata answers each requested topic (LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, ...), with
the brokers; from v13 REBOOTSTRAP_REQUIRED, and any code when the request names no topic, is the
top-level error alone (KIP-1102: it sends a Kafka 4 client back to its bootstrap servers).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import typing
import uuid
from types import NoneType, UnionType
from typing import Any

FETCH_KEY = 1
METADATA_KEY = 3
REBOOTSTRAP_REQUIRED = 129

# Request and response fields that name what an entry is about, by what they name: an entry of the
# response takes these values from the request entry it answers.
KEY_KINDS = {
    "name": "topic", "topic": "topic", "topic_name": "topic",
    "topic_id": "topic_id",
    "partition": "partition", "partition_index": "partition", "index": "partition", "partition_id": "partition",
    "group_id": "group", "key": "key",
    "transactional_id": "transactional_id",
    "member_id": "member", "group_instance_id": "instance",
    "resource_type": "resource_type", "resource_name": "resource_name",
    "user": "topic",  # AlterUserScramCredentials' results answer the request entries' `name`
}
# A request's list of plain values (DescribeGroups' `groups`, AddPartitionsToTxn v3's partitions):
# which key kind of the response entry each value fills, by the value's type.
STRING_KINDS = ("topic", "group", "key", "transactional_id", "resource_name", "member")
INT_KINDS = ("partition",)
# Integer fields whose "unknown" is -1 in Kafka's error responses.
MINUS_ONE_HINTS = ("id", "epoch", "offset", "port", "leader", "watermark", "generation", "timestamp")

_ZERO_UUID = uuid.UUID(int=0)


def _unwrap(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return tp, False


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    kafka_type: str | None
    tp: Any
    optional: bool
    has_default: bool
    entity: type | None  # a nested entity (single)
    entities: type | None  # an array of entities


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp, optional = _unwrap(hints[f.name])
        entities: type | None = None
        entity: type | None = None
        if typing.get_origin(tp) is tuple and typing.get_args(tp) and dataclasses.is_dataclass(typing.get_args(tp)[0]):
            entities = typing.get_args(tp)[0]
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            entity = tp
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        out.append(_Field(f.name, f.metadata.get("kafka_type"), tp, optional, has_default, entity, entities))
    return tuple(out)


def _attributes(obj: Any) -> list[str]:
    """The field names of a request object: a kio dataclass, or a decoder's own slots class
    (minibroker.protocol.produce_request)."""
    if dataclasses.is_dataclass(obj):
        return [f.name for f in dataclasses.fields(obj)]
    names: list[str] = []
    for klass in type(obj).__mro__:
        names += [n for n in getattr(klass, "__slots__", ()) if not n.startswith("_")]
    return names


def _is_entity(value: Any) -> bool:
    return dataclasses.is_dataclass(value) or bool(getattr(type(value), "__slots__", None)) and not isinstance(
        value, (str, bytes, int, uuid.UUID))


def _request_arrays(obj: Any) -> list[tuple[str, list[Any]]]:
    arrays = []
    for name in _attributes(obj):
        value = getattr(obj, name, None)
        if isinstance(value, (tuple, list)) and value:
            arrays.append((name, list(value)))
    return arrays


def _keys_of_request(obj: Any) -> dict[str, Any]:
    """{key kind: value} of a request entry."""
    keys: dict[str, Any] = {}
    for name in _attributes(obj):
        kind = KEY_KINDS.get(name)
        if kind is not None and kind not in keys:
            keys[kind] = getattr(obj, name, None)
    return keys


def _key_fields(cls: type) -> dict[str, _Field]:
    """{key kind: field} of a response entity."""
    found: dict[str, _Field] = {}
    for f in _fields(cls):
        kind = KEY_KINDS.get(f.name)
        if kind is not None and kind not in found and f.entities is None and f.entity is None:
            found[kind] = f
    return found


def _match(response_field: _Field, response_name: str, request: Any) -> list[Any] | None:
    """The entries of the request array that `response_field` (an array of entities) answers."""
    sub = response_field.entities
    assert sub is not None
    wanted = _key_fields(sub)
    best: tuple[int, list[Any]] | None = None
    candidates = _request_arrays(request)
    # One level down too, flattened (AlterReplicaLogDirs answers its dirs' topics), where nothing
    # at this level names the same things.
    for _name, items in list(candidates):
        if _is_entity(items[0]):
            nested: dict[str, list[Any]] = {}
            for item in items:
                for name, sub_items in _request_arrays(item):
                    nested.setdefault(name, []).extend(sub_items)
            candidates += [(f"{_name}.{name}", sub_items) for name, sub_items in nested.items()]
    for name, items in candidates:
        first = items[0]
        if _is_entity(first):
            overlap = set(_keys_of_request(first)) & set(wanted)
            score = len(overlap) * 2
        elif isinstance(first, str):
            score = 1 if any(k in wanted for k in STRING_KINDS) else 0
        elif isinstance(first, int):
            score = 1 if any(k in wanted for k in INT_KINDS) else 0
        else:
            score = 0
        if "." in name:
            score = max(score - 1, 0) if score >= 2 else 0
        elif name == response_name and _is_entity(first):
            score += 1  # the same name (WriteTxnMarkers' markers) answers even without keys in common
        if score and (best is None or score > best[0]):
            best = (score, items)
    if best is None and not wanted:
        # An entry naming nothing answers the request's one array of entries by position
        # (CreateAcls' results answer its creations, DeleteAcls' filter_results its filters).
        entities = [items for name, items in candidates if "." not in name and _is_entity(items[0])]
        if len(entities) == 1:
            return entities[0]
    return None if best is None else best[1]


def _zero(f: _Field) -> Any:
    if f.optional:
        return None
    tp = f.tp
    kafka_type = f.kafka_type or ""
    if tp is str or kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records") or tp is bytes:
        return b""
    if tp is bool or kafka_type == "bool":
        return False
    if kafka_type == "uuid" or tp is uuid.UUID:
        return _ZERO_UUID
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    if typing.get_origin(tp) is tuple:
        return ()
    if kafka_type == "int64" or any(hint in f.name for hint in MINUS_ONE_HINTS):
        return -1
    return 0


class _Placement:
    """Where the error went: whether any entry naming a partition carries it."""

    def __init__(self) -> None:
        self.partitions = False


def _fill(cls: type, request: Any, code: int, placement: _Placement, top: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    keys = _keys_of_request(request) if request is not None and _is_entity(request) else {}
    key_fields = _key_fields(cls)
    error_fields = []
    for f in _fields(cls):
        if top and f.name == "throttle_time":
            continue
        if f.kafka_type == "error_code":
            error_fields.append(f.name)
            out[f.name] = code
            continue
        kind = KEY_KINDS.get(f.name)
        if kind is not None and kind in keys and key_fields.get(kind) is f and keys[kind] is not None:
            out[f.name] = keys[kind]
            continue
        if f.entities is not None:
            items = _match(f, f.name, request) if request is not None and _is_entity(request) else None
            out[f.name] = [_entry(f.entities, item, code, placement) for item in items or ()]
            continue
        if f.entity is not None:
            out[f.name] = _fill(f.entity, None, 0, placement, False) if not f.has_default else dataclasses.MISSING
            if out[f.name] is dataclasses.MISSING:
                del out[f.name]
            continue
        if not f.has_default:
            out[f.name] = _zero(f)
    if error_fields and "partition" in key_fields:
        placement.partitions = True
    return out


def _entry(cls: type, item: Any, code: int, placement: _Placement) -> dict[str, Any]:
    if _is_entity(item):
        return _fill(cls, item, code, placement, False)
    out = _fill(cls, None, code, placement, False)
    kinds = STRING_KINDS if isinstance(item, str) else INT_KINDS
    key_fields = _key_fields(cls)
    for kind in kinds:
        if kind in key_fields:
            out[key_fields[kind].name] = item
            break
    if isinstance(item, int) and "partition" in key_fields:
        placement.partitions = True
    return out


def error_body(api_key: int, response_cls: type, request: Any, code: int,
               cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body (plain values, minibroker.protocol.entities.build's form, without throttle_time) of
    `response_cls` answering `request` with error `code` in every place it carries one. `cluster`
    ({"brokers", "cluster_id", "controller_id"}) fills a Metadata response before v13."""
    if api_key == METADATA_KEY:
        return _metadata_error(response_cls, request, code, cluster or {})
    placement = _Placement()
    body = _fill(response_cls, request, code, placement, True)
    if api_key == FETCH_KEY and placement.partitions and "error_code" in body:
        body["error_code"] = 0  # the fetch session's error: the partitions carry the pushed one
    return body


def _metadata_error(response_cls: type, request: Any, code: int, cluster: dict[str, Any]) -> dict[str, Any]:
    """Each requested topic's error, with the brokers (Kafka's MetadataRequest.getErrorResponse);
    from v13 REBOOTSTRAP_REQUIRED, or any code for a request naming no topic, as the top-level error
    alone (KIP-1102)."""
    version: int = response_cls.__version__  # type: ignore[attr-defined]
    top = version >= 13 and (code == REBOOTSTRAP_REQUIRED or not request.topics)
    topics: list[dict[str, Any]] = [] if top or request.topics is None else [{
        "error_code": code, "name": t.name or "", "topic_id": getattr(t, "topic_id", None) or _ZERO_UUID,
        "is_internal": False, "partitions": [], "topic_authorized_operations": -2147483648,
    } for t in request.topics]
    return {
        "brokers": [] if top else cluster.get("brokers", []),
        "cluster_id": cluster.get("cluster_id"), "controller_id": cluster.get("controller_id", -1), "topics": topics,
        "cluster_authorized_operations": -2147483648, "error_code": code if top else 0,
    }
