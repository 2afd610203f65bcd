"""The broker over the wire with exact requests: version negotiation, topics, long polls, and bad
input that costs one connection and nothing else."""

import datetime
import socket
import struct
import threading
import time
import uuid

import pytest

from minibroker.protocol.entities import build, to_ms
from tests.support.wire import WireClient, encode_request, schema
from tests.support.batches import make_batch
from tests.support.wire import create_topic, produce

ms = lambda n: datetime.timedelta(milliseconds=n)  # noqa: E731


def batch(n=3, value=b"v") -> bytes:
    """`n` records keyed k, a millisecond apart (leader epoch 0, as kafka-python writes it)."""
    return make_batch([(b"k", value)] * n, timestamps=[1_700_000_000_000 + i for i in range(n)],
                      partition_leader_epoch=0)


def fetch_request(topic_id, offset, max_wait, version=16, min_bytes=1, partition=0):
    return build(schema(1, version), {
        "replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 50 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": (),
        "rack_id": "",
        "topics": [{"topic_id": topic_id, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
    })


def still_serving(broker) -> bool:
    with WireClient(broker.bootstrap) as other:
        return other.request(schema(18, 0)()).error_code == 0


# ---- version negotiation -----------------------------------------------------------------

def test_api_versions_v0_lists_what_the_handlers_serve(broker):
    with WireClient(broker.bootstrap) as c:
        response = c.request(schema(18, 0)())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert response.error_code == 0
    assert ranges[0] == (3, 13) and ranges[1] == (4, 18) and ranges[18] == (0, 4)


def test_api_versions_at_an_unknown_version_answers_v0_with_unsupported_version(broker):
    with WireClient(broker.bootstrap) as c:
        # v9 does not exist: encode a v3 body but claim v9 in the header.
        frame = bytearray(encode_request(schema(18, 3)(client_software_name="t", client_software_version="1")))
        struct.pack_into(">h", frame, 6, 9)
        c.send_raw(bytes(frame))
        body = c.recv_frame()
    # Response header v0 (correlation id only), then ApiVersions v0: error code, api array.
    correlation_id, error_code, count = struct.unpack_from(">ihi", body, 0)
    assert error_code == 35 and count > 10
    keys = [struct.unpack_from(">hhh", body, 10 + 6 * i) for i in range(count)]
    assert (18, 0, 4) in keys


# ---- topics --------------------------------------------------------------------------------

def test_metadata_auto_creates_with_num_partitions(start_broker, unique):
    topic = unique("auto")
    with start_broker(num_partitions="4") as broker, WireClient(broker.bootstrap) as c:
        req = schema(3, 12)
        mod = __import__(req.__module__, fromlist=["x"])
        response = c.request(req(topics=(mod.MetadataRequestTopic(topic_id=None, name=topic),),
                                 allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        (t,) = response.topics
        assert t.error_code == 0 and len(t.partitions) == 4 and t.topic_id != uuid.UUID(int=0)
        assert [b.node_id for b in response.brokers] == [response.controller_id]
        assert response.brokers[0].port == broker.port


def test_metadata_without_auto_creation_answers_unknown_topic(broker, unique):
    with WireClient(broker.bootstrap) as c:
        req = schema(3, 12)
        mod = __import__(req.__module__, fromlist=["x"])
        response = c.request(req(topics=(mod.MetadataRequestTopic(topic_id=None, name=unique("nope")),),
                                 allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert response.topics[0].error_code == 3


def test_metadata_by_topic_id(broker, unique):
    """Kafka's rules: a non-zero id is looked up by id whatever the name says (Java sends the empty
    name, not null), an unknown id answers UNKNOWN_TOPIC_ID with a null name and auto-creates
    nothing, and ids before v12 are refused with INVALID_REQUEST."""
    topic = unique("by-id")
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic, partitions=2)
        topic_id = broker.broker.logs.topic(topic).topic_id
        unknown = uuid.uuid4()

        def ask(*topics, version=12):
            req = schema(3, version)
            mod = __import__(req.__module__, fromlist=["x"])
            return c.request(req(topics=tuple(mod.MetadataRequestTopic(topic_id=i, name=n) for i, n in topics),
                                 allow_auto_topic_creation=True, include_topic_authorized_operations=False)).topics

        (found,) = ask((topic_id, ""))
        assert (found.error_code, found.name, found.topic_id, len(found.partitions)) == (0, topic, topic_id, 2)
        assert ask((topic_id, None)) == (found,)
        found_again, missing = ask((topic_id, "ignored"), (unknown, ""), (topic_id, ""))
        assert found_again == found
        assert (missing.error_code, missing.name, missing.topic_id, missing.partitions) == (100, None, unknown, ())
        assert broker.broker.logs.topic("ignored") is None
        (refused,) = ask((topic_id, topic), version=11)
        assert (refused.error_code, refused.name, refused.topic_id) == (42, topic, topic_id)
        (by_name,) = ask((None, topic))
        assert by_name == found


@pytest.mark.parametrize(
    "name, partitions, configs, code",
    [
        ("bad/name", 1, (), 17),
        ("a" * 250, 1, (), 17),
        ("..", 1, (), 17),
        ("ok-name", 0, (), 37),
        ("ok-name", 1, (("no.such.config", "1"),), 40),
        ("ok-name", 1, (("retention.ms", "soon"),), 40),
    ],
)
def test_create_topics_validation(broker, name, partitions, configs, code):
    with WireClient(broker.bootstrap) as c:
        result = create_topic(c, name, partitions, configs)
    assert result.error_code == code
    assert result.error_message


def test_create_existing_topic_and_delete(broker, unique):
    topic = unique("twice")
    with WireClient(broker.bootstrap) as c:
        assert create_topic(c, topic, 2).error_code == 0
        assert create_topic(c, topic, 2).error_code == 36
        req = schema(20, 6)
        mod = __import__(req.__module__, fromlist=["x"])
        response = c.request(req(topics=(mod.DeleteTopicState(name=topic, topic_id=None),), timeout=ms(5000)))
        assert response.responses[0].error_code == 0
        response = c.request(req(topics=(mod.DeleteTopicState(name=topic, topic_id=None),), timeout=ms(5000)))
        assert response.responses[0].error_code == 3
    assert not list(broker.data_dir.glob(f"{topic}-*"))


def test_describe_configs_shows_overrides_and_defaults(broker, unique):
    topic = unique("cfg")
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic, 1, (("retention.ms", "12345"),))
        req = schema(32, 4)
        mod = __import__(req.__module__, fromlist=["x"])
        response = c.request(req(resources=(mod.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                                        configuration_keys=None),),
                                 include_synonyms=True, include_documentation=False))
    configs = {e.name: e for e in response.results[0].configs}
    assert configs["retention.ms"].value == "12345" and configs["retention.ms"].config_source == 1
    assert configs["segment.bytes"].value == "1073741824" and configs["segment.bytes"].config_source == 5


# ---- produce, list offsets, fetch ---------------------------------------------------------------

def test_produce_assigns_consecutive_offsets_and_list_offsets_sees_them(broker, unique):
    topic = unique("offsets")
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic)
        first = produce(c, topic, batch(3)).responses[0].partition_responses[0]
        second = produce(c, topic, batch(2)).responses[0].partition_responses[0]
        assert (first.error_code, first.base_offset, second.base_offset) == (0, 0, 3)
        req = schema(2, 7)
        mod = __import__(req.__module__, fromlist=["x"])

        def offset_for(ts):
            part = mod.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts)
            r = c.request(req(replica_id=-1, isolation_level=0,
                              topics=(mod.ListOffsetsTopic(name=topic, partitions=(part,)),)))
            return r.topics[0].partitions[0].offset

        assert offset_for(-2) == 0
        assert offset_for(-1) == 5
        assert offset_for(1_700_000_000_001) == 1  # inside the first batch: the record itself
        assert offset_for(1_800_000_000_000) == -1


def test_long_poll_returns_when_data_arrives_not_at_max_wait(broker, unique):
    topic = unique("longpoll")
    with WireClient(broker.bootstrap) as admin:
        create_topic(admin, topic)
    topic_id = broker.broker.logs.topic(topic).topic_id
    result = {}

    def poll():
        with WireClient(broker.bootstrap, timeout=120) as c:
            result["response"] = c.request(fetch_request(topic_id, 0, max_wait=60_000))

    poller = threading.Thread(target=poll)
    poller.start()
    # Wait until the fetch is parked in the purgatory, then produce.
    deadline = time.monotonic() + 30
    while broker.broker.fetch_purgatory.watched((topic, 0)) == 0:
        assert time.monotonic() < deadline, "fetch never reached the purgatory"
        time.sleep(0.01)
    with WireClient(broker.bootstrap) as c:
        produce(c, topic, batch(2))
    poller.join(timeout=30)
    assert not poller.is_alive(), "the fetch waited on although data arrived"
    partition = result["response"].responses[0].partitions[0]
    assert partition.error_code == 0 and partition.high_watermark == 2 and len(partition.records) > 0
    assert broker.broker.fetch_purgatory.expired == 0


def test_fetch_at_a_bad_offset_is_out_of_range(broker, unique):
    topic = unique("oor")
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic)
        produce(c, topic, batch(2))
        topic_id = broker.broker.logs.topic(topic).topic_id
        response = c.request(fetch_request(topic_id, 10, max_wait=0))
        assert response.responses[0].partitions[0].error_code == 1
        response = c.request(fetch_request(uuid.uuid4(), 0, max_wait=0))
        assert response.responses[0].partitions[0].error_code == 100


def test_large_produce_requests_received_in_place_are_stored_byte_for_byte(broker, unique):
    """Produce requests over minibroker.protocol.framing's BODY_BUFFER_MIN are received into buffers of their
    own, reused from one request to the next (FrameDecoder.recycle): pipelined in one send with a
    small request between them and of different sizes (the reused buffer shrinks and grows), each
    batch is stored exactly as sent and each request answered in order."""
    topic = unique("in-place")
    batches = [batch(n, value=bytes([65 + n % 26]) * 1000) for n in (300, 180, 420)]
    with WireClient(broker.bootstrap) as c:
        assert create_topic(c, topic).error_code == 0
        req = schema(0, 9)
        mod = __import__(req.__module__, fromlist=["x"])
        frames = []
        for correlation_id, records in enumerate(batches, start=10):
            data = mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=0, records=records),))
            frames.append(encode_request(req(acks=-1, timeout=ms(5000), topic_data=(data,), transactional_id=None),
                                         correlation_id=correlation_id))
        frames.insert(1, encode_request(schema(18, 0)(), correlation_id=99))
        assert min(len(f) for f in frames if len(f) > 1000) > 1 << 16
        c.send_raw(b"".join(frames))
        answers = [struct.unpack_from(">i", c.recv_frame())[0] for _ in frames]
        assert answers == [10, 99, 11, 12]
        topic_id = broker.broker.logs.topic(topic).topic_id
        stored = b""
        while len(stored) < sum(len(b) for b in batches):
            response = c.request(fetch_request(topic_id, _next_offset(stored), max_wait=0))
            records = response.responses[0].partitions[0].records
            assert records
            stored += records
    # Offsets were assigned (the first 8 bytes of each batch); everything else is the client's.
    position = 0
    for records in batches:
        assert stored[position + 8 : position + len(records)] == records[8:]
        position += len(records)


def _next_offset(stored: bytes) -> int:
    """The offset after the last whole batch in `stored` (v2 batches: base offset, length, ...,
    record count at byte 57)."""
    position, offset = 0, 0
    while position + 61 <= len(stored):
        base, length = struct.unpack_from(">qi", stored, position)
        offset = base + struct.unpack_from(">i", stored, position + 57)[0]
        position += 12 + length
    return offset


# ---- bad input: one connection pays, everyone else is served ---------------------------------

def test_garbage_bytes_close_only_that_connection(broker):
    with WireClient(broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", 12) + b"\xff" * 12)
        assert c.is_closed_by_peer()
    assert still_serving(broker)


@pytest.mark.parametrize("size", [-1, 104857601, 2**31 - 1])
def test_bad_size_prefix_closes_the_connection(broker, size):
    with WireClient(broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", size))
        assert c.is_closed_by_peer()
    assert still_serving(broker)


def test_truncated_frame_then_hang_up(broker):
    frame = encode_request(schema(18, 0)())
    s = socket.create_connection((broker.host, broker.port))
    s.sendall(frame[:-3] if len(frame) > 8 else frame[:6])
    s.close()
    assert still_serving(broker)


def test_unknown_api_key_closes_the_connection(broker):
    with WireClient(broker.bootstrap) as c:
        c.send_raw(struct.pack(">ihhih", 10, 9999, 0, 1, -1))
        assert c.is_closed_by_peer()
    assert still_serving(broker)


def test_unsupported_version_closes_the_connection(broker):
    with WireClient(broker.bootstrap) as c:
        frame = bytearray(encode_request(schema(3, 1)(topics=())))
        struct.pack_into(">h", frame, 6, 99)
        c.send_raw(bytes(frame))
        assert c.is_closed_by_peer()
    assert still_serving(broker)


def test_crc_mismatch_is_corrupt_message_and_nothing_is_appended(broker, unique):
    topic = unique("crc")
    data = bytearray(batch(3))
    data[-1] ^= 0x55
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic)
        partition = produce(c, topic, bytes(data)).responses[0].partition_responses[0]
        assert partition.error_code == 2
        # The connection stays usable: a good batch lands at offset 0.
        assert produce(c, topic, batch(1)).responses[0].partition_responses[0].base_offset == 0


def test_wrong_magic_is_invalid_record(broker, unique):
    topic = unique("magic")
    data = bytearray(batch(3))
    data[16] = 1
    with WireClient(broker.bootstrap) as c:
        create_topic(c, topic)
        assert produce(c, topic, bytes(data)).responses[0].partition_responses[0].error_code == 87
    assert broker.broker.logs.log(topic, 0).log_end_offset == 0


def test_throttle_time_is_zero_without_quotas(broker):
    with WireClient(broker.bootstrap) as c:
        assert to_ms(c.request(schema(18, 3)(client_software_name="t", client_software_version="1")).throttle_time) == 0


def test_create_topics_with_a_null_configs_array_is_malformed_as_in_kafka(broker, unique):
    """configs is not nullable: Kafka's parser refuses the request ("non-nullable field configs was
    serialized as null") and closes the connection; it used to reach the handler and raise TypeError."""
    name = unique("nullcfg").encode()
    topic = struct.pack(">h", len(name)) + name + struct.pack(">ih", 1, 1) + struct.pack(">ii", 0, -1)
    body = struct.pack(">i", 1) + topic + struct.pack(">i", 5000) + b"\x00"  # v4: validate_only
    header = struct.pack(">hhih", 19, 4, 1, 4) + b"test"
    with WireClient(broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", len(header) + len(body)) + header + body)
        assert c.is_closed_by_peer()
    assert still_serving(broker)
    assert broker.in_broker(lambda: broker.broker.metrics.closed_for_protocol_errors) == 1
