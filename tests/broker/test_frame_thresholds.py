"""Real Produce frames over a real socket at sizes on both sides of every threshold of the broker's
frame path, in every Produce version: each is answered, and its batch stored byte for byte.

The connection loop (minibroker.server, DirectSocketIO) reads 64 KiB chunks until a frame's size
prefix says its body is BODY_BUFFER_MIN (64 KiB) or more; such a body is received in place into a
bytearray of its own, which starts at most READ_AHEAD (1 MiB) beyond the bytes received and grows as
they come, and is kept for the next large body when it is at most RECYCLE_MAX (2 MiB). The request
decoders, record validation, and the log append take whichever buffer that gives. Here each version's
requests go up through the sizes and back down on one connection, so kept buffers are reused for
larger and smaller bodies; and the corpus of real clients' frames is replayed with the thresholds
scaled down to the corpus's sizes (tests/protocol/test_frame_corpus.py).
"""

from __future__ import annotations

import struct

import pytest

from minibroker.protocol.framing import BODY_BUFFER_MIN, READ_AHEAD, RECYCLE_MAX
from minibroker.protocol.messages import decode_response
from minibroker.protocol.produce_request import FIRST_VERSION, LAST_VERSION
from tests.support.payloads import ProduceFrames
from tests.support.produce_wire import produce_request
from tests.support.wire import WireClient

# Request sizes (header and body; the frame adds its 4-byte size) around each threshold: a frame that
# just fits the first 64 KiB read, a body of BODY_BUFFER_MIN, READ_AHEAD, RECYCLE_MAX.
THRESHOLDS = (65536 - 4, BODY_BUFFER_MIN, READ_AHEAD, RECYCLE_MAX)
SIZES = sorted({size + d for size in THRESHOLDS for d in (-1, 0, 1)})


def test_every_version_at_every_threshold_is_answered_and_stored_byte_for_byte(tmp_path):
    from minibroker.testing import running_broker

    with running_broker(tmp_path / "data", message_max_bytes=str(4 << 20)) as broker:
        frames = ProduceFrames().watch(broker)
        logs = broker.broker.logs
        topic = "thresholds"
        info = broker.in_broker(lambda: logs.create_topic(topic, 1, {}, broker.broker.clock.now_ms()))
        topic_id = info.topic_id
        expected = []  # (offset, batch) in the order appended
        for version in range(FIRST_VERSION, LAST_VERSION + 1):
            with WireClient(broker.bootstrap) as client:
                for number, size in enumerate(SIZES + SIZES[::-1]):
                    request, batch = produce_request(version, size, topic, topic_id, correlation_id=number,
                                                     fill=version * 31 + number)
                    client.send_raw(struct.pack(">i", size) + request)
                    correlation_id, response = decode_response(0, version, client.recv_frame())
                    assert correlation_id == number
                    (partition,) = response.responses[0].partition_responses
                    assert partition.error_code == 0, f"v{version}, {size} bytes: {partition}"
                    expected.append((partition.base_offset, batch))
        stored = broker.in_broker(lambda: logs.log(topic, 0).read(0, 1 << 30))
    position = 0
    for offset, batch in expected:  # each batch as sent, its base offset assigned, the leader's epoch
        # (0, the partition's first) stamped into partitionLeaderEpoch (Kafka's appendAsLeader)
        assert stored[position:position + 16] == struct.pack(">qii", offset, len(batch) - 12, 0)
        assert stored[position + 16:position + len(batch)] == batch[16:], f"batch at offset {offset}"
        position += len(batch)
    assert position == len(stored)
    assert [o for o, _ in expected] == list(range(len(expected)))
    # The sizes took the paths they are about: bytes under BODY_BUFFER_MIN, in place from there.
    assert {(f.size, f.kind) for f in frames.frames} == {
        (size, "bytearray" if size >= BODY_BUFFER_MIN else "bytes") for size in SIZES}


@pytest.mark.parametrize("version", [FIRST_VERSION, 9, LAST_VERSION])
def test_a_frame_over_socket_request_max_bytes_is_refused_from_its_prefix(tmp_path, version):
    """socket.request.max.bytes bounds a frame whatever path its size would take; the limit itself
    is accepted."""
    from minibroker.testing import running_broker

    limit = BODY_BUFFER_MIN + 10
    with running_broker(tmp_path / "data", socket_request_max_bytes=str(limit)) as broker:
        logs = broker.broker.logs
        info = broker.in_broker(lambda: logs.create_topic("limit", 1, {}, broker.broker.clock.now_ms()))
        with WireClient(broker.bootstrap) as client:
            request, _ = produce_request(version, limit, "limit", info.topic_id)
            client.send_raw(struct.pack(">i", limit) + request)
            _, response = decode_response(0, version, client.recv_frame())
            assert response.responses[0].partition_responses[0].error_code == 0
            client.send_raw(struct.pack(">i", limit + 1))  # the prefix alone
            assert client.is_closed_by_peer()
        assert broker.broker.metrics.closed_for_protocol_errors == 1


def _request_with_batch_of(version: int, batch_size: int, topic: str, topic_id) -> tuple[bytes, bytes]:
    """A Produce request whose one batch is exactly `batch_size` bytes."""
    request, batch = produce_request(version, batch_size + 200, topic, topic_id)
    request, batch = produce_request(version, len(request) + batch_size - len(batch), topic, topic_id)
    assert len(batch) == batch_size
    return request, batch


@pytest.mark.parametrize("version", [FIRST_VERSION, 9, LAST_VERSION])
def test_max_message_bytes_and_log_append_time_on_batches_received_in_place(tmp_path, version):
    """A topic's max.message.bytes takes a batch of exactly that size and refuses one byte more
    (MESSAGE_TOO_LARGE), a LogAppendTime topic stamps the batch (its timestamp type, max timestamp
    and CRC rewritten, the records as sent): on batches far past BODY_BUFFER_MIN, in frames received
    in place."""
    from minibroker.protocol.records import ATTR_TIMESTAMP_TYPE, check_batch
    from minibroker.testing import running_broker

    limit = 3 * BODY_BUFFER_MIN
    with running_broker(tmp_path / "data") as broker:
        frames = ProduceFrames().watch(broker)
        logs = broker.broker.logs
        now = broker.broker.clock.now_ms
        bounded = broker.in_broker(lambda: logs.create_topic("bounded", 1, {"max.message.bytes": str(limit)}, now()))
        stamped = broker.in_broker(lambda: logs.create_topic(
            "stamped", 1, {"message.timestamp.type": "LogAppendTime"}, now()))
        with WireClient(broker.bootstrap) as client:
            def produce(request: bytes):
                client.send_raw(struct.pack(">i", len(request)) + request)
                _, response = decode_response(0, version, client.recv_frame())
                return response.responses[0].partition_responses[0]

            assert produce(_request_with_batch_of(version, limit, "bounded", bounded.topic_id)[0]).error_code == 0
            too_large = produce(_request_with_batch_of(version, limit + 1, "bounded", bounded.topic_id)[0])
            assert too_large.error_code == 10  # MESSAGE_TOO_LARGE
            request, batch = _request_with_batch_of(version, 2 * BODY_BUFFER_MIN, "stamped", stamped.topic_id)
            answer = produce(request)
            assert answer.error_code == 0
        stored = broker.in_broker(lambda: logs.log("stamped", 0).read(0, 1 << 30))
    assert {f.kind for f in frames.frames} == {"bytearray"}
    header = check_batch(stored)  # the CRC holds over the rewritten header
    assert header.attributes & ATTR_TIMESTAMP_TYPE and header.max_timestamp > 0
    if version >= 5:  # log_append_time is in the response from v2; kio reads it as a datetime
        assert answer.log_append_time is not None
    assert stored[61:] == batch[61:]  # the records as sent
