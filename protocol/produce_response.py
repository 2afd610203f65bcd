"""Produce responses (v3-v13) written straight from the handler's dicts
(the broker's CPU per record: docs/benchmarks.md).

The counterpart of protocol.produce_request. kio's generic writer turns a Produce response into
kio objects first (minibroker.protocol.entities.build: an object per partition, an ErrorCode, a timedelta, a
datetime per timestamp) and then walks them field by field through per-field writer closures and a
BytesIO per tagged section: about 55 us for the four-partition response of a benchmark request
whose records cost the broker ~500 us in all. Here the same bytes come from one `struct` pack per
partition in the common case (no record errors, no message, no current leader).

`encode_produce_response` writes exactly what `encode_response(schema, correlation_id,
build(schema.response, body), tagged_fields)` writes for the same body (tests/protocol/test_produce_response.py
compares the two byte for byte over generated bodies of every version):

* the response header: the correlation id (header v0) before v9, plus an empty tagged section
  (header v1) from v9, the flexible versions;
* per topic its `name` (v3-v12; a string: int16 length before v9, compact from v9) or `topic_id`
  (v13; None writes the all-zero id), and per partition `index`, `error_code`, `base_offset`,
  `log_append_time` (a negative value, or none, writes -1, as build's None does), `log_start_offset`
  (v5+; -1 when absent), `record_errors` (v8+; `batch_index`, `batch_index_error_message`) and
  `error_message` (v8+), and from v10 the tagged `current_leader` when it is not kio's default
  (leader -1, epoch -1);
* `throttle_time` (ms), and from v10 the tagged `node_endpoints` when there are any;
* `tagged_fields` (flexible versions only, ignored before, as encode_response ignores them): raw
  top-level tagged fields merged with the schema's in ascending tag order, a tag the version's
  schema defines (`node_endpoints`, tag 0, from v10) refused with ValueError as add_tagged_fields
  refuses it;
* the same refusals on a body kio cannot write: a missing required field (KeyError), an error code
  kio's ErrorCode does not know (ValueError), a value beyond its field's width (struct.error
  where kio raises its own error).

Pure: dicts in, bytes out.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from minibroker.protocol.records.varint import write_uvarint

__all__ = ["MIN_VERSION", "MAX_VERSION", "encode_produce_response"]

MIN_VERSION, MAX_VERSION = 3, 13
FLEXIBLE_FROM = 9
_KNOWN_ERRORS = frozenset(int(code) for code in ErrorCode)
_NODE_ENDPOINTS_TAG = 0  # the top-level tag ProduceResponse defines from v10
_CURRENT_LEADER_TAG = 0  # PartitionProduceResponse's, from v10
_ZERO_UUID = bytes(16)
_ABSENT: Any = object()

_I16 = struct.Struct(">h").pack
_I32 = struct.Struct(">i").pack
_HEAD = struct.Struct(">ii")  # frame size, correlation id
_LEADER = struct.Struct(">ii")
# A partition's fixed fields: index, error_code, base_offset, log_append_time[, log_start_offset].
_PART_V3 = struct.Struct(">ihqq").pack
_PART_V5 = struct.Struct(">ihqqq").pack
# The same, then no record errors and a null message: v8 (int32 count 0, int16 -1), and the flexible
# versions (compact count 0 is 1, null is 0, then an empty tagged section).
_PART_V8_PLAIN = struct.Struct(">ihqqqih").pack
_PART_FLEX_PLAIN = struct.Struct(">ihqqqBBB").pack


def _uvarint(value: int) -> bytes:
    if value < 0x80:  # every count and length of a usual response
        return bytes((value,))
    out = bytearray()
    write_uvarint(value, out)
    return bytes(out)


def _string(value: str | None, flexible: bool) -> bytes:
    """A nullable string: compact (length + 1, 0 for null) when flexible, else int16 length (-1)."""
    if value is None:
        return b"\0" if flexible else b"\xff\xff"
    raw = value.encode()
    return (_uvarint(len(raw) + 1) if flexible else _I16(len(raw))) + raw


def _count(items: Any, flexible: bool) -> bytes:
    """An array's element count: compact (count + 1, 0 for null) when flexible, else int32 (-1 for
    null). kio writes a None it is given for an array as a null array, whether or not the field is
    nullable."""
    if items is None:
        return b"\0" if flexible else b"\xff\xff\xff\xff"
    return _uvarint(len(items) + 1) if flexible else _I32(len(items))


def _check_error(code: int) -> int:
    if code and code not in _KNOWN_ERRORS:
        ErrorCode(code)  # build's conversion: raises kio's ValueError
    return code


def _tagged(fields: list[tuple[int, bytes]]) -> bytes:
    """A tagged section of (tag, raw value) pairs in ascending tag order."""
    if not fields:
        return b"\0"
    out = [_uvarint(len(fields))]
    for tag, raw in fields:
        out += (_uvarint(tag), _uvarint(len(raw)), raw)
    return b"".join(out)


def _partition(p: Mapping[str, Any], version: int, flexible: bool) -> bytes:
    index = p["index"]
    code = _check_error(p["error_code"])
    base_offset = p["base_offset"]
    append_time = p.get("log_append_time")
    if append_time is None or append_time < 0:
        append_time = -1
    if version < 5:
        return _PART_V3(index, code, base_offset, append_time)
    start = p.get("log_start_offset", -1)
    if version < 8:
        return _PART_V5(index, code, base_offset, append_time, start)
    record_errors = p["record_errors"]
    message = p.get("error_message")
    leader = p.get("current_leader", _ABSENT) if version >= 10 else _ABSENT
    if leader is None:
        raise TypeError("current_leader is None")  # kio's writer cannot write it either
    if leader is not _ABSENT:
        leader_id, leader_epoch = leader.get("leader_id", -1), leader.get("leader_epoch", -1)
        if leader_id == -1 and leader_epoch == -1:  # kio's default: not written
            leader = None
    else:
        leader = None
    if record_errors is not None and not record_errors and message is None and leader is None:
        if flexible:
            return _PART_FLEX_PLAIN(index, code, base_offset, append_time, start, 1, 0, 0)
        return _PART_V8_PLAIN(index, code, base_offset, append_time, start, 0, -1)
    out = [_PART_V5(index, code, base_offset, append_time, start), _count(record_errors, flexible)]
    for error in record_errors or ():
        out += (_I32(error["batch_index"]), _string(error.get("batch_index_error_message"), flexible))
        if flexible:
            out.append(b"\0")
    out.append(_string(message, flexible))
    if flexible:
        tags = [] if leader is None else [(_CURRENT_LEADER_TAG, _LEADER.pack(leader_id, leader_epoch) + b"\0")]
        out.append(_tagged(tags))
    return b"".join(out)


def _node_endpoints(endpoints: Any) -> bytes:
    """ProduceResponse's `node_endpoints` (v10+, flexible): node_id, host, port, rack."""
    out = [_count(endpoints, True)]
    for node in endpoints or ():
        host = node["host"]
        if host is None:
            raise TypeError("Unexpectedly received None value")  # kio's writer: host is not nullable
        out += (_I32(node["node_id"]), _string(host, True), _I32(node["port"]),
                _string(node.get("rack"), True), b"\0")
    return b"".join(out)


def encode_produce_response(version: int, correlation_id: int, body: Mapping[str, Any],
                            tagged_fields: Mapping[int, bytes] | None = None) -> bytes:
    """The whole Produce response frame (size, header, body) for `body`, the handler's dicts with
    `throttle_time` in ms; `tagged_fields`: raw top-level tagged fields to add (flexible versions)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not encoded here (v{MIN_VERSION}-v{MAX_VERSION})")
    flexible = version >= FLEXIBLE_FROM
    by_id = version >= 13
    out = [b"", b"\0" if flexible else b""]  # frame size and correlation id go in first
    responses = body["responses"]
    out.append(_count(responses, flexible))
    for topic in responses or ():
        if by_id:
            topic_id: uuid.UUID | None = topic["topic_id"]
            out.append(_ZERO_UUID if topic_id is None else topic_id.bytes)
        else:
            name = topic["name"]
            if name is None:
                raise TypeError("Unexpectedly received None value")  # kio's writer: a name is not nullable
            out.append(_string(name, flexible))
        partitions = topic["partition_responses"]
        out.append(_count(partitions, flexible))
        for p in partitions or ():
            out.append(_partition(p, version, flexible))
        if flexible:
            out.append(b"\0")
    out.append(_I32(body.get("throttle_time", 0)))
    if flexible:
        tags = []
        endpoints = body.get("node_endpoints", ()) if version >= 10 else ()
        if endpoints is None or len(endpoints):  # kio leaves out only the default, an empty array
            tags.append((_NODE_ENDPOINTS_TAG, _node_endpoints(endpoints)))
        if tagged_fields:
            if version >= 10 and _NODE_ENDPOINTS_TAG in tagged_fields:
                raise ValueError(f"ProduceResponse already defines tagged field(s) [{_NODE_ENDPOINTS_TAG}]")
            tags = sorted([*tags, *tagged_fields.items()])
        out.append(_tagged(tags))
    size = sum(map(len, out)) + 4  # the correlation id; the size prefix counts what follows it
    out[0] = _HEAD.pack(size, correlation_id)
    return b"".join(out)
