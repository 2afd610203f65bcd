"""Request headers, request bodies and response encoding.

Schemas come from kio (generated from Kafka's JSON message specs, every version). This module owns
what kio leaves to the broker: reading the request header (v1, or v2 when the API version is
flexible; ClientId is a non-compact nullable string in both), picking the schema for (api_key,
version), and framing responses with the right response header (v0, or v1 when flexible; ApiVersions
always answers with v0 so that a client asking with a version we lack can still read the error,
KIP-511).

Tagged fields the schema does not define (KIP-482: a reader must skip them) are handled here too,
because kio's reader refuses them and its writer cannot write them: `read_entity` reads a top-level
tagged section field by field and returns the unknown fields by tag, and `encode_response` can add
unknown fields to a response's top-level tagged section (minibroker's own additions are listed in
minibroker.protocol.extensions).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Sequence

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio._kio_native import get_field_reader
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import get_field_tag
from kio.static.primitive import i16, i32
from kio.static.protocol import Entity

from minibroker.protocol.guard import RequestRejected, checker
from minibroker.protocol.produce_request import produce_decoder
from minibroker.protocol.records.varint import read_uvarint, write_uvarint

API_VERSIONS_KEY = 18
_HEADER_FIXED = struct.Struct(">hhih")
_RESPONSE_HEADER = struct.Struct(">ii")  # frame size, correlation id


class ProtocolError(Exception):
    """The peer sent something the broker cannot serve."""


class MalformedRequestError(ProtocolError):
    """Bytes that do not parse as the request they claim to be: close the connection."""


class UnknownApiKeyError(ProtocolError):
    pass


class UnsupportedVersionError(ProtocolError):
    pass


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes the header took in the frame; the body starts here


def _read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    return read_uvarint(buf, pos, max_bits=35, what="request header", error=MalformedRequestError)


def peek_api(frame: bytes | bytearray) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id), the first 8 bytes every request header starts with."""
    if len(frame) < 8:
        raise MalformedRequestError(f"request of {len(frame)} bytes is shorter than a header")
    return struct.unpack_from(">hhi", frame, 0)


def parse_header(frame: bytes | bytearray | memoryview, flexible: bool) -> RequestHeader:
    """Read the request header. `flexible` selects header v2 (tagged fields after ClientId). Any
    buffer type: the framing layer hands over bytes or a bytearray, by the frame's size."""
    if len(frame) < _HEADER_FIXED.size:
        raise MalformedRequestError(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id, client_id_len = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id = None
    if client_id_len >= 0:
        end = pos + client_id_len
        if end > len(frame):
            raise MalformedRequestError("client id runs past the end of the request")
        try:
            client_id = str(frame[pos:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequestError("client id is not UTF-8") from exc
        pos = end
    elif client_id_len != -1:
        raise MalformedRequestError(f"client id length {client_id_len}")
    if flexible:
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
            if pos > len(frame):
                raise MalformedRequestError("tagged field runs past the end of the request")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def kio_versions(api_key: int) -> tuple[int, int] | None:
    """The (min, max) versions kio has schemas for, or None for an API it does not know."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = schema_name_map[name]
    return min(versions), max(versions)


def api_name(api_key: int) -> str:
    """Kafka's name for an API kio knows ("Produce", "InitProducerId"): its request class's name."""
    versions = kio_versions(api_key)
    if versions is None:
        raise UnknownApiKeyError(f"unknown api key {api_key}")
    return load_request_schema(api_key, versions[1]).__name__.removesuffix("Request")


@dataclass(frozen=True, slots=True)
class ApiSchema:
    api_key: int
    version: int
    request: type
    response: type
    flexible: bool
    reader: Any
    writer: Any
    check: Any  # minibroker.protocol.guard: declared lengths against the bytes there, before `reader` runs
    # A decoder of this module's own that does guard + reader in one pass, or None (kio's reader).
    decode: Any = None


@functools.cache
def api_schema(api_key: int, version: int) -> ApiSchema:
    """Schemas, reader and writer for one API version. Raises UnsupportedVersionError if kio lacks it."""
    try:
        request = load_request_schema(api_key, version)
        response = load_response_schema(api_key, version)
    except KioIndexError as exc:
        raise UnsupportedVersionError(f"api {api_key} v{version}: {exc}") from None
    return ApiSchema(
        api_key,
        version,
        request,
        response,
        bool(request.__flexible__),
        entity_reader(request),
        entity_writer(response),
        checker(request),
        _DECODERS[api_key](version) if api_key in _DECODERS else None,
    )


# APIs whose requests are decoded here rather than by kio (same fields, same checks): Produce, whose
# records stay views of the frame instead of being copied out (minibroker.protocol.produce_request).
_DECODERS = {0: produce_decoder}


def decode_request(schema: ApiSchema, frame: bytes | bytearray, offset: int) -> tuple[Any, int]:
    """Decode the request body after the header: (request, trailing byte count).

    Any decoding fault is the peer's. Every declared length is first checked against the bytes in
    the frame (minibroker.protocol.guard): kio's native reader would allocate what a count claims before
    reading a byte of it. Bytes after the last field the schema defines are not a fault: Kafka's
    request parser reads the schema's fields and ignores what follows (librdkafka 2.16's Metadata
    v13 request for all topics carries 3 such bytes), so they are counted, not refused.

    Produce is decoded by minibroker.protocol.produce_request (the same checks and fields, records left in the
    frame).
    """
    if schema.decode is not None:
        try:
            request, end = schema.decode(frame, offset)
        except (IndexError, struct.error):
            raise MalformedRequestError(
                f"api {schema.api_key} v{schema.version}: {schema.request.__name__} is truncated") from None
        except RequestRejected as exc:
            raise MalformedRequestError(
                f"api {schema.api_key} v{schema.version}: {schema.request.__name__}: {exc}") from None
        return request, len(frame) - end
    try:
        rewritten = schema.check(frame, offset)
    except RequestRejected as exc:
        raise MalformedRequestError(f"api {schema.api_key} v{schema.version}: {exc}") from None
    if rewritten is not None:  # unknown tagged fields cut out (Kafka skips them; kio refuses them)
        frame = rewritten
    try:
        request, size = schema.reader(frame, offset)
    except Exception as exc:  # kio raises assorted errors on bad bytes: all mean "malformed"
        raise MalformedRequestError(
            f"cannot decode api {schema.api_key} v{schema.version}: {exc!r}"
        ) from None
    return request, len(frame) - offset - size


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """A whole request frame for a kio request object: size, request header (v2 when the request is
    flexible, else v1), body. The client side of the protocol, for tools and tests."""
    header_cls = RequestHeaderV2 if request.__flexible__ else RequestHeaderV1
    header = header_cls(
        request_api_key=i16(request.__api_key__),
        request_api_version=i16(request.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    entity_writer(header_cls)(buffer, header)
    entity_writer(type(request))(buffer, request)
    data = buffer.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    del data
    return buffer.getvalue()


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation_id, kio response) from a response frame without its size prefix. Top-level
    tagged fields the schema does not know are skipped, as KIP-482 asks of every reader."""
    correlation_id, response, _unknown = decode_response_tags(api_key, version, frame)
    return correlation_id, response


def decode_response_tags(api_key: int, version: int, frame: bytes) -> tuple[int, Any, dict[int, bytes]]:
    """`decode_response`, plus the top-level tagged fields the schema does not define, by tag."""
    response_cls = load_response_schema(api_key, version)
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    offset = 4 + (1 if response_cls.__flexible__ and api_key != API_VERSIONS_KEY else 0)
    response, size, unknown = read_entity(response_cls, frame, offset)
    if offset + size != len(frame):
        raise ProtocolError(f"response to api {api_key} v{version} has trailing bytes")
    return correlation_id, response, unknown


@functools.cache
def _field_plan(cls: type) -> tuple[tuple[tuple[str, Any], ...], dict[int, tuple[str, Any]]]:
    """The untagged fields of an entity in order and its tagged fields by tag, with kio's readers."""
    untagged, tagged = [], {}
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is None:
            untagged.append((field.name, get_field_reader(cls, field, False, False)))
        else:
            tagged[int(tag)] = (field.name, get_field_reader(cls, field, False, True))
    return tuple(untagged), tagged


def _untagged_size(cls: type, buf: bytes, offset: int) -> tuple[dict[str, Any], int]:
    values: dict[str, Any] = {}
    pos = offset
    for name, reader in _field_plan(cls)[0]:
        values[name], size = reader(buf, pos)
        pos += size
    return values, pos


def _read_tag_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    return read_uvarint(buf, pos, max_bits=35, what="tagged field", error=ProtocolError)


def read_tagged_section(buf: bytes, pos: int) -> tuple[list[tuple[int, bytes]], int]:
    """The (tag, raw value) pairs of a KIP-482 tagged section starting at `pos`, and where it ends
    (ProtocolError when it runs past the end of `buf`)."""
    count, pos = _read_tag_uvarint(buf, pos)
    fields = []
    for _ in range(count):
        tag, pos = _read_tag_uvarint(buf, pos)
        size, pos = _read_tag_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise ProtocolError(f"tagged field {tag} runs past the end of the message")
        fields.append((tag, bytes(buf[pos:end])))
        pos = end
    return fields, pos


def read_entity(cls: type[Entity], buf: bytes, offset: int) -> tuple[Any, int, dict[int, bytes]]:
    """Read a flexible top-level entity the way KIP-482 says: (entity, size, unknown tagged fields).

    kio's native reader is tried first (fast); when it refuses a tag it does not know, the entity is
    read again field by field with kio's own field readers, and the unknown top-level fields are
    returned raw. Unknown tags inside nested structures are still refused (none are sent to us).
    """
    try:
        entity, size = entity_reader(cls)(buf, offset)
        return entity, size, {}
    except KeyError:
        if not cls.__flexible__:
            raise
    values, pos = _untagged_size(cls, buf, offset)
    fields, end = read_tagged_section(buf, pos)
    known = _field_plan(cls)[1]
    unknown: dict[int, bytes] = {}
    for tag, raw in fields:
        if tag in known:
            name, reader = known[tag]
            values[name], _ = reader(raw, 0)
        else:
            unknown[tag] = raw
    return cls(**values), end - offset, unknown


def add_tagged_fields(cls: type, body: bytes, extra: Mapping[int, bytes]) -> bytes:
    """`body` (an encoded `cls`) with `extra` raw tagged fields added to its top-level tagged
    section, all fields in ascending tag order as KIP-482 requires. A tag the schema defines, or
    one already present, is refused (ValueError): these are additions, never replacements."""
    _values, pos = _untagged_size(cls, body, 0)
    fields, end = read_tagged_section(body, pos)
    if end != len(body):
        raise ValueError(f"{cls.__name__}: {len(body) - end} bytes after the tagged section")
    clash = set(extra) & (set(_field_plan(cls)[1]) | {tag for tag, _ in fields})
    if clash:
        raise ValueError(f"{cls.__name__} already defines tagged field(s) {sorted(clash)}")
    out = bytearray(body[:pos])
    write_tagged_section(sorted([*fields, *extra.items()]), out)
    return bytes(out)


def write_tagged_section(fields: Sequence[tuple[int, bytes]], out: bytearray) -> None:
    """Append a KIP-482 tagged section of (tag, raw value) pairs, given in ascending tag order."""
    write_uvarint(len(fields), out)
    for tag, raw in fields:
        write_uvarint(tag, out)
        write_uvarint(len(raw), out)
        out += raw


def encode_response(schema: ApiSchema, correlation_id: int, response: Any,
                    tagged_fields: Mapping[int, bytes] | None = None) -> bytes:
    """A whole response frame: size, response header, body. `tagged_fields` (flexible versions only)
    adds raw top-level tagged fields the schema does not define (see `add_tagged_fields`)."""
    buffer = io.BytesIO()
    buffer.write(b"\0" * _RESPONSE_HEADER.size)
    if schema.flexible and schema.api_key != API_VERSIONS_KEY:
        buffer.write(b"\0")  # response header v1: no tagged fields
    if tagged_fields and schema.flexible:
        body = io.BytesIO()
        schema.writer(body, response)
        buffer.write(add_tagged_fields(schema.response, body.getvalue(), tagged_fields))
    else:
        schema.writer(buffer, response)
    data = buffer.getbuffer()
    _RESPONSE_HEADER.pack_into(data, 0, len(data) - 4, correlation_id)
    del data
    return buffer.getvalue()
