"""Every request frame the real clients were captured sending gets a well-formed answer.

tests/data/frames/ holds, per client library and version, the requests kafka-python, confluent-kafka
(librdkafka), aiokafka and Java's kafka-clients sent to a broker through a recording proxy
(scripts/capture_frames; format in tests/support/frame_corpus.py): admin calls, an idempotent producer, a
consumer in a group, offset lookups. Replayed byte for byte against a fresh broker (the topics they
name created first, with the same ids), each must be answered on its connection with a frame that
decodes with the response schema of its API version, nothing left over, under its correlation id;
a closed connection fails the test. Errors in the answers are fine: the group members, producer ids
and offsets of the capture are not those of the replay. This is what catches a request shape the
broker's parser refuses (librdkafka's Metadata v13 with bytes after its body).

Each corpus is replayed twice: with the connection loop's reads and framing as they are (these small
frames come in one read, as bytes), and with its thresholds scaled down to the corpus's sizes (reads
of 5 bytes, bodies of 24 bytes and more received in place into a bytearray that starts 16 bytes ahead
and grows, frames of up to 300 bytes recycled for the next), so that every decoder meets every frame
through the other path too, at sizes on both sides of each threshold.

The corpus must be of the client versions the suite pins; after a pin changes, the first test says
to re-capture.
"""

from __future__ import annotations

import functools
import socket
import struct
import uuid

import pytest

import minibroker.protocol.framing as framing
import minibroker.server as server
from minibroker.testing import running_broker
from minibroker.protocol.messages import API_VERSIONS_KEY, decode_response, peek_api
from tests.support.frame_corpus import CORPUS_DIR, captured, pinned_versions, read_corpus

# What the capture story makes every client send; a corpus without one of them was captured wrong.
EVERY_CLIENT_SENDS = {"ApiVersions", "Metadata", "CreateTopics", "InitProducerId", "Produce", "FindCoordinator",
                      "JoinGroup", "SyncGroup", "OffsetCommit", "OffsetFetch", "Fetch", "ListOffsets"}
RECAPTURE = "re-capture it: .venv/bin/python scripts/capture_frames --client {client}"


def test_the_corpus_is_of_the_pinned_client_versions():
    corpora = captured()
    problems = []
    for client, version in pinned_versions().items():
        if client not in corpora:
            problems.append(f"no captured frames of {client} {version} in {CORPUS_DIR}; "
                            + RECAPTURE.format(client=client))
            continue
        index, _ = read_corpus(corpora[client])
        if index["version"] != version:
            problems.append(f"the frames of {client} were captured from {index['version']}, but the suite pins "
                            f"{version}; " + RECAPTURE.format(client=client))
        missing = EVERY_CLIENT_SENDS - {frame["api"] for frame in index["frames"]}
        if missing:
            problems.append(f"the frames of {client} lack {', '.join(sorted(missing))}; "
                            + RECAPTURE.format(client=client))
    assert not problems, "\n".join(problems)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("closed by the broker")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _decode(api_key: int, version: int, response: bytes):
    try:
        return decode_response(api_key, version, response)
    except Exception:
        if api_key != API_VERSIONS_KEY:
            raise
        # KIP-511: a version the broker lacks is answered in ApiVersions v0's form, with error 35.
        correlation_id, body = decode_response(api_key, 0, response)
        assert body.error_code == 35
        return correlation_id, body


SCALED_BODY_MIN, SCALED_READ_AHEAD, SCALED_RECYCLE_MAX, SCALED_READ_SIZE = 24, 16, 300, 5


@pytest.fixture(params=["as-read", "scaled-thresholds"])
def framing_mode(request, monkeypatch):
    if request.param == "scaled-thresholds":
        monkeypatch.setattr(server, "READ_SIZE", SCALED_READ_SIZE)
        monkeypatch.setattr(server, "FrameDecoder", functools.partial(
            framing.FrameDecoder, body_buffer_min=SCALED_BODY_MIN, read_ahead=SCALED_READ_AHEAD))
        monkeypatch.setattr(framing, "RECYCLE_MAX", SCALED_RECYCLE_MAX)
    return request.param


@pytest.mark.parametrize("client", sorted(captured()))
def test_replay_gets_a_well_formed_answer_to_every_frame(client, tmp_path, framing_mode):
    index, frames = read_corpus(captured()[client])
    kinds: dict[str, set[int]] = {"bytes": set(), "bytearray": set()}  # sizes handed over as each type
    with running_broker(tmp_path / "data") as broker:
        handle_frame = broker.broker.handle_frame

        async def watched(frame, conn):
            kinds[type(frame).__name__].add(len(frame))
            return await handle_frame(frame, conn)

        broker.broker.handle_frame = watched
        def create_topics():
            for topic in index["topics"]:
                broker.broker.logs.create_topic(topic["name"], topic["partitions"], {}, broker.broker.clock.now_ms(),
                                                topic_id=uuid.UUID(topic["topic_id"]))

        broker.in_broker(create_topics)
        connections: dict[int, socket.socket] = {}
        answered = 0
        try:
            for number, (entry, frame) in enumerate(zip(index["frames"], frames)):
                api_key, version, correlation_id = peek_api(frame)
                what = f"frame {number} of {client} {index['version']} ({entry['api']} v{version})"
                assert (api_key, version) == (entry["api_key"], entry["api_version"]), f"{what}: not what the index says"
                sock = connections.get(entry["connection"])
                if sock is None:
                    sock = connections[entry["connection"]] = socket.create_connection((broker.host, broker.port),
                                                                                       timeout=30)
                try:
                    sock.sendall(struct.pack(">i", len(frame)) + frame)
                    if not entry["expects_response"]:
                        continue
                    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
                    response = _recv_exact(sock, size)
                except (ConnectionError, OSError) as exc:
                    pytest.fail(f"{what}: no answer, the connection failed: {exc}")
                try:
                    answered_id, _ = _decode(api_key, version, response)
                except Exception as exc:  # any decoding fault is the broker's malformed answer
                    pytest.fail(f"{what}: the answer does not decode as {entry['api']} v{version}: {exc!r}")
                assert answered_id == correlation_id, f"{what}: answered under correlation id {answered_id}"
                answered += 1
        finally:
            for sock in connections.values():
                sock.close()
        assert broker.broker.metrics.closed_for_protocol_errors == 0
    assert answered == sum(1 for entry in index["frames"] if entry["expects_response"]) > 0
    if framing_mode == "as-read":
        assert not kinds["bytearray"]
    else:  # every body from SCALED_BODY_MIN on was received in place; some over the recycle limit
        assert kinds["bytearray"] and min(kinds["bytearray"]) >= SCALED_BODY_MIN
        assert all(size < SCALED_BODY_MIN for size in kinds["bytes"]), kinds
        assert max(kinds["bytearray"]) > SCALED_RECYCLE_MAX > min(kinds["bytearray"])
