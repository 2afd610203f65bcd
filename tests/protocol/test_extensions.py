"""Lean producer state's duplicate window on the wire (minibroker.protocol.extensions): tagged field 19778 on ApiVersions
(v3+) and InitProducerId (v2+) responses in lean mode, absent in kafka mode and in non-flexible
versions; our decoder reads it, kio's strict reader alone would refuse it, and real clients (their
own decoders, and idempotent producers end to end) take the responses as before."""

from __future__ import annotations

import io

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from minibroker.protocol.entities import build
from minibroker.protocol.extensions import (
    MAX_IN_FLIGHT_SEQUENCE_TAG,
    max_in_flight_sequence_field,
    read_max_in_flight_sequence,
)
from minibroker.protocol.messages import add_tagged_fields, decode_response_tags, encode_request, read_entity
from tests.support.clients import ALL, Message
from tests.support.wire import WireClient, schema

API_VERSIONS, INIT_PRODUCER_ID = 18, 22


def api_versions_body(version: int, **fields) -> tuple[type, bytes]:
    cls = load_response_schema(API_VERSIONS, version)
    response = build(cls, {"error_code": 0, "throttle_time": 0,
                           "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 13}], **fields})
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, response)
    return cls, buffer.getvalue()


def test_added_field_is_read_back_beside_the_schemas_own_tagged_fields():
    """The extension goes after the schema's tagged fields (ascending tags, KIP-482) and both are
    read back: the known one into the entity, ours raw by tag."""
    cls, body = api_versions_body(3, finalized_features_epoch=7)
    extended = add_tagged_fields(cls, body, max_in_flight_sequence_field(10_000_000))
    assert len(extended) == len(body) + 3 + 1 + 4  # tag 19778 (3-byte varint), length, INT32
    with pytest.raises(KeyError):  # kio's native reader alone refuses an unknown tag
        entity_reader(cls)(extended, 0)
    entity, size, unknown = read_entity(cls, extended, 0)
    assert size == len(extended)
    assert entity.finalized_features_epoch == 7 and entity.api_keys[0].max_version == 13
    assert read_max_in_flight_sequence(unknown) == 10_000_000
    # Without the extension, the fast path gives the same entity and no unknown fields.
    plain, _, none = read_entity(cls, body, 0)
    assert plain == entity and none == {}
    assert read_max_in_flight_sequence(none) is None


def test_an_addition_never_replaces_a_field():
    cls, body = api_versions_body(3)
    with pytest.raises(ValueError, match="already defines"):
        add_tagged_fields(cls, body, {1: b"\0" * 8})  # FinalizedFeaturesEpoch is the schema's tag 1
    once = add_tagged_fields(cls, body, max_in_flight_sequence_field(5))
    with pytest.raises(ValueError, match="already defines"):
        add_tagged_fields(cls, once, max_in_flight_sequence_field(6))


def test_a_malformed_window_is_refused():
    with pytest.raises(ValueError, match="INT32"):
        read_max_in_flight_sequence({MAX_IN_FLIGHT_SEQUENCE_TAG: b"\0\0"})
    with pytest.raises(ValueError, match="window of 0"):
        read_max_in_flight_sequence({MAX_IN_FLIGHT_SEQUENCE_TAG: b"\0\0\0\0"})


def ask(bootstrap: str, api_key: int, version: int, body: dict):
    request = build(schema(api_key, version), body)
    with WireClient(bootstrap) as client:
        client.send_raw(encode_request(request, 1, "ext-test"))
        frame = client.recv_frame()
    return frame, decode_response_tags(api_key, version, frame)


INIT = {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1,
        "enable_2_pc": False, "keep_prepared_txn": False}
API = {"client_software_name": "ext-test", "client_software_version": "1"}


@pytest.mark.parametrize("api_key, version, body, carries", [
    (API_VERSIONS, 2, {}, False),
    (API_VERSIONS, 3, API, True),
    (API_VERSIONS, 4, API, True),
    (INIT_PRODUCER_ID, 1, INIT, False),
    (INIT_PRODUCER_ID, 2, INIT, True),
    (INIT_PRODUCER_ID, 5, INIT, True),
])
def test_the_broker_announces_its_window_on_flexible_versions(start_broker, api_key, version, body, carries):
    """Lean mode: the configured window (here 123,456) on every flexible version of both APIs, and
    nothing on the older versions (they have no tagged sections)."""
    with start_broker(max_in_flight_sequence_number_per_connection=123456) as running:
        _frame, (_cid, response, unknown) = ask(running.bootstrap, api_key, version, body)
    assert response.error_code == 0
    assert read_max_in_flight_sequence(unknown) == (123456 if carries else None)


def test_the_default_window_is_announced_and_kafka_mode_announces_none(start_broker, tmp_path):
    with start_broker() as running:
        _, (_, _, unknown) = ask(running.bootstrap, API_VERSIONS, 3, API)
    assert read_max_in_flight_sequence(unknown) == 10_000_000
    with start_broker(tmp_path / "kafka-mode", producer_state_mode="kafka") as running:
        for api_key, body in ((API_VERSIONS, API), (INIT_PRODUCER_ID, INIT)):
            _, (_, response, unknown) = ask(running.bootstrap, api_key, 4, body)
            assert response.error_code == 0 and unknown == {}


@pytest.mark.interop
def test_kafka_pythons_decoder_keeps_the_field_as_an_unknown_tag(start_broker):
    """kafka-python decodes both responses with the field present, filing it under unknown_tags."""
    from kafka.protocol.metadata.api_versions import ApiVersionsResponse
    from kafka.protocol.producer.transaction import InitProducerIdResponse

    with start_broker() as running:
        frame, _ = ask(running.bootstrap, API_VERSIONS, 3, API)
        decoded = ApiVersionsResponse.decode(frame[4:], version=3)
        assert decoded.error_code == 0 and len(decoded.api_keys) > 10
        assert decoded.unknown_tags == {f"_{MAX_IN_FLIGHT_SEQUENCE_TAG}": (10_000_000).to_bytes(4, "big")}
        frame, _ = ask(running.bootstrap, INIT_PRODUCER_ID, 4, INIT)
        decoded = InitProducerIdResponse.decode(frame[4 + 1:], version=4)  # response header v1
        assert decoded.error_code == 0 and decoded.producer_id >= 0
        assert decoded.unknown_tags == {f"_{MAX_IN_FLIGHT_SEQUENCE_TAG}": (10_000_000).to_bytes(4, "big")}


@pytest.mark.interop
@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_idempotent_clients_still_work_with_the_field_present(client, start_broker, unique):
    """Each client library negotiates (ApiVersions), initialises an idempotent producer
    (InitProducerId) and produces, with the field on both responses (a window of 77,777 to make it
    this broker's value), and reads back what it wrote."""
    topic = unique("ext")
    messages = [Message(partition=0, key=None, value=b"%d" % i, headers=()) for i in range(50)]
    with start_broker(max_in_flight_sequence_number_per_connection=77777) as running:
        client.create_topic(running.bootstrap, topic, 1)
        extra = {"enable_idempotence": True} if client.name == "kafka-python" else {}  # others always are
        offsets = client.produce(running.bootstrap, topic, messages, **extra)
        assert sorted(offsets) == list(range(50))
        got = client.consume(running.bootstrap, topic, 1, 50)
    assert [r[3] for r in sorted(got, key=lambda r: r[1])] == [m.value for m in messages]
