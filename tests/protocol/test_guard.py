"""The request guard (protocol/guard.py): no declared length reaches kio's native reader unchecked.

kio's reader aborts the process (SIGABRT, no exception) when an array count asks for more memory
than exists, so the hostile inputs here go through `decode_request` in a worker subprocess: a crash
fails the test with the input that caused it instead of taking pytest down. Every (api, version)
the broker advertises is covered, from the handler registry.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from minibroker.protocol.guard import checker
from minibroker.protocol.messages import MalformedRequestError, api_schema, decode_request, parse_header
from tests.support import fuzzing
from tests.support.fuzzing import fuzz_settings, hostile_bodies, length_fields, served, served_ids, set_length

ROOT = Path(__file__).resolve().parents[2]
SERVED = served()

_WORKER = r"""
import struct, sys
from minibroker.protocol.messages import MalformedRequestError, api_schema, decode_request, parse_header
read, write = sys.stdin.buffer.read, sys.stdout.buffer.write
while (head := read(4)):
    frame = read(struct.unpack(">i", head)[0])
    api_key, version = struct.unpack_from(">hh", frame)
    try:
        schema = api_schema(api_key, version)
        decode_request(schema, frame, parse_header(frame, schema.flexible).size)
        write(b"D")
    except MalformedRequestError:
        write(b"M")
    except BaseException as exc:
        text = repr(exc).encode()[:2000]
        write(b"E" + struct.pack(">i", len(text)) + text)
    sys.stdout.buffer.flush()
"""


class DecodeWorker:
    """decode_request in a child process: 'D' (decoded) or 'M' (malformed); anything else fails."""

    def __init__(self) -> None:
        self.process = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def decode(self, frame: bytes) -> str:
        try:
            self.process.stdin.write(struct.pack(">i", len(frame)) + frame)
            self.process.stdin.flush()
            verdict = self.process.stdout.read(1)
        except BrokenPipeError:
            verdict = b""
        if not verdict:
            code = self.process.wait()
            self.close()
            self.start()
            pytest.fail(f"decode_request killed the process (exit {code}) on {frame.hex()}")
        if verdict == b"E":
            (size,) = struct.unpack(">i", self.process.stdout.read(4))
            pytest.fail(f"decode_request raised {self.process.stdout.read(size).decode()} on {frame.hex()}")
        return verdict.decode()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()
        self.process.stdout.close()


@pytest.fixture(scope="module")
def worker():
    w = DecodeWorker()
    yield w
    w.close()


def body_frame(api_key: int, version: int, body: bytes) -> bytes:
    return fuzzing.header(api_key, version, 1) + body


def decode(api_key: int, version: int, body: bytes):
    schema = api_schema(api_key, version)
    frame = body_frame(api_key, version, body)
    return decode_request(schema, frame, parse_header(frame, schema.flexible).size)


# ---- the reported crash, and the rules -----------------------------------------------------------


def test_the_23_byte_metadata_request_that_aborted_the_broker_is_refused(worker):
    """Metadata v12, topic count `ff ff ff ff 0f` (2**32 - 2 topics): kio would ask for 34 GB."""
    # size, api 3 v12, correlation id, client id "", header tags, topics, auto-create, ops, tags
    frame = bytes.fromhex("00000013" "0003000c" "00000001" "0000" "00" "ffffffff0f" "01" "00" "00")
    assert len(frame) == 23
    assert worker.decode(frame[4:]) == "M"
    with pytest.raises(MalformedRequestError, match=r"topics declares 4294967294 element\(s\) of at least 18"):
        decode(3, 12, bytes.fromhex("ffffffff0f") + b"\x01\x00\x00")


@pytest.mark.parametrize("version", [1, 4, 8])
def test_a_legacy_array_count_beyond_the_bytes_is_refused(worker, version):
    body = struct.pack(">i", 0x7FFFFFFF) + b"\x01\x00\x00"
    assert worker.decode(body_frame(3, version, body)) == "M"


def test_an_array_count_is_checked_against_the_smallest_element_not_one_byte():
    """Three v12 topics need at least 3 x 18 bytes (uuid, name, tagged fields); 20 are there."""
    body = b"\x04" + b"\0" * 20
    with pytest.raises(MalformedRequestError, match="at least 18 byte"):
        decode(3, 12, body)


def test_a_string_longer_than_the_request_is_refused():
    body = b"\x02" + b"\0" * 16 + b"\xff\x7f" + b"ab" + b"\0" * 4  # one topic named by 16382 bytes
    with pytest.raises(MalformedRequestError, match="name declares 16382 byte"):
        decode(3, 12, body)


def test_null_where_the_schema_forbids_it_is_malformed_as_in_kafka():
    """CreateTopics' configs array is not nullable: Kafka's reader refuses the request; kio would
    hand the handler None."""
    topic = b"\x02t" + struct.pack(">ih", 1, 1) + b"\x01" + b"\x00" + b"\x00"  # configs: null
    body = b"\x02" + topic + struct.pack(">i", 1000) + b"\x00\x00"
    with pytest.raises(MalformedRequestError, match="non-nullable field topics\\[\\].configs was serialized as null"):
        decode(19, 7, body)


def test_null_where_the_schema_allows_it_is_decoded():
    request, _ = decode(3, 12, b"\x00\x01\x00\x00")  # topics null: every topic
    assert request.topics is None


def _metadata_body(tagged_request: bytes, tagged_topic: bytes) -> bytes:
    topic = b"\0" * 16 + b"\x02t" + tagged_topic
    return b"\x02" + topic + b"\x01\x00" + tagged_request


def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them():
    """A newer client may send tags this schema does not know: Kafka keeps them as unknown tagged
    fields and reads on; kio would refuse them, so the guard cuts them out first."""
    plain, _ = decode(3, 12, _metadata_body(b"\x00", b"\x00"))
    unknown = b"\x02" + b"\x63\x03abc" + b"\x7f\x00"  # tags 99 (3 bytes) and 127 (empty)
    request, trailing = decode(3, 12, _metadata_body(unknown, b"\x01\x05\x02zz"))
    assert request == plain == MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="t"),),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False,
    )
    assert trailing == 0


def test_an_unknown_tagged_field_longer_than_the_request_is_refused():
    with pytest.raises(MalformedRequestError, match="tag 99"):
        decode(3, 12, _metadata_body(b"\x01\x63\x7f", b"\x00"))


# ---- every API at every version ------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version", "name"), SERVED, ids=served_ids())
@fuzz_settings(5)
@given(data=st.data())
def test_every_api_and_version_survives_hostile_bodies(worker, api_key, version, name, data):
    """For a random valid body: the guard accepts it as it is; every strict prefix is refused; each
    length field set to each extreme is decoded or refused in the worker, never a crash. Then
    random hostile bodies (mutated or plain random bytes) the same way."""
    body = data.draw(fuzzing.valid_bodies(api_key, version), label="valid body")
    # Accepted with nothing cut out of what kio itself wrote (kio's reader may still refuse a
    # value it cannot represent, e.g. a timedelta beyond Python's, which is not a crash).
    assert checker(api_schema(api_key, version).request)(body, 0) is None
    for cut in range(len(body)):
        with pytest.raises(MalformedRequestError):
            decode(api_key, version, body[:cut])
    for pos, encoding in length_fields(api_schema(api_key, version).request, body):
        for choice in range(6):
            worker.decode(body_frame(api_key, version, set_length(body, pos, encoding, choice)))
    for _ in range(5):
        hostile = data.draw(hostile_bodies(api_key, version), label="hostile body")
        assert worker.decode(body_frame(api_key, version, hostile)) in "DM"
