"""The error response built from the schemas (minibroker.control.responses), for every API and
version the broker serves: it encodes, decodes, and carries the code in every error field of the
entries answering the request's (except Fetch's top-level session error), keyed as the request."""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid

import pytest

from minibroker.control.responses import _fields, error_body
from minibroker.handlers import load_all
from minibroker.protocol.entities import build
from minibroker.protocol.messages import api_schema, decode_response, encode_response

HANDLERS = load_all()
CASES = [(key, version) for key, h in sorted(HANDLERS.items()) for version in range(h.min_version, h.max_version + 1)]
CODE = 15  # COORDINATOR_NOT_AVAILABLE


def sample(cls: type) -> typing.Any:
    """A request with one entry in each array, naming topic 't', partition 3, group 'g'."""
    values: dict[str, typing.Any] = {}
    for f in _fields(cls):
        if f.entities is not None:
            values[f.name] = (sample(f.entities),)
        elif f.entity is not None:
            values[f.name] = sample(f.entity)
        elif typing.get_origin(f.tp) is tuple:
            item = typing.get_args(f.tp)[0]
            base = getattr(item, "__supertype__", item)
            if base is str or isinstance(base, type) and issubclass(base, str):
                values[f.name] = ("g",)
            elif isinstance(base, type) and issubclass(base, int):
                values[f.name] = (3,)
            else:
                values[f.name] = ()
        elif f.kafka_type == "error_code":
            values[f.name] = 0
        elif f.kafka_type == "string":
            values[f.name] = "t"
        elif f.kafka_type == "uuid":
            values[f.name] = uuid.UUID(int=7)
        elif f.kafka_type in ("bytes", "records"):
            values[f.name] = b""
        elif f.kafka_type == "bool":
            values[f.name] = False
        elif f.kafka_type in ("timedelta_i32", "timedelta_i64"):
            values[f.name] = datetime.timedelta(0)
        elif f.kafka_type == "datetime_i64":
            values[f.name] = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
        elif f.kafka_type == "float64":
            values[f.name] = 3.0
        else:
            values[f.name] = f.tp(3) if callable(f.tp) else 3
    return cls(**values)


def error_codes(obj: typing.Any, path: str = "") -> list[tuple[str, int]]:
    found = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            found.append((path + f.name, int(value)))
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    found += error_codes(item, f"{path}{f.name}[].")
    return found


@pytest.mark.parametrize("api_key,version", CASES, ids=[f"{HANDLERS[k].api_name}-v{v}" for k, v in CASES])
def test_every_api_answers_the_error(api_key, version):
    schema = api_schema(api_key, version)
    request = sample(schema.request)
    body = error_body(api_key, schema.response, request, CODE, {"brokers": [], "cluster_id": "c", "controller_id": 1})
    frame = encode_response(schema, 9, build(schema.response, {**body, "throttle_time": 0}))
    correlation_id, response = decode_response(api_key, version, frame[4:])
    assert correlation_id == 9
    codes = error_codes(response)
    assert codes, f"{HANDLERS[api_key].api_name} v{version} carries no error"
    for path, code in codes:
        if api_key == 1 and path == "error_code":
            assert code == 0  # Fetch: the session's error; the partitions carry it
        elif api_key == 3 and path == "error_code":
            assert code == 0  # Metadata: each topic's error (from v13 top-level only for REBOOTSTRAP_REQUIRED)
        else:
            assert code == CODE, (path, code)


def test_produce_answers_each_partition_keyed_as_asked():
    schema = api_schema(0, 9)
    request = build(schema.request, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": "a", "partition_data": [{"index": 0, "records": b""}, {"index": 4, "records": b""}]},
        {"name": "b", "partition_data": [{"index": 1, "records": b""}]}]})
    body = error_body(0, schema.response, request, 6)
    assert [(t["name"], [(p["index"], p["error_code"], p["base_offset"]) for p in t["partition_responses"]])
            for t in body["responses"]] == [("a", [(0, 6, -1), (4, 6, -1)]), ("b", [(1, 6, -1)])]


def test_find_coordinator_batched_keys_and_single_key():
    v4 = api_schema(10, 4)
    body = error_body(10, v4.response, build(v4.request, {"key_type": 0, "coordinator_keys": ["g1", "g2"]}), 15)
    assert [(c["key"], c["error_code"], c["node_id"]) for c in body["coordinators"]] == [("g1", 15, -1), ("g2", 15, -1)]
    v2 = api_schema(10, 2)
    body = error_body(10, v2.response, build(v2.request, {"key": "g", "key_type": 0}), 15)
    assert (body["error_code"], body["node_id"], body["port"]) == (15, -1, -1)


def test_describe_groups_answers_each_group():
    schema = api_schema(15, 5)
    body = error_body(15, schema.response, build(schema.request, {"groups": ["g1", "g2"],
                                                                  "include_authorized_operations": False}), 16)
    assert [(g["group_id"], g["error_code"]) for g in body["groups"]] == [("g1", 16), ("g2", 16)]


def test_metadata_answers_each_topic_and_rebootstrap_at_the_top():
    v13 = api_schema(3, 13)
    named = build(v13.request, {"topics": [{"name": "a", "topic_id": None}], "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    cluster = {"brokers": [{"node_id": 1, "host": "h", "port": 9, "rack": None}], "cluster_id": "c", "controller_id": 1}
    body = error_body(3, v13.response, named, 5, cluster)
    assert (body["error_code"], [(t["name"], t["error_code"]) for t in body["topics"]], len(body["brokers"])) == (
        0, [("a", 5)], 1)
    body = error_body(3, v13.response, named, 129, cluster)
    assert (body["error_code"], body["topics"], body["brokers"]) == (129, [], [])
