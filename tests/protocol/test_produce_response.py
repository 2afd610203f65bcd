"""Produce responses written by minibroker.protocol.produce_response are byte for byte kio's encoding of the
same body (build + encode_response, what Broker._encode wrote before), in every version the broker
serves (v3-v13): generated bodies with errors, messages, record errors, nulls, topic names or topic
ids, the v10+ tagged fields and the broker's extra top-level tagged fields; and a body kio refuses
is refused too. The broker's own Produce responses go through it (last test).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings, strategies as st
from kio.schema.errors import ErrorCode

from minibroker.handlers import load_all
from minibroker.protocol.entities import build
from minibroker.protocol.messages import api_schema, decode_response, encode_response
from minibroker.protocol.produce_response import encode_produce_response

PRODUCE = load_all()[0]
VERSIONS = range(PRODUCE.min_version, PRODUCE.max_version + 1)

I32 = st.integers(-2**31, 2**31 - 1)
I64 = st.integers(-2**63, 2**63 - 1)
TEXT = st.text(max_size=12)
ERRORS = st.sampled_from(sorted(int(code) for code in ErrorCode))


def kio_encoding(version: int, correlation_id: int, body: dict, tagged_fields=None) -> bytes:
    schema = api_schema(0, version)
    return encode_response(schema, correlation_id, build(schema.response, body), tagged_fields)


def maybe(key: str, values: st.SearchStrategy) -> st.SearchStrategy:
    """{key: value} or {} (the field left out: build then uses the schema's default)."""
    return st.one_of(st.just({}), values.map(lambda value: {key: value}))


record_error = st.builds(lambda index, message: {"batch_index": index, **message},
                         I32, maybe("batch_index_error_message", st.none() | TEXT))
leader = st.builds(lambda fields: fields, st.fixed_dictionaries(
    {}, optional={"leader_id": st.just(-1) | I32, "leader_epoch": st.just(-1) | I32}))
partition = st.builds(
    lambda index, code, base, *optional: {"index": index, "error_code": code, "base_offset": base,
                                          **{k: v for part in optional for k, v in part.items()}},
    I32, st.just(0) | ERRORS, I64,
    # -1 (none), any negative (build makes it None too), or a time a datetime can hold
    maybe("log_append_time", st.just(-1) | st.integers(-2**63, -1) | st.integers(0, 2**45)),
    maybe("log_start_offset", I64),
    st.one_of(st.just({"record_errors": ()}),
              st.lists(record_error, max_size=3).map(lambda errors: {"record_errors": errors}),
              st.just({"record_errors": None})),
    maybe("error_message", st.none() | TEXT),
    maybe("current_leader", leader),
)
topic = st.builds(lambda name, topic_id, partitions: {"name": name, "topic_id": topic_id,
                                                       "partition_responses": partitions},
                  TEXT, st.none() | st.uuids(), st.lists(partition, max_size=4))
node = st.builds(lambda node_id, host, port, rack: {"node_id": node_id, "host": host, "port": port, **rack},
                 I32, TEXT, I32, maybe("rack", st.none() | TEXT))
body = st.builds(lambda responses, *optional: {"responses": responses,
                                               **{k: v for part in optional for k, v in part.items()}},
                 st.lists(topic, max_size=3),
                 maybe("throttle_time", st.integers(0, 2**31 - 1)),
                 maybe("node_endpoints", st.none() | st.lists(node, max_size=3)))
# The broker's additions to the top-level tagged section (minibroker.protocol.extensions); tag 0 is the schema's
# own from v10 (refused there, see below).
extra_tags = st.none() | st.dictionaries(st.integers(1, 70_000), st.binary(max_size=6), max_size=3)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(list(VERSIONS)), I32, body, extra_tags)
def test_every_body_encodes_as_kio_does(version, correlation_id, response, tagged_fields):
    assert encode_produce_response(version, correlation_id, response, tagged_fields) == \
        kio_encoding(version, correlation_id, response, tagged_fields)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_brokers_own_bodies_encode_as_kio_does(version):
    """What handlers/produce.py answers: an append, and each error answer with its message."""
    ok = {"index": 0, "error_code": 0, "base_offset": 1_000_000, "log_append_time": -1, "log_start_offset": 5,
          "record_errors": (), "error_message": None}
    refused = {"index": 3, "error_code": ErrorCode.corrupt_message, "base_offset": -1, "log_append_time": -1,
               "log_start_offset": -1, "record_errors": (), "error_message": "CRC mismatch: stored 1, computed 2"}
    appended_at = {**ok, "index": 1, "log_append_time": 1_700_000_000_123}
    response = {"responses": [{"name": "orders", "topic_id": uuid.UUID(int=7),
                               "partition_responses": [ok, appended_at, refused]},
                              {"name": "ünïcode-topic", "topic_id": None, "partition_responses": []}],
                "throttle_time": 250}
    frame = encode_produce_response(version, 2**31 - 1, response)
    assert frame == kio_encoding(version, 2**31 - 1, response)
    # and it reads back as what was meant
    correlation_id, decoded = decode_response(0, version, frame[4:])
    assert correlation_id == 2**31 - 1
    assert [p.error_code for p in decoded.responses[0].partition_responses] == [0, 0, ErrorCode.corrupt_message]


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 9])
def test_the_tag_the_schema_defines_is_refused_where_it_defines_it(version):
    response = {"responses": [], "throttle_time": 0}
    extra = {0: b"\x01", 5: b""}
    if version >= 10:  # node_endpoints is tag 0: an addition may not replace it
        with pytest.raises(ValueError):
            kio_encoding(version, 1, response, extra)
        with pytest.raises(ValueError):
            encode_produce_response(version, 1, response, extra)
    else:
        assert encode_produce_response(version, 1, response, extra) == kio_encoding(version, 1, response, extra)


@pytest.mark.parametrize("version", [3, 8, 9, 13])
@pytest.mark.parametrize("breakage, error", [
    (lambda p: p.pop("base_offset"), KeyError),  # a required field missing
    (lambda p: p.update(error_code=32_000), ValueError),  # a code kio's ErrorCode does not know
])
def test_a_body_kio_refuses_is_refused(version, breakage, error):
    p = {"index": 0, "error_code": 0, "base_offset": 1, "record_errors": ()}
    breakage(p)
    response = {"responses": [{"name": "t", "topic_id": None, "partition_responses": [p]}]}
    with pytest.raises(error):
        kio_encoding(version, 1, response)
    with pytest.raises(error):
        encode_produce_response(version, 1, response)


def test_the_broker_answers_produce_with_it(tmp_path):
    """Broker._encode's Produce frames (minibroker.protocol.produce_response's) are still kio's
    encoding of the handler's body with the throttle time, the broker's response tags included."""
    from minibroker.broker import Broker, Connection, RequestContext
    from minibroker.config import BrokerConfig
    from minibroker.protocol.messages import RequestHeader

    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path), "listeners": "127.0.0.1:0"}))
    broker.response_tags[0] = {19778: b"\0\0\0\x05"}
    response = {"responses": [{"name": "t", "topic_id": None, "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 9, "log_append_time": -1, "log_start_offset": 0,
         "record_errors": (), "error_message": None}]}]}
    for version in VERSIONS:
        ctx = RequestContext(broker.services, Connection("peer"), RequestHeader(0, version, 11, "c", 0),
                             api_schema(0, version), PRODUCE, 0.0)
        assert broker._encode(ctx, response, 30) == kio_encoding(version, 11, {**response, "throttle_time": 30},
                                                                 broker.response_tags[0])


# Every count, length and tag is an unsigned varint in the flexible versions: one byte up to 127 (the
# writer's fast path), two from 128 (count + 1 and length + 1 for compact arrays and strings). The
# generated bodies above stay under it; these straddle it, and (strings) the 16384 of a third byte.
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [126, 127, 128, 16383, 16384])
def test_counts_and_lengths_on_both_sides_of_a_varint_byte_encode_as_kio_does(version, n):
    count = min(n, 130)  # arrays: 126, 127, 128 elements (and 130)
    message = "m" * n
    partitions = [{"index": i, "error_code": 2, "base_offset": -1, "log_append_time": -1, "log_start_offset": 0,
                   "record_errors": [{"batch_index": j, "batch_index_error_message": message[:j]}
                                     for j in range(count if i == 0 else 1)],
                   "error_message": message, "current_leader": {"leader_id": 1, "leader_epoch": n}}
                  for i in range(count)]
    response = {"responses": [{"name": "t" * n, "topic_id": uuid.UUID(int=n), "partition_responses": partitions}],
                "throttle_time": n,
                "node_endpoints": [{"node_id": i, "host": "h" * n, "port": 9092, "rack": "r" * (n % 200)}
                                   for i in range(count)]}
    tags = {n: b"x" * n, n + 1: b""}
    assert encode_produce_response(version, 5, response, tags) == kio_encoding(version, 5, response, tags)
